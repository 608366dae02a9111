"""Integration tests: real components (moto server over HTTP, subprocesses, torchrun, HTTP servers)."""
