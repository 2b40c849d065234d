"""Ingest: turn a trace file of any supported format into a canonical :class:`Trace`.

Ingestors are the only code that reads trace files. Each format is a package (``kineto/``,
``nsys/``, ``perfetto/``) that exposes ``read_<format>(path) -> Trace``, and an entry of the
registry in :mod:`.formats`. :func:`load` picks the ingestor by sniffing the file's first bytes
(never by extension alone) and goes through the Parquet cache (:mod:`.cache`).
"""

from __future__ import annotations

import contextvars
import gzip
import os
import zlib
from pathlib import Path

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.bounds import check_trace
from traceanalyzer.ingest.formats import FORMATS, GZIP_MAGIC, expected
from traceanalyzer.ingest.heap import release_freed
from traceanalyzer.ingest.textcap import cap_text
from traceanalyzer.model import Trace

__all__ = ["load", "read_any", "sniff", "check_memory", "available_memory", "input_size",
           "decoded_budget", "too_much_decoded", "MEMORY_PER_BYTE", "BASE_MEMORY",
           "NO_MEMORY_CHECK_ENV"]


def sniff(path: str | os.PathLike[str]) -> str:
    """Name the format of ``path`` (a key of :data:`~traceanalyzer.ingest.formats.FORMATS`:
    "kineto", "nsys", "nsys-rep" or "perfetto").

    Raises :class:`InputError` for anything that is not a readable trace file.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(p, "is a directory, expected a trace file")
    if not p.exists():
        raise InputError(p, "no such file")
    kind = _special_kind(p)
    if kind:  # opening a FIFO blocks until a writer comes: refuse before any open
        raise InputError(p, f"is {kind}, not a regular file: expected a trace file")
    try:
        with open(p, "rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise InputError(p, f"cannot be read ({exc.strerror or exc})") from None
    for fmt in FORMATS.values():
        if fmt.suffix is not None and p.name.endswith(fmt.suffix):
            return fmt.name
    if not head:
        raise InputError(p, "is empty")
    for fmt in FORMATS.values():
        if fmt.magic is not None and head.startswith(fmt.magic):
            return fmt.name
    if head.startswith(GZIP_MAGIC):
        try:
            with gzip.open(p, "rb") as fh:
                head = fh.read(64)
        except (OSError, EOFError, zlib.error) as exc:  # zlib.error: corrupt deflate data
            raise InputError(p, f"is not a valid gzip file ({exc})") from None
        if not head:
            raise InputError(p, "is an empty gzip file")
        for fmt in FORMATS.values():  # a gzipped SQLite export
            if fmt.magic is not None and fmt.gzip_ok and head.startswith(fmt.magic):
                return fmt.name
    for fmt in FORMATS.values():
        if fmt.looks_like is not None and fmt.looks_like(head):
            return fmt.name
    raise InputError(p, f"is not a trace: expected {expected()}")


def _special_kind(path: Path) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (a FIFO, a device)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # the open below says what is wrong
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


#: Peak memory of an analysis per byte of (uncompressed) input, plus the interpreter and
#: libraries (:data:`BASE_MEMORY`): each format's measured ratio with a margin
#: (:mod:`.formats`).
MEMORY_PER_BYTE = {f.name: f.memory_per_byte for f in FORMATS.values()
                   if f.memory_per_byte is not None}
BASE_MEMORY = 400 << 20
NO_MEMORY_CHECK_ENV = "TRACEANALYZER_NO_MEMORY_CHECK"


#: The decoded-bytes budget of the read in progress (in this thread or task), set by
#: :func:`read_any` from the memory measured at its check, before the reader's threads and
#: imports take address space of their own.
_budget: contextvars.ContextVar[int | None] = contextvars.ContextVar("decoded_budget",
                                                                      default=None)


def check_memory(path: str | os.PathLike[str], fmt: str) -> int | None:
    """Stop with a message before an ingest that cannot fit in memory: the OOM killer would end
    the process without a word. Set $TRACEANALYZER_NO_MEMORY_CHECK=1 to try anyway.

    Returns the bytes of decoded data the memory left can take (:func:`decoded_budget`), None
    when unchecked."""
    ratio = MEMORY_PER_BYTE.get(fmt)
    available = available_memory()
    if ratio is None or available is None or os.environ.get(NO_MEMORY_CHECK_ENV):
        return None
    size = input_size(path)
    need = BASE_MEMORY + int(size * ratio)
    if need > available:
        raise InputError(path, f"needs about {need / 2**30:.1f} GiB of memory to read "
                               f"({size / 2**30:.1f} GiB of {fmt} data) and only "
                               f"{available / 2**30:.1f} GiB is available; run it on a machine "
                               "with more memory, or record a shorter trace (fewer steps); set "
                               f"{NO_MEMORY_CHECK_ENV}=1 to try anyway")
    return max(int((available - BASE_MEMORY) / ratio), 0)


#: Address space the process's threads and allocators reserve beyond the memory they use
#: (thread stacks, Polars's and jemalloc's per-thread arenas), per thread of Polars's pool and
#: for the rest: a 7 MB trace's ``analyze`` peaks at 1.5 GiB of address space (VmPeak) for
#: 180 MB resident on 2 threads. Counted only under an address-space limit (RLIMIT_AS).
ADDRESS_SPACE_PER_THREAD = 160 << 20
ADDRESS_SPACE_BASE = 256 << 20
#: A cgroup v1 limit at or above this is "no limit" (the kernel's page-rounded LONG_MAX).
CGROUP_V1_UNLIMITED = 1 << 62


def available_memory() -> int | None:
    """Bytes this process can still use: the least of MemAvailable, what its cgroup (v2
    ``memory.max`` or v1 ``memory.limit_in_bytes``) leaves, and what its address-space and
    data-segment limits (RLIMIT_AS, RLIMIT_DATA) leave, less the address space threads reserve."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    found += _cgroup_left()
    found += _rlimit_left()
    return max(min(found), 0) if found else None


