"""The real-bug suite's vLLM entries: one module per bug of the zoo, ``v<NN>.py``
(:mod:`rigs.bugs.entry` says what an entry holds)."""
