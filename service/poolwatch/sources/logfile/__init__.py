"""Engine-neutral log files: following one as it grows (``tail``), reading a saved one, compressed
or not (``reader``), and the replayed timeline every engine's replay emits (``replay``)."""