def _cgroup_folders() -> list[tuple[str, Path]]:
    """("v1" or "v2", folder) of this process's memory cgroup, then the mount's root folder."""
    folders: list[tuple[str, Path]] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, where = (line.split(":", 2) + ["", ""])[:3]
        where = where.lstrip("/")
        if controllers == "":
            folders.append(("v2", Path("/sys/fs/cgroup") / where))
        elif "memory" in controllers.split(","):
            folders.append(("v1", Path("/sys/fs/cgroup/memory") / where))
    folders += [("v2", Path("/sys/fs/cgroup")), ("v1", Path("/sys/fs/cgroup/memory"))]
    return folders


def _cgroup_left() -> list[int]:
    """What each cgroup memory limit on this process leaves (limit - usage)."""
    left = []
    seen: set[Path] = set()
    for version, folder in _cgroup_folders():
        if folder in seen:
            continue
        seen.add(folder)
        limit_file, used_file = (("memory.max", "memory.current") if version == "v2"
                                 else ("memory.limit_in_bytes", "memory.usage_in_bytes"))
        try:
            limit = (folder / limit_file).read_text().strip()
            if limit == "max" or int(limit) >= CGROUP_V1_UNLIMITED:
                continue
            left.append(int(limit) - int((folder / used_file).read_text().strip()))
        except (OSError, ValueError):
            continue
    return left


def _rlimit_left() -> list[int]:
    """What RLIMIT_AS and RLIMIT_DATA leave: the soft limit less VmSize (VmData), less what the
    threads still to start will reserve (:data:`ADDRESS_SPACE_PER_THREAD`)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Linux
        return []
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return []
    used = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmSize", "VmData", "Threads"):
            try:
                used[key] = int(value.split()[0]) * (1 if key == "Threads" else 1024)
            except (ValueError, IndexError):
                pass
    left = []
    for which, key in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(which)[0]
        if soft == resource.RLIM_INFINITY or key not in used:
            continue
        to_start = max(_threads() - used.get("Threads", 1), 0)
        reserve = ADDRESS_SPACE_BASE + ADDRESS_SPACE_PER_THREAD * to_start
        left.append(soft - used[key] - reserve)
    return left


def _threads() -> int:
    """Threads a read and an analysis run: the main one, Polars's pool and the decoders."""
    try:
        import polars as pl

        return int(pl.thread_pool_size()) + 4
    except Exception:  # noqa: BLE001 - an estimate; polars is a dependency
        return (os.cpu_count() or 1) + 4


