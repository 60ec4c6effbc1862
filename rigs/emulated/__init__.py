"""Emulated SGLang deployments under the real probe and the detector, as the tests and the
benchmarks both run them: the detector watching one (:mod:`.watched`), and a fault-free soak of
one (:mod:`.soak`)."""
