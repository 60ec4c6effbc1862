"""The real-bug suite's SGLang entries: one module per bug of the zoo, ``s<NN>.py``
(:mod:`rigs.bugs.entry` says what an entry holds)."""
