"""Stand-ins the tests and the benchmarks both drive, in no engine's venv: a clock moved by hand
(:mod:`.clock`), SGLang's scheduler objects (:mod:`.sglang`), vLLM's block pool and scheduler
(:mod:`.vllm`), a reference third engine with its probe room (:mod:`.toy`), and one driver per
engine over them, as the engine contract runs them (:mod:`.drivers`)."""
