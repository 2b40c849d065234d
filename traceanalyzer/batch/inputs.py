"""The traces a batch covers: files, folders (recursively) and glob patterns, expanded.

Globs are matched here rather than by :func:`glob.glob`, whose ``**`` follows symbolic links
to folders without end: one link back to a parent made the same trace appear 41 times, and two
make the walk exponential. Each real folder (device, inode) is walked once per pattern, and a
trace reached under several names (a path and a glob, a link and its target, hard links) is
listed once.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Iterator

from traceanalyzer.errors import UsageError

#: File names a folder argument contributes (hidden files and folders, e.g. caches, are skipped).
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz", ".nsys-rep", ".pftrace", ".perfetto-trace",
                  ".perfetto", ".pb", ".pb.gz", ".trace")
_GLOB_CHARS = re.compile(r"[*?\[]")


def is_pattern(text: str) -> bool:
    """Whether ``text`` is a glob pattern (holds ``*``, ``?`` or ``[``)."""
    return bool(_GLOB_CHARS.search(text))


def expand_inputs(items: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Absolute trace paths from files, folders (recursively) and glob patterns; sorted, one per
    file (see the module doc).

    Raises :class:`UsageError` when an argument matches nothing, since that is almost always a
    typo. The files themselves are not opened here (a worker does that).
    """
    found: list[str] = []
    for item in items:
        text = os.fspath(item)
        if os.path.isdir(text):
            found += _trace_files_under(text)
        elif os.path.lexists(text):
            found.append(os.path.abspath(text))
        elif is_pattern(text):
            matches = sorted(match_glob(text))
            if not matches:
                raise UsageError(f"{text}: no file matches this pattern")
            for m in matches:
                if os.path.isdir(m):
                    found += _trace_files_under(m)
                else:
                    found.append(os.path.abspath(m))
        else:
            raise UsageError(f"{text}: no such file or folder")
    return unique_files(found)


def unique_files(paths: Iterable[str]) -> list[str]:
    """``paths`` sorted, with every file kept once: of the names of one file (same device and
    inode), the one through no symbolic link if there is one, then the shortest."""
    by_file: dict[object, list[str]] = {}
    for path in set(paths):
        try:
            st = os.stat(path)
            ident: object = (st.st_dev, st.st_ino)
        except OSError:
            ident = path  # a dangling link: the worker reports it
        by_file.setdefault(ident, []).append(path)
    return sorted(min(names, key=lambda p: (os.path.realpath(p) != p, len(p), p))
                  for names in by_file.values())


def _trace_files_under(folder: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(folder):  # followlinks=False: no loops
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [os.path.abspath(os.path.join(root, f)) for f in files
                if not f.startswith(".") and f.lower().endswith(TRACE_SUFFIXES)]
    return out


def _split(pattern: str) -> tuple[str, list[str]]:
    """The literal folder a pattern starts from, and its remaining components."""
    parts = pattern.split(os.sep)
    start = os.sep if pattern.startswith(os.sep) else os.curdir
    if pattern.startswith(os.sep):
        parts = parts[1:]
    parts = [p for p in parts if p not in ("", ".")]
    literal = []
    while parts and not is_pattern(parts[0]):
        literal.append(parts.pop(0))
    return os.path.join(start, *literal), parts


def match_glob(pattern: str) -> list[str]:
    """The paths ``pattern`` matches, as :func:`glob.glob` with ``recursive=True`` (``**``
    matches zero or more folders; hidden names only by a pattern that starts with a dot), but
    walking each real folder at most once for each ``**``, so links that loop end."""
    pattern = os.path.expanduser(pattern)
    base, parts = _split(pattern)
    if not parts:
        return [base] if os.path.lexists(base) else []
    out = [_plain_name(p, pattern) for p in _match(base, parts, set())]
    if not os.path.isabs(pattern):  # relative pattern: relative results, as glob gives
        out = [os.path.relpath(p) for p in out]
    return sorted(set(out))


def _plain_name(path: str, pattern: str) -> str:
    """``path`` under its name through no link when the pattern matches that name too (the walk
    may reach a folder through a link first)."""
    real = os.path.realpath(path)
    if real != os.path.abspath(path) and matches_pattern(pattern, real):
        return real
    return path


def _match(folder: str, parts: list[str], seen: set[tuple[int, int, int]]) -> Iterator[str]:
    head, rest = parts[0], parts[1:]
    if head == "**":
        if rest:
            yield from _match(folder, rest, seen)
        else:  # a trailing ``**``: this folder and each below it (their traces are walked)
            yield folder
        for sub in _subfolders(folder, len(parts), seen):
            yield from _match(sub, parts, seen)
        return
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    hidden_ok = head.startswith(".")
    for name in names:
        if (name.startswith(".") and not hidden_ok) or not fnmatch.fnmatchcase(name, head):
            continue
        path = os.path.join(folder, name)
        if not rest:
            yield path
        elif os.path.isdir(path):
            yield from _match(path, rest, seen)


def _subfolders(folder: str, depth: int, seen: set[tuple[int, int, int]]) -> Iterator[str]:
    """The non-hidden folders in ``folder`` that this ``**`` (told apart by ``depth``, its
    number of remaining components) has not walked yet."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith(".") or not os.path.isdir(path):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        key = (depth, st.st_dev, st.st_ino)
        if key in seen:
            continue
        seen.add(key)
        yield path


def matches_pattern(pattern: str, path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (which need not exist yet) is a name ``pattern`` would match, or a file
    under a folder it matches that a folder walk would take as a trace."""
    pat = _components(os.path.abspath(os.path.expanduser(pattern)))
    target = _components(os.path.abspath(os.fspath(path)))
    return _matches(pat, target) or (
        os.path.basename(os.fspath(path)).lower().endswith(TRACE_SUFFIXES)
        and any(_matches(pat, target[:n]) for n in range(1, len(target))))


def _components(path: str) -> list[str]:
    return [p for p in path.split(os.sep) if p]


def _matches(pat: list[str], name: list[str]) -> bool:
    if not pat:
        return not name
    head = pat[0]
    if head == "**":
        return any(_matches(pat[1:], name[i:]) for i in range(len(name) + 1)
                   if all(not n.startswith(".") for n in name[:i]))
    if not name:
        return False
    if name[0].startswith(".") and not head.startswith("."):
        return False
    return fnmatch.fnmatchcase(name[0], head) and _matches(pat[1:], name[1:])


# -- what a batch leaves out ---------------------------------------------------------------------

#: The files a batch writes at the top of its output folder (reports go under ``reports/``).
BATCH_FILES = ("manifest.json", "index.html", "summary.csv", "summary.parquet", "job.json",
               "job.html", "job_ranks.parquet")
#: The gzip header's file name that ``--annotate`` writes into ``.json.gz`` copies.
ANNOTATED_GZIP_NAME = b"traceanalyzer-annotated.json"
#: The findings track's name, in every annotated copy (Chrome JSON and Perfetto).
FINDINGS_MARK = b"traceanalyzer findings"
_OWN_JSON = re.compile(rb'"tool"\s*:\s*\{\s*"name"\s*:\s*"traceanalyzer"|"kind"\s*:\s*"job"')
_TAIL = 1 << 20


def left_out(path: str) -> str | None:
    """Why a batch leaves ``path`` out, or None to analyze it: traceanalyzer's own output (a
    batch folder's manifest, index, summary or reports; a JSON report or job file) or a copy
    annotated by ``--annotate`` (its findings track would be analyzed as the trace's)."""
    if not _regular(path):
        return None  # a FIFO would block this read: the worker refuses it with a clear error
    name = os.path.basename(path)
    folder = os.path.dirname(path)
    if name in BATCH_FILES[1:4] and _is_own_json(os.path.join(folder, BATCH_FILES[0])):
        return "an output of traceanalyzer batch"
    if (os.path.basename(folder) == "reports" and name.endswith(".html")
            and _is_own_json(os.path.join(os.path.dirname(folder), BATCH_FILES[0]))):
        return "an output of traceanalyzer batch"
    if _is_own_json(path):
        return "a traceanalyzer report, not a trace"
    if _is_annotated(path):
        return "a copy annotated by traceanalyzer --annotate"
    return None


def _regular(path: str) -> bool:
    import stat

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _head(path: str, size: int = 512) -> bytes:
    if not _regular(path):  # never open a FIFO or a device
        return b""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


def _is_own_json(path: str) -> bool:
    head = _head(path)
    return head.lstrip()[:1] == b"{" and b"traceEvents" not in head and bool(
        _OWN_JSON.search(head))


def _is_annotated(path: str) -> bool:
    """The gzip header's name that ``--annotate`` writes, or the findings track's name near the
    end of an uncompressed file (the track is written last). A gzip copy made by other means
    is not recognised without reading it whole, which this does not do."""
    head = _head(path, 64 + len(ANNOTATED_GZIP_NAME))
    if head[:2] == b"\x1f\x8b":
        return len(head) > 10 and bool(head[3] & 0x08) and not head[3] & 0x04 and head[
            10:10 + len(ANNOTATED_GZIP_NAME) + 1] == ANNOTATED_GZIP_NAME + b"\0"
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - _TAIL))
            return FINDINGS_MARK in fh.read(_TAIL)
    except OSError:
        return False
