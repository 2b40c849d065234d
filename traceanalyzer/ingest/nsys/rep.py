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
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.external import timeout_from_env
from traceanalyzer.ingest.nsys.reader import read_nsys
from traceanalyzer.model import Trace

HASH_CHUNK = 1 << 20
#: Seconds an ``nsys export`` may run before it is killed: generous, since a real export of a
#: big report takes minutes; ``$TRACEANALYZER_NSYS_TIMEOUT`` sets another (in seconds).
EXPORT_TIMEOUT_S = 30 * 60
EXPORT_TIMEOUT_ENV = "TRACEANALYZER_NSYS_TIMEOUT"
#: Seconds of an export before stderr says what is waited for (a quick one says nothing).
NOTICE_AFTER_S = 2.0
#: Seconds between SIGTERM and SIGKILL to an export that timed out.
KILL_GRACE_S = 5
SQLITE_MAGIC = b"SQLite format 3\x00"

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


def export_timeout() -> float:
    """Seconds an export may take: $TRACEANALYZER_NSYS_TIMEOUT, else :data:`EXPORT_TIMEOUT_S`."""
    return timeout_from_env(EXPORT_TIMEOUT_ENV, EXPORT_TIMEOUT_S)


def export_sqlite(path: str | os.PathLike[str], use_cache: bool = True) -> Path:
    """The SQLite export of the report at ``path``, from the cache or made now with nsys.

    ``use_cache=False`` exports again whatever the cache holds (and replaces its entry). An
    export is checked (a SQLite database that holds tables) before it enters the cache, so a
    failed one is never kept.
    """
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
    if use_cache and target.is_file() and _export_problem(target) is None:
        from traceanalyzer.ingest.cache import touch

        touch(target)
        return target
    nsys = find_nsys()
    if nsys is None:
        named = os.environ.get("NSYS")
        where = f"$NSYS ({named}) is not an executable" if named else "nsys is not on PATH"
        raise InputError(rep, f"is an Nsight Systems report and {where}: {MANUAL_EXPORT}")
    timeout = export_timeout()
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
        returncode, stdout, stderr = _run_export(cmd, rep, timeout)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        detail = _last_line(stderr) or _last_line(stdout) or "no output"
        status = f"exit code {returncode}" if returncode else "no output file"
        raise InputError(rep, f"nsys export failed ({status}): {detail}")
    problem = _export_problem(partial)
    if problem is not None:
        partial.unlink(missing_ok=True)
        raise InputError(rep, f"nsys export wrote {problem}, not an Nsight Systems export")
    os.replace(partial, target)
    from traceanalyzer.ingest.cache import stored

    stored(folder.parent, target)
    return target


def _run_export(cmd: list[str], rep: Path, timeout: float) -> tuple[int, str, str]:
    """Run ``nsys export`` in a session of its own; once it has taken :data:`NOTICE_AFTER_S`,
    say on stderr what is waited for; kill it (and whatever it started) after ``timeout``
    seconds with an :class:`InputError`."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, errors="replace",
                                start_new_session=True)
    except OSError as exc:
        raise InputError(rep, f"could not run {cmd[0]} ({exc.strerror or exc})") from None
    try:
        try:
            stdout, stderr = proc.communicate(timeout=min(NOTICE_AFTER_S, timeout))
        except subprocess.TimeoutExpired:
            if timeout <= NOTICE_AFTER_S:
                raise
            sys.stderr.write(f"traceanalyzer: waiting for `nsys export` of {rep.name} to "
                             f"SQLite (stopped after {_duration(timeout)}; "
                             f"${EXPORT_TIMEOUT_ENV} sets the limit in seconds)\n")
            sys.stderr.flush()
            stdout, stderr = proc.communicate(timeout=timeout - NOTICE_AFTER_S)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise InputError(rep, f"nsys export did not finish in {_duration(timeout)} and was "
                              f"stopped; set ${EXPORT_TIMEOUT_ENV} (seconds) to wait longer, "
                              "or run `nsys export --type sqlite` by hand and pass the "
                              ".sqlite") from None
    except BaseException:  # Ctrl-C: the export must not outlive us
        _kill(proc)
        raise
    return proc.returncode, stdout, stderr


def _kill(proc: subprocess.Popen[str]) -> None:
    """End the export's process group: SIGTERM, then SIGKILL after :data:`KILL_GRACE_S`."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 120 else f"{seconds:g} s"


def _export_problem(path: Path) -> str | None:
    """What is wrong with an export at ``path`` (None: a SQLite database holding tables)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return "a file that is not SQLite"
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'")
            if not tables.fetchone()[0]:
                return "a SQLite file without tables"
        finally:
            con.close()
    except (OSError, sqlite3.Error) as exc:
        return f"a damaged SQLite file ({exc})"
    return None


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def read_nsys_rep(path: str | os.PathLike[str], use_cache: bool = True) -> Trace:
    """Read an ``.nsys-rep`` report through its (cached, unless ``use_cache=False``) SQLite
    export. An export that cannot be read is removed from the cache, so the next run exports
    the report again instead of failing on the same file."""
    exported = export_sqlite(path, use_cache=use_cache)
    try:
        trace = read_nsys(exported)
    except InputError as exc:
        exported.unlink(missing_ok=True)
        raise InputError(path, f"its SQLite export {exported} {exc.problem}") from None
    trace.meta.path = str(path)
    trace.meta.extra.setdefault("nsys", {})["exported_sqlite"] = str(exported)
    return trace
