"""The discovery file's keeper: a tiny process that removes a rank's file once its engine process is
gone, however it ended.

An engine process rarely ends through ``atexit``: SGLang stops its schedulers with SIGKILL (its
``kill_process_tree``, and ``PR_SET_PDEATHSIG`` when the launcher dies), a pod's SIGTERM kills a
process that has no handler of its own, and the OOM killer sends SIGKILL.  No handler inside the
process can run then, and poolwatch installs none (it never changes how an engine reacts to a
signal).  So, once a rank is announced, the probe starts one keeper: ``python -I -S -c`` with a
dozen lines (:data:`KEEPER`; no site, no ``.pth``: it imports nothing of poolwatch or the engine;
about 10 MB resident, measured), which blocks reading a pipe whose only writer is the engine
process.  When that process ends, in any way, the kernel closes the pipe; the keeper reads
end-of-file, removes the discovery file if it still names this boot (a rank restarted under the
same name has written its own by then, which stays), and exits.  A graceful stop
(:meth:`Keeper.close`, the publisher's ``stop``) removes the file itself and closes the pipe.

Cost: one process per announced rank for the rank's life, started once at attach (off the
scheduler's steps; its ``Popen`` returns in under a millisecond).  A keeper that cannot start is
noted in the probe's health; the rank stays announced, only its file may outlive it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import IO

__all__ = ["KEEPER", "Keeper"]

# argv: the discovery file and the boot that wrote it.  Reads stdin to its end, then removes the
# file if it is still that boot's.  Never raises (a keeper that fails leaves the file, as before).
KEEPER = """
import json, os, sys
path, boot = sys.argv[1], sys.argv[2]
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
try:
    with open(path, "rb") as f:
        if json.loads(f.read(65536)).get("boot_id") == boot:
            os.unlink(path)
except Exception:
    pass
"""


class Keeper:
    """The keeper process of one discovery file (see the module docstring)."""

    def __init__(self, path: Path, boot_id: str, *, python: str = sys.executable) -> None:
        self.path = path
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [python, "-I", "-S", "-c", KEEPER, str(path), boot_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,  # a Ctrl-C to the engine's process group leaves it to do its work
        )

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def close(self) -> None:
        """The engine process stops on purpose: let the keeper go (the caller removed the file)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        pipe: IO[bytes] | None = proc.stdin
        if pipe is not None:
            pipe.close()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=2)
