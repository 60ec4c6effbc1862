"""Sub-commands of the ``poolwatch`` CLI."""
