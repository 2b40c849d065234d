"""``.ncu-rep`` reports, read through Nsight Compute's own CLI.

The report format is private to Nsight Compute, so it is never parsed here: ``ncu --import
REPORT --csv --page raw`` (and ``--page details``, for its rule messages) runs in a subprocess
with a timeout, and its output is read as the CSV pages are (:mod:`.csvpage`). ``ncu`` is
``$TRACEANALYZER_NCU`` when set, else ``ncu`` on PATH, else the newest
``/opt/nvidia/nsight-compute/*/ncu``. A gzipped report (``.ncu-rep.gz``) is decompressed to a
temporary file first (:func:`traceanalyzer.ingest.unpack.unpacked`).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.external import timeout_from_env

NCU_ENV = "TRACEANALYZER_NCU"
TIMEOUT_ENV = "TRACEANALYZER_NCU_TIMEOUT"
#: Seconds an ``ncu --import`` may take: a report of hundreds of launches takes seconds.
IMPORT_TIMEOUT_S = 300.0
#: Where Nsight Compute installs by default on Linux.
INSTALL_GLOB = "/opt/nvidia/nsight-compute/*/ncu"
#: The magic bytes of an .ncu-rep.
NCU_REP_MAGIC = b"NVR\x00"
MANUAL = (
    "export it where Nsight Compute is installed with `ncu --import REPORT --csv --page "
    "raw > raw.csv` and pass the CSV, or put ncu on PATH (or set $TRACEANALYZER_NCU)"
)


def find_ncu() -> str | None:
    """The ncu executable: ``$TRACEANALYZER_NCU``, ``ncu`` on PATH, the newest default install."""
    named = os.environ.get(NCU_ENV)
    if named:
        return shutil.which(named) or (named if os.access(named, os.X_OK) else None)
    found = shutil.which("ncu")
    if found:
        return found
    installed = sorted(p for p in glob.glob(INSTALL_GLOB) if os.access(p, os.X_OK))
    return installed[-1] if installed else None


def import_timeout() -> float:
    return timeout_from_env(TIMEOUT_ENV, IMPORT_TIMEOUT_S)


def export_pages(path: str | os.PathLike[str]) -> tuple[str, str | None]:
    """The raw page and the details page (None when ncu could not print it) of the report at
    ``path`` (an .ncu-rep, or one gzipped)."""
    rep = Path(path)
    ncu = find_ncu()
    if ncu is None:
        named = os.environ.get(NCU_ENV)
        where = f"${NCU_ENV} ({named}) is not an executable" if named else "ncu is not on PATH"
        raise InputError(rep, f"is an Nsight Compute report and {where}: {MANUAL}")
    from traceanalyzer.ingest.unpack import unpacked

    try:
        rep.stat()
    except OSError as exc:
        raise InputError(rep, f"cannot be read ({exc.strerror or exc})") from None
    # A gzipped report is unpacked to a temporary file (ncu reads only plain reports), bounded
    # by the free disk (ingest/unpack.py).
    with unpacked(rep, ".ncu-rep") as report:
        raw = _run(ncu, report, "raw", rep)
        try:
            details: str | None = _run(ncu, report, "details", rep)
        except InputError:
            details = None  # the raw page has every number; the rule messages are extra
    return raw, details


def _run(ncu: str, report: Path, page: str, shown: Path) -> str:
    cmd = [ncu, "--import", str(report), "--csv", "--page", page]
    timeout = import_timeout()
    try:
        done = subprocess.run(
            cmd, capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise InputError(
            shown,
            f"`ncu --import` did not finish in {timeout:.0f} s (set ${TIMEOUT_ENV} to wait longer)",
        ) from None
    except OSError as exc:
        raise InputError(shown, f"cannot run {ncu} ({exc.strerror or exc})") from None
    out = done.stdout.decode("utf-8", errors="replace")
    if done.returncode != 0 or '"ID"' not in out[:4096]:
        err = (done.stderr or done.stdout).decode("utf-8", errors="replace").strip()
        last = err.splitlines()[-1][:300] if err else f"exit status {done.returncode}"
        raise InputError(shown, f"`ncu --import --csv --page {page}` failed: {last}")
    return out
