"""Engine-neutral log files: following one as it grows (``tail``), reading a saved one, compressed
or not (``reader``), which folded snapshots a live log source hands on (``notable``), and the
replayed timeline every engine's replay emits (``replay``)."""
