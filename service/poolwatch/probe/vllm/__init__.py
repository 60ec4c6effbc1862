"""The vLLM V1 engine room: release shapes, readers of the block pool and scheduler, the step hooks,
activation through vLLM's ``vllm.general_plugins`` entry point, and the reference-count census."""
