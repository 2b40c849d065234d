"""The one output guard: every file a command writes is checked here before any work is done.

An output may not be an input (the same resolved path, or the same file under another name: a
hard link or a symbolic link, compared by ``os.stat``'s device and inode), nor a name that an
input glob or folder would take as a trace next time, nor the same file as another output. A
symbolic link, a FIFO or another special file is refused rather than replaced by a regular
file, and a folder is not a file name. ``-`` (standard output) and :data:`STREAMS`
(``/dev/stdout``, ``/dev/stderr``, ``/dev/null``, written through) pass. Each refusal is one line and exit code 2.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from traceanalyzer.errors import UsageError

#: What a file that is neither regular nor a folder is, by ``stat.S_IFMT``.
_SPECIAL = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def check_outputs(
    outputs: Iterable[tuple[str, str | os.PathLike[str] | None]],
    inputs: Iterable[str | os.PathLike[str]] = (),
    patterns: Iterable[str] = (),
) -> None:
    """Refuse (``UsageError``) any output in ``outputs`` (pairs of the option that names it,
    e.g. ``--json``, and its path; None or ``-`` are skipped) that would replace an input, a
    link or a special file, or that ``patterns`` (the glob and folder arguments the inputs came
    from) would match as an input."""
    by_name: dict[object, Path] = {}
    for src in map(Path, inputs):
        by_name[_resolved(src)] = src
        src_ident = _ident(src)
        if src_ident is not None:
            by_name[src_ident] = src
    pats = list(patterns)
    seen: dict[object, str] = {}
    for option, out in outputs:
        if out is None or os.fspath(out) == "-" or os.fspath(out) in STREAMS:
            continue
        path = Path(out)
        what = f"{option} {path}" if option else str(path)
        _check_kind(path, what)
        ident = _ident(path)
        resolved = _resolved(path)
        same = by_name.get(resolved) or (by_name.get(ident) if ident is not None else None)
        if same is not None:
            raise UsageError(
                f"{what}: is the input trace {same}; refusing to overwrite it, choose another path"
            )
        for pattern in pats:
            from traceanalyzer.batch.inputs import matches_pattern

            if matches_pattern(pattern, path):
                raise UsageError(
                    f"{what}: the input {pattern!s} would take it as a trace next "
                    "time; write it somewhere else"
                )
        key = ident if ident is not None else resolved
        if key in seen:
            raise UsageError(f"{what}: is also the output of {seen[key]}; give each its own path")
        seen[key] = what


#: Special files an output may name: written through, never replaced (``-`` is the same as the
#: first).
STREAMS = ("/dev/stdout", "/dev/stderr", "/dev/null")


def _check_kind(path: Path, what: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{what}: cannot be checked ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(
            f"{what}: is a symbolic link (to {os.readlink(path)}); refusing to "
            "replace it with a regular file: name its target or another path"
        )
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what}: is a folder; name a file")
    kind = _SPECIAL.get(stat.S_IFMT(st.st_mode))
    if kind is not None:
        raise UsageError(
            f"{what}: is {kind}; refusing to replace it with a regular file "
            "(use - for standard output)"
        )


def _ident(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop: compare as written
        return path.absolute()


def input_patterns(items: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The arguments among ``items`` that expand to several traces: globs and folders."""
    from traceanalyzer.batch.inputs import is_pattern

    return [os.fspath(i) for i in items if is_pattern(os.fspath(i)) or os.path.isdir(os.fspath(i))]
