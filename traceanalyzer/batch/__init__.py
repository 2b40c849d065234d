"""Batch mode: analyze many traces in parallel, one report each, plus an index and a summary.

:func:`run_batch` is the library entry point behind ``traceanalyzer batch``. Work runs on a local
process pool (:mod:`.pool`) or a Dask cluster (:mod:`.dask_runner`); both call the same
:func:`.task.analyze_one` and hand back report text, which this module writes. Output folder::

    DIR/index.html            links to every report; failed traces with their error
    DIR/summary.parquet/.csv  one row per trace (see :mod:`.summary`)
    DIR/manifest.json         per trace: report key, report name, status, error
    DIR/reports/NAME.json     the same document as ``analyze --json``
    DIR/reports/NAME.html     the same page as ``analyze --html``

A report is up to date when its key (trace content hash + tool version + rule configuration
hash) matches the manifest's; re-runs skip those traces unless ``force``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import polars as pl

from traceanalyzer import __version__
from traceanalyzer.batch.task import Settings, config_hash, portable_rule_config
from traceanalyzer.errors import UsageError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
REPORTS = "reports"
#: File names a folder argument contributes (hidden files and folders, e.g. caches, are skipped).
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".pftrace", ".perfetto-trace",
                  ".perfetto", ".pb", ".pb.gz", ".trace")
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass
class BatchResult:
    out_dir: Path
    summary: pl.DataFrame
    analyzed: int = 0
    skipped: int = 0
    failed: int = 0
    seconds: float = 0.0
    pool_restarts: int = 0
    errors: list[str] = field(default_factory=list)
    #: The multi-rank job analysis, when asked for (``job=True``).
    job: Any = None


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


def report_name(path: str) -> str:
    """A file-system-safe, stable, unique report name for the trace at ``path``."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(path).name).strip("._")[:80] or "trace"
    digest = hashlib.blake2b(path.encode("utf-8", "surrogateescape"), digest_size=4).hexdigest()
    return f"{base}-{digest}"


class Progress:
    """A one-line progress bar on stderr; silent when not a terminal or when disabled."""

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.total = total
        self.done = 0
        self.failed = 0
        self.t0 = time.monotonic()

    def update(self, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        rate = self.done / max(time.monotonic() - self.t0, 1e-9)
        extra = f", {self.failed} failed" if self.failed else ""
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}"
                          f"{extra}  {rate:.1f} traces/s ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()


