"""A reference engine defined in the tests: a toy scheduler with one free list (``scheduler.py``)
and its probe room (``engine.py``, ``reader.py``), written as a third engine's room would be.
It passes the same contract as SGLang and vLLM (``tests/probe/test_engine_contract.py``): the
proof that a third engine is a sibling folder plus one registry entry."""
