"""Reading a saved log from start to end: plain or compressed, in bounded chunks of whole lines.

``gzip``, ``bzip2`` and ``xz`` files are recognised by their first bytes (not their name) and
decompressed as a stream; another compression (zstd, zip) raises :class:`UnreadableLog` with a
one-line reason.  Binary-looking data is still read (a log truncated by ``copytruncate`` starts
with NUL bytes), but :attr:`LogReader.binary` says so, for the summary of a file where nothing
was recognised.  Lines are
returned without their newline, bad UTF-8 replaced, a line longer than ``max_line`` bytes cut
and marked with ``…`` (so no figure is read from a number the cut may have shortened).  The last
line of the file is returned only if a newline ends it: an incomplete line is counted in
:attr:`LogReader.cut_tail`, never parsed.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["LogReader", "UnreadableLog"]

CUT = "\u2026"
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
)


class UnreadableLog(Exception):
    """The file is not a text log this reader can read (binary, or an unknown compression)."""


class LogReader:
    """Iterates over the lines of ``path`` in chunks; ``position`` is the bytes of the file read."""

    def __init__(self, path: Path, *, chunk: int = 256 << 10, max_line: int = 64 << 10) -> None:
        self._path = path
        self._chunk = chunk
        self._max_line = max_line
        self.compression = ""
        self.binary = False  # the first block looks like binary data
        self.cut_tail = 0  # bytes of an unterminated last line (not parsed)
        self._raw: BinaryIO | None = None

    @property
    def position(self) -> int:
        return 0 if self._raw is None or self._raw.closed else self._raw.tell()

    def chunks(self) -> Iterator[list[str]]:
        """The file's complete lines, one list per chunk read."""
        with self._path.open("rb") as raw:
            self._raw = raw
            stream = self._open(raw)
            partial, skipping = b"", False
            while block := stream.read(self._chunk):
                pieces = block.split(b"\n")
                complete: list[bytes] = []
                if len(pieces) == 1:  # no newline in this block
                    partial = b"" if skipping else partial + block
                else:
                    complete = ([] if skipping else [partial + pieces[0]]) + pieces[1:-1]
                    partial, skipping = pieces[-1], False
                if len(partial) > self._max_line:  # keep the start of a huge line, skip its rest
                    complete.append(partial[: self._max_line + 1])
                    partial, skipping = b"", True
                yield [self._text(p) for p in complete]
            self.cut_tail = len(partial)

    def _open(self, raw: BinaryIO) -> BinaryIO:
        head = raw.read(512)
        raw.seek(0)
        kind = next((name for magic, name in _MAGIC if head.startswith(magic)), "")
        self.compression = kind
        if kind == "gzip":
            return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
        if kind == "bzip2":
            return bz2.BZ2File(raw)  # type: ignore[return-value]
        if kind == "xz":
            return lzma.LZMAFile(raw)  # type: ignore[return-value]
        if kind:
            raise UnreadableLog(f"{kind}-compressed; decompress it first (zstdcat, unzip -p)")
        self.binary = _binary(head)
        return raw

    def _text(self, piece: bytes) -> str:
        if len(piece) > self._max_line:
            return piece[: self._max_line].decode("utf-8", errors="replace") + CUT
        return piece.decode("utf-8", errors="replace")


def _binary(head: bytes) -> bool:
    """More than a tenth of the bytes are control characters other than tab, newline, CR and ESC."""
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 13, 27))
    return bool(head) and controls * 10 > len(head)
