"""Following a log file that another process appends to (blocking I/O; run it in a thread).

Survives what happens to log files in practice: rotation (the path now names a new file: the
old one is read to its end first; a last line it holds without a newline is incomplete, so it is
counted in ``TailRead.cut`` and never parsed), truncation (``copytruncate``: the file shrank --
or was refilled past our offset before we looked: the last bytes read no longer sit before it),
deletion (the path gone at two reads in a row is an ``io`` error: the target goes down), a
last line without its newline yet (kept until the newline arrives), bytes that are not UTF-8
(replaced) and huge lines (cut to ``max_line`` bytes and marked with ``…``, so no figure is read
from a number the cut may have shortened; the rest of the line is skipped).  Each call reads at
most ``max_read`` bytes, so a large backlog is worked off over several calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from poolwatch.sources.failures import scrape_failure
from poolwatch.sources.logfile.reader import CUT

__all__ = ["LogTail", "TailRead"]

_MARK_BYTES = 64


@dataclass(frozen=True, slots=True)
class TailRead:
    lines: list[str]
    rotated: bool = False  # the path names a new file
    truncated: bool = False  # the file shrank below what was read
    more: bool = False  # the read stopped at max_read with data left
    cut: int = 0  # bytes of an unterminated last line of a rotated file (incomplete: not parsed)


class LogTail:
    """Reads the whole lines appended to ``path`` since the previous call."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        backfill: int = 1 << 20,
        max_line: int = 64 << 10,
        max_read: int = 4 << 20,
    ) -> None:
        self._path = Path(path)
        self._backfill = backfill  # on first open, start this many bytes before the end
        self._max_line = max_line
        self._max_read = max_read
        self._file: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None
        self._partial = b""
        self._skipping = False  # inside the rest of an over-long line
        self._resume: int | None = None  # offset to resume at after close()
        self._mark = b""  # the last bytes read, ending at the current offset (a rewrite check)
        self._missing = 0  # reads in a row that found the path gone

    @property
    def position(self) -> int:
        """Bytes of the current file read so far."""
        return 0 if self._file is None else self._file.tell()

    def finish(self) -> list[str]:
        """The unterminated last line, for a caller that knows the file is complete and whole."""
        return self._end_partial()

    def close(self) -> None:
        """Release the file; a later read resumes where this one stopped if the file is the same."""
        if self._file is not None:
            self._resume = self._file.tell()
            self._file.close()
            self._file = None

    def __enter__(self) -> LogTail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self) -> TailRead:
        try:
            return self._read()
        except OSError as exc:
            self.close()
            raise scrape_failure(exc, str(self._path)) from None

    def _read(self) -> TailRead:
        if self._file is None:
            self._open(first=self._ident is None)
        assert self._file is not None
        truncated = self._check_truncated(self._file)
        lines, more = self._drain(self._file, self._max_read)
        rotated, cut = False, 0
        self._check_deleted()
        if not more and self._rotated():
            rest, _ = self._drain(self._file, self._max_read)
            lines += rest
            cut = 0 if self._skipping else len(self._partial)
            self._partial = b""
            self.close()
            self._resume = None  # a new file: start at its beginning
            self._open(first=False)
            rotated = True
        return TailRead(lines, rotated, truncated, more, cut)

    def _open(self, *, first: bool) -> None:
        handle = self._path.open("rb")
        st = os.fstat(handle.fileno())
        same = self._ident == (st.st_dev, st.st_ino)
        resume, self._resume = self._resume, None
        self._file, self._ident = handle, (st.st_dev, st.st_ino)
        if same and resume is not None and resume <= st.st_size:
            handle.seek(resume)  # reopened after close() or an error: keep the partial line too
            return
        self._partial, self._skipping, self._mark = b"", False, b""
        if first and st.st_size > self._backfill:
            handle.seek(st.st_size - self._backfill)
            self._skipping = True  # we landed inside a line: drop it

    def _rotated(self) -> bool:
        try:
            st = self._path.stat()
        except FileNotFoundError:
            return False  # between rename and re-create: keep the old file for now
        return (st.st_dev, st.st_ino) != self._ident

    def _check_deleted(self) -> None:
        """A path gone at two reads in a row is deleted, not mid-rotation: an ``io`` failure."""
        self._missing = 0 if self._path.exists() else self._missing + 1
        if self._missing >= 2:
            self.close()
            self._resume, self._ident = None, None
            raise FileNotFoundError(f"{self._path}: the log file was deleted")

    def _check_truncated(self, handle: BinaryIO) -> bool:
        pos = handle.tell()
        size = os.fstat(handle.fileno()).st_size
        mark = self._mark
        rewritten = bool(mark) and pos >= len(mark) and size >= pos
        if rewritten:
            rewritten = os.pread(handle.fileno(), len(mark), pos - len(mark)) != mark
        if size >= pos and not rewritten:
            return False
        handle.seek(0)
        self._partial, self._skipping, self._mark = b"", False, b""
        return True

    def _drain(self, handle: BinaryIO, budget: int) -> tuple[list[str], bool]:
        chunk = handle.read(budget)
        self._mark = (self._mark + chunk)[-_MARK_BYTES:] if chunk else self._mark
        pieces = chunk.split(b"\n")
        self._partial += pieces[0]
        lines: list[str] = []
        for piece in pieces[1:]:
            lines += self._complete()
            self._partial = piece
        self._cap_partial(lines)
        return lines, len(chunk) == budget

    def _complete(self) -> list[str]:
        """The line now ended by a newline (nothing if it was the tail of an over-long line)."""
        data, skipped = self._partial, self._skipping
        self._partial, self._skipping = b"", False
        return [] if skipped else [_text(data, self._max_line)]

    def _cap_partial(self, lines: list[str]) -> None:
        if self._skipping:
            self._partial = b""
        elif len(self._partial) > self._max_line:
            lines.append(_text(self._partial, self._max_line))
            self._partial, self._skipping = b"", True

    def _end_partial(self) -> list[str]:
        return [] if not self._partial or self._skipping else self._complete()


def _text(data: bytes, max_line: int) -> str:
    if len(data) > max_line:
        return data[:max_line].decode("utf-8", errors="replace") + CUT
    return data.decode("utf-8", errors="replace")
