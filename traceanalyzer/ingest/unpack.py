"""Gzipped copies of formats that are read in place (an Nsight Systems SQLite export), unpacked
to a temporary file first: SQLite cannot read through a decompressing stream.

Exports are gzipped to be moved around a cluster, and to keep this repository's own samples
small; the user passes the ``.sqlite.gz`` as it is.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from traceanalyzer.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20
#: Free space left on the temporary folder's disk after unpacking, for everything else.
DISK_MARGIN = 256 << 20


def is_gzip(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


@contextlib.contextmanager
def unpacked(path: str | os.PathLike[str], suffix: str) -> Iterator[Path]:
    """``path`` itself when it is not gzipped, else a temporary uncompressed copy of it (in
    ``$TMPDIR``), removed on exit. The copy stops with a one-line error before it fills the
    disk: the size trailer can lie, so the bytes are counted as they are written."""
    p = Path(path)
    if not is_gzip(p):
        yield p
        return
    folder = tempfile.gettempdir()
    room = shutil.disk_usage(folder).free - DISK_MARGIN
    fd, name = tempfile.mkstemp(prefix="traceanalyzer-", suffix=suffix, dir=folder)
    out = Path(name)
    try:
        written = 0
        with os.fdopen(fd, "wb") as dst, gzip.open(p, "rb") as src:
            while chunk := src.read(CHUNK):
                written += len(chunk)
                if written > room:
                    raise InputError(p, f"unpacks to more than the {max(room, 0) / 2**30:.1f} GiB "
                                        f"free in {folder}; gunzip it where there is room, or "
                                        "set TMPDIR to a larger disk")
                dst.write(chunk)
        yield out
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(p, f"is not a valid gzip file ({exc})") from None
    finally:
        out.unlink(missing_ok=True)