def read_manifest(out_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        return {}
    traces = data.get("traces")
    return traces if isinstance(traces, dict) else {}


def write_manifest(out_dir: Path, entries: dict[str, dict[str, Any]]) -> None:
    from traceanalyzer.report._common import write_text_atomic

    doc = {"version": MANIFEST_VERSION, "tool": {"name": "traceanalyzer", "version": __version__},
           "traces": {p: entries[p] for p in sorted(entries)}}
    write_text_atomic(out_dir / MANIFEST, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def run_batch(
    inputs: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    workers: int | None = None,
    dask: str | None = None,
    force: bool = False,
    rules: bool = True,
    rule_config: Any = None,
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    timeout_s: float | None = None,
    progress: bool = False,
    job: bool = False,
    index_sections: list[str] | None = None,
) -> BatchResult:
    """Analyze every trace in ``inputs`` into ``out_dir``; see the module doc for the layout."""
    t0 = time.monotonic()
    paths = expand_inputs(inputs)
    if not paths:
        raise UsageError("no trace files found in the given paths")
    out = Path(out_dir)
    (out / REPORTS).mkdir(parents=True, exist_ok=True)
    if not workers:
        from traceanalyzer.cpus import usable_cpus

        workers = min(len(paths), usable_cpus())
    settings = Settings(rules=rules, rule_config=portable_rule_config(rule_config),
                        use_cache=use_cache, cache_dir=str(cache_dir) if cache_dir else None,
                        config_hash=config_hash(rules, rule_config))
    manifest = {} if force else read_manifest(out)
    tasks = [(p, _prior_key(out, manifest.get(p), p)) for p in paths]
    wanted = set(paths)
    entries: dict[str, dict[str, Any]] = {p: e for p, e in manifest.items() if p in wanted}
    result = BatchResult(out_dir=out, summary=pl.DataFrame())
    bar = Progress(len(paths), progress)

    def on_done(index: int, outcome: dict[str, Any]) -> None:
        path = tasks[index][0]
        name = report_name(path)
        status = outcome["status"]
        if status == "ok":
            _write_reports(out, name, outcome)
            result.analyzed += 1
        elif status == "skipped":
            result.skipped += 1
        else:
            result.failed += 1
            result.errors.append(outcome["error"] or f"{path}: failed")
        if status != "skipped":
            entries[path] = {"key": outcome["key"] if status == "ok" else None, "report": name,
                             "status": "ok" if status == "ok" else "failed",
                             "format": outcome["format"], "error": outcome["error"]}
        bar.update(status == "failed")

    try:
        if dask:
            from traceanalyzer.batch.dask_runner import run_dask

            run_dask(tasks, settings, dask, workers, on_done)
        else:
            from traceanalyzer.batch.pool import PoolRunner

            runner = PoolRunner(tasks, settings, workers, on_done, timeout_s=timeout_s)
            runner.run()
            result.pool_restarts = runner.restarts
    finally:
        bar.close()
        write_manifest(out, entries)
    result.summary = build_summary(out, paths, entries)
    from traceanalyzer.batch.index import write_index
    from traceanalyzer.batch.summary import write_summary

    write_summary(result.summary, out)
    sections = list(index_sections or [])
    if job:
        sections.append(_job_section(out, result, rules, rule_config, use_cache, cache_dir))
    write_index(result.summary, out / "index.html", sections)
    result.seconds = time.monotonic() - t0
    return result


def _job_section(out: Path, result: BatchResult, rules: bool, rule_config: Any,
                 use_cache: bool, cache_dir: str | os.PathLike[str] | None) -> str:
    """Analyze the batch's good traces as one multi-rank job: ``job.json`` and an index section.

    Runs in this process after the batch, reading the traces through the cache the workers
    filled, so the ranks can be compared side by side.
    """
    from traceanalyzer.analysis.job import analyze_job, job_to_dict, load_job
    from traceanalyzer.batch.index import esc, job_section
    from traceanalyzer.errors import TraceAnalyzerError
    from traceanalyzer.report._common import write_text_atomic
    from traceanalyzer.report.jsonout import dumps

    ok = result.summary.filter(pl.col("status") == "ok")["path"].to_list()
    if not ok:
        return '<section id="job"><h2>Job</h2><p>No trace could be analyzed.</p></section>'
    try:
        job = analyze_job(load_job(ok, use_cache=use_cache, cache_dir=cache_dir),
                          rule_config=rule_config, rules=rules)
    except TraceAnalyzerError as exc:
        return f'<section id="job"><h2>Job</h2><p class="failed">{esc(exc)}</p></section>'
    write_text_atomic(out / "job.json", dumps(job_to_dict(job)))
    result.job = job
    return job_section(job)


def _prior_key(out: Path, entry: dict[str, Any] | None, path: str) -> str | None:
    """The stored key of ``path``'s report if it succeeded and both report files still exist."""
    if not entry or entry.get("status") != "ok" or not entry.get("key"):
        return None
    name = report_name(path)
    if not all((out / REPORTS / f"{name}{ext}").is_file() for ext in (".json", ".html")):
        return None
    return str(entry["key"])


def _write_reports(out: Path, name: str, outcome: dict[str, Any]) -> None:
    from traceanalyzer.report._common import write_text_atomic

    write_text_atomic(out / REPORTS / f"{name}.json", outcome["json"])
    write_text_atomic(out / REPORTS / f"{name}.html", outcome["html"])


def build_summary(out: Path, paths: list[str], entries: dict[str, dict[str, Any]]) -> pl.DataFrame:
    """The summary frame, read back from the per-trace JSON reports on disk."""
    from traceanalyzer.batch.summary import summary_frame, trace_row

    rows = []
    for path in paths:
        entry = entries.get(path) or {"status": "failed", "error": f"{path}: not analyzed"}
        name = entry.get("report") or report_name(path)
        doc = None
        error = entry.get("error")
        if entry.get("status") == "ok":
            try:
                doc = json.loads((out / REPORTS / f"{name}.json").read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                error = f"{path}: report unreadable ({exc})"
        rows.append(trace_row(path, entry.get("format"), doc, error,
                              f"{REPORTS}/{name}.html" if doc is not None else None))
    return summary_frame(rows)