def decoded_budget(fmt: str) -> int | None:
    """Bytes of decoded (uncompressed) ``fmt`` data the memory available can take, as the
    reader counts them while it decompresses: as measured by :func:`read_any`'s check, or now;
    None when unchecked. A reader stops past it with :func:`too_much_decoded`."""
    if os.environ.get(NO_MEMORY_CHECK_ENV):
        return None
    measured = _budget.get()
    if measured is not None:
        return measured
    ratio = MEMORY_PER_BYTE.get(fmt)
    if ratio is None or os.environ.get(NO_MEMORY_CHECK_ENV):
        return None
    available = available_memory()
    if available is None:
        return None
    return max(int((available - BASE_MEMORY) / ratio), 0)


def too_much_decoded(path: str | os.PathLike[str], fmt: str, budget: int) -> InputError:
    """The error of a read that decoded more than ``budget`` bytes (:func:`decoded_budget`)."""
    ratio = MEMORY_PER_BYTE.get(fmt, 1.0)
    return InputError(path, f"decompresses to more than {budget / 2**30:.2f} GiB of {fmt} data, "
                            f"which needs more than the {(BASE_MEMORY + budget * ratio) / 2**30:.1f} "
                            "GiB of memory available; run it on a machine with more memory, or "
                            f"record a shorter trace; set {NO_MEMORY_CHECK_ENV}=1 to try anyway")


def input_size(path: str | os.PathLike[str]) -> int:
    """Size of the data an ingestor will decode, as far as it is known before decoding: a
    gzip file's size trailer (the last member's size mod 2**32), at least; the reader counts
    what it really decodes (:func:`decoded_budget`)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        if fh.read(2) != GZIP_MAGIC or size < 18:
            return size
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    # The trailer holds the size mod 2**32. A file under 200 MB holds under 4 GiB of JSON (it
    # compresses less than 20x); above that, assume it compresses at least 3x.
    while size * 20 >= 1 << 32 and isize < 3 * size:
        isize += 1 << 32
    return isize


def read_any(path: str | os.PathLike[str], fmt: str | None = None,
             use_cache: bool = True) -> Trace:
    """Read ``path`` with the ingestor for its format, bypassing the cache.

    A file whose size or modification time differs after the read from before it (cut
    shorter, still being written, or overwritten) is analyzed as the read saw it, with a
    warning, and flagged in ``meta.extra["changed_while_read"]`` so that the cache does not
    keep it. ``use_cache=False`` also bypasses the caches a reader keeps of its own (an
    ``.nsys-rep``'s SQLite export).
    """
    fmt = fmt or sniff(path)
    token = _budget.set(check_memory(path, fmt))
    before = _file_state(path)
    try:
        trace = check_trace(cap_text(_read(path, fmt, use_cache)))
    finally:
        _budget.reset(token)
        release_freed()  # the read's buffers, which the analysis would not reuse
    after = _file_state(path)
    if after != before:
        if after[0] < 0:
            how = "removed"
        elif after[0] != before[0]:
            how = f"{before[0]:,} -> {after[0]:,} bytes"
        else:
            how = f"rewritten, {after[0]:,} bytes"
        trace.meta.warnings.append(f"the file changed while it was being read ({how}); "
                                   "analyzed what the read saw")
        trace.meta.extra["changed_while_read"] = True
    return trace


def _read(path: str | os.PathLike[str], fmt: str, use_cache: bool = True) -> Trace:
    spec = FORMATS.get(fmt)
    if spec is None:
        raise InputError(path, f"unknown format {fmt!r}")
    if not use_cache and spec.own_cache:
        return spec.read(path, use_cache=False)
    return spec.read(path)


def _file_state(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Size and modification time (ns) of ``path``; (-1, -1) once it is gone."""
    try:
        st = os.stat(path)
    except OSError:  # gone by now: whatever was read stands
        return -1, -1
    return st.st_size, st.st_mtime_ns


def load(
    path: str | os.PathLike[str],
    *,
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    trace_processor: str | os.PathLike[str] | None = None,
) -> Trace:
    """Read a trace in any supported format into canonical frames, through the Parquet cache.

    ``trace_processor`` (or ``$TRACEANALYZER_TRACE_PROCESSOR``) names a Perfetto
    ``trace_processor_shell`` to read Perfetto traces with; such reads bypass the cache, whose
    entries hold what the built-in reader made.
    """
    fmt = sniff(path)
    if FORMATS[fmt].reads_externally(trace_processor):
        return check_trace(cap_text(FORMATS[fmt].read(path, trace_processor=trace_processor)))
    if not use_cache:
        return read_any(path, fmt, use_cache=False)
    from traceanalyzer.ingest.cache import cached_read

    return cached_read(path, fmt, cache_dir=cache_dir)
