"""Command line: parse, call the library, render."""
