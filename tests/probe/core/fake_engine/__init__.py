"""A stand-in engine package for the call-site tests: its frames are "the engine's"."""
