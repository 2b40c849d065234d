"""The traces a batch covers: files, folders (recursively) and glob patterns, expanded."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable

from traceanalyzer.errors import UsageError

#: File names a folder argument contributes (hidden files and folders, e.g. caches, are skipped).
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".pftrace", ".perfetto-trace",
                  ".perfetto", ".pb", ".pb.gz", ".trace")
_GLOB_CHARS = re.compile(r"[*?\[]")


def expand_inputs(items: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Absolute trace paths from files, folders (recursively) and glob patterns; sorted, unique.

    Raises :class:`UsageError` when an argument matches nothing, since that is almost always a
    typo. The files themselves are not opened here (a worker does that).
    """
    found: set[str] = set()
    for item in items:
        text = os.fspath(item)
        if os.path.isdir(text):
            found.update(_trace_files_under(text))
        elif os.path.lexists(text):
            found.add(os.path.abspath(text))
        elif _GLOB_CHARS.search(text):
            matches = sorted(glob.glob(text, recursive=True))
            if not matches:
                raise UsageError(f"{text}: no file matches this pattern")
            for m in matches:
                if os.path.isdir(m):
                    found.update(_trace_files_under(m))
                else:
                    found.add(os.path.abspath(m))
        else:
            raise UsageError(f"{text}: no such file or folder")
    return sorted(found)


def _trace_files_under(folder: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [os.path.abspath(os.path.join(root, f)) for f in files
                if not f.startswith(".") and f.lower().endswith(TRACE_SUFFIXES)]
    return out

