""".nsys-rep reports: exported to SQLite by Nsight Systems' own CLI, then read by :mod:`.nsys`.

The report format is private to Nsight Systems, so we never parse it: when ``nsys`` is on PATH
(or ``$NSYS`` names it) we run ``nsys export --type sqlite`` in a subprocess. Exports are cached
by the report's content hash under ``nsys-export/`` of the cache folder
(:func:`traceanalyzer.ingest.cache.cache_root`: ``$TRACEANALYZER_CACHE_DIR``, else the user's
cache folder), so a report is exported once however often, and from wherever, it is analyzed;
the exports count towards the cache's size bound.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.nsys.reader import read_nsys
from traceanalyzer.model import Trace

HASH_CHUNK = 1 << 20

MANUAL_EXPORT = (
    "export it by hand with `nsys export --type sqlite --output REPORT.sqlite REPORT.nsys-rep` "
    "and pass the .sqlite, or put nsys on PATH (or set $NSYS to its path)"
)


def find_nsys() -> str | None:
    """The nsys executable: ``$NSYS`` if set (a path or a command name), else ``nsys`` on PATH."""
    named = os.environ.get("NSYS")
    if named:
        return shutil.which(named) or (named if os.access(named, os.X_OK) else None)
    return shutil.which("nsys")


def cache_dir() -> Path:
    from traceanalyzer.ingest.cache import EXPORTS_DIR, cache_root

    return cache_root() / EXPORTS_DIR


def content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def export_sqlite(path: str | os.PathLike[str]) -> Path:
    """The SQLite export of the report at ``path``, from the cache or made now with nsys."""
    rep = Path(path)
    try:
        size = rep.stat().st_size
    except OSError as exc:
        raise InputError(rep, f"cannot be read ({exc.strerror or exc})") from None
    if size == 0:
        raise InputError(rep, "is empty (0 bytes): not an Nsight Systems report")
    try:
        key = content_hash(rep)
    except OSError as exc:
        raise InputError(rep, f"cannot be read ({exc.strerror or exc})") from None
    folder = cache_dir()
    target = folder / f"{key}.sqlite"
    if target.is_file() and target.stat().st_size > 0:
        from traceanalyzer.ingest.cache import touch

        touch(target)
        return target
    nsys = find_nsys()
    if nsys is None:
        named = os.environ.get("NSYS")
        where = f"$NSYS ({named}) is not an executable" if named else "nsys is not on PATH"
        raise InputError(rep, f"is an Nsight Systems report and {where}: {MANUAL_EXPORT}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(rep, f"cannot create the export cache {folder} ({exc.strerror})") from None
    # Export under a private name, then rename: a crash or a concurrent run never leaves a
    # half-written file under the cache key.
    partial = folder / f"{key}.{os.getpid()}.partial.sqlite"
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
           "--output", str(partial), str(rep)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
    except OSError as exc:
        raise InputError(rep, f"could not run {nsys} ({exc.strerror or exc})") from None
    if proc.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        detail = _last_line(proc.stderr) or _last_line(proc.stdout) or "no output"
        status = f"exit code {proc.returncode}" if proc.returncode else "no output file"
        raise InputError(rep, f"nsys export failed ({status}): {detail}")
    os.replace(partial, target)
    from traceanalyzer.ingest.cache import stored

    stored(folder.parent, target)
    return target


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def read_nsys_rep(path: str | os.PathLike[str]) -> Trace:
    """Read an ``.nsys-rep`` report through its (cached) SQLite export."""
    exported = export_sqlite(path)
    try:
        trace = read_nsys(exported)
    except InputError as exc:
        raise InputError(path, f"its SQLite export {exported} {exc.problem}") from None
    trace.meta.path = str(path)
    trace.meta.extra.setdefault("nsys", {})["exported_sqlite"] = str(exported)
    return trace
