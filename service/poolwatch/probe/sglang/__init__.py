"""Everything SGLang-specific in the probe: release families (shapes), readers, hooks, activation,
censuses of SGLang's pools and guard mode's repairs."""
