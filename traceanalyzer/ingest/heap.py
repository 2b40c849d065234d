"""The C heap's free pages, given back to the system once a read has dropped its buffers.

glibc keeps what is freed for the next ``malloc``, but what a read frees there (connectorx's
Arrow buffers, the Kineto decoders' strings) is not what the analysis allocates next: Polars
allocates from its own jemalloc. Left alone, that free memory stays in the process's RSS for
the whole run (bench/NOTES.md, "nsys memory" and "End-to-end analysis, round 5").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed() -> None:
    """Give the C heap's free pages back to the system. connectorx builds its Arrow buffers
    with the C library's malloc, and glibc keeps what is freed of them: after the raw kernel
    table of a 300 MB export is dropped, 140 MiB of the process's RSS is such free memory,
    which the next table's read would not reuse (bench/NOTES.md, nsys memory). A few
    milliseconds; called where a raw table of millions of rows has just been dropped."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
