"""Compile models into Neuron (or CPU) artifacts, cached by content hash."""
