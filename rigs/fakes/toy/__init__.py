"""A reference engine: a toy scheduler with one free list (:mod:`.scheduler`) and its probe room
(:mod:`.engine`, :mod:`.reader`), written as a third engine's room would be.  It passes the same
contract as SGLang and vLLM (``tests/probe/test_engine_contract.py``): the proof that a third
engine is a sibling folder plus one registry entry."""
