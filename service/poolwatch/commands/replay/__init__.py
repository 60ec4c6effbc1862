"""``poolwatch replay``: :mod:`~poolwatch.commands.replay.command` (the command: a saved engine log
read as a timeline, its exit codes) and :mod:`~poolwatch.commands.replay.writers` (its table and
JSON output)."""
