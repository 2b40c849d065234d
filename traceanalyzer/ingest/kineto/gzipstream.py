"""Open a Kineto trace, plain or gzipped; gzip through a stream that survives a cut-off file."""

from __future__ import annotations

import io
import zlib
from pathlib import Path
from typing import Any, BinaryIO

try:  # ISA-L inflates gzip about twice as fast as zlib; optional
    from isal import isal_zlib as _inflate

    INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate.error)
except ImportError:  # pragma: no cover - depends on the environment
    _inflate = zlib  # type: ignore[no-redef]
    INFLATE_ERRORS = (zlib.error,)


class TooMuchDecoded(Exception):
    """More bytes decoded than the stream's ``limit``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"decoded more than {limit} bytes")
        self.limit = limit


def open_trace(path: Path, limit: int | None = None) -> BinaryIO:
    """The trace's bytes: the file itself, or a :class:`GzipStream` over it if it is gzipped,
    which raises :class:`TooMuchDecoded` once it has inflated more than ``limit`` bytes."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return GzipStream(open(path, "rb"), limit=limit)  # type: ignore[return-value]
    return open(path, "rb")


class GzipStream(io.RawIOBase):
    """Streaming gzip decompression that keeps what it decoded when the input is cut short.

    ``gzip.GzipFile`` discards a whole ``read()`` worth of output when the stream ends early; a
    profiler killed mid-write leaves exactly such a file, and its events must not be lost.
    ``readinto`` inflates straight into the caller's buffer (one copy per byte), with ISA-L's
    inflate when ``isal`` is installed (about twice zlib's speed).
    """

    #: Bytes inflated per step at most (``max_length``): the count stops a gzip bomb (a MB of
    #: input inflates to a GB) within one step of its limit.
    STEP = 8 << 20

    def __init__(self, raw: BinaryIO, block: int = 1 << 20, limit: int | None = None) -> None:
        self.raw, self.block, self.limit = raw, block, limit
        self.decomp = _inflate.decompressobj(wbits=31)
        self.pending = memoryview(b"")
        self.truncated = False
        self.done = False
        #: Bytes inflated so far, over every member: what the memory bound counts (a member's
        #: size trailer is only its size mod 2**32, and only the last member's is at the end).
        self.decoded = 0
        self.unconsumed = b""

    def readable(self) -> bool:
        return True

    def _refill(self) -> None:
        data = self.unconsumed or self.raw.read(self.block)
        if not data:
            # Output the last step held back (max_length reached as the input ran out).
            out = b"" if self.decomp.eof else self.decomp.flush()
            if out:
                self._count(out)
                self.pending = memoryview(out)
                return
            if not self.decomp.eof:
                self.truncated = True
            self.done = True
            return
        out = self.decomp.decompress(data, self.STEP)
        self.unconsumed = self.decomp.unconsumed_tail
        while self.decomp.eof and self.decomp.unused_data and not self.unconsumed:
            rest = self.decomp.unused_data  # concatenated gzip members
            self.decomp = _inflate.decompressobj(wbits=31)
            out += self.decomp.decompress(rest, self.STEP)
            self.unconsumed = self.decomp.unconsumed_tail
        self._count(out)
        self.pending = memoryview(out)

    def _count(self, out: bytes) -> None:
        self.decoded += len(out)
        if self.limit is not None and self.decoded > self.limit:
            raise TooMuchDecoded(self.limit)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        have = 0
        while have < len(view):
            if not self.pending:
                if self.done:
                    break
                self._refill()
                continue
            take = min(len(self.pending), len(view) - have)
            view[have : have + take] = self.pending[:take]
            self.pending = self.pending[take:]
            have += take
        return have

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            parts = []
            while chunk := self.read(64 << 20):
                parts.append(chunk)
            return b"".join(parts)
        buf = bytearray(size)
        del buf[self.readinto(buf) :]
        return bytes(buf)

    def close(self) -> None:
        self.raw.close()
        super().close()
