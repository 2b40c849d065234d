"""Running a batch: :func:`run_batch` hands the traces to a pool or a Dask cluster and writes
what comes back (the reports, the manifest, the summary and the index)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.batch.inputs import expand_inputs
from traceanalyzer.batch.manifest import REPORTS, read_manifest, report_name, write_manifest
from traceanalyzer.batch.progress import Progress
from traceanalyzer.batch.task import Settings, config_hash, portable_rule_config
from traceanalyzer.errors import UsageError

if TYPE_CHECKING:
    from traceanalyzer.analysis.job import JobResult


@dataclass
class BatchResult:
    """What :func:`run_batch` did: the summary frame and the counts of traces by outcome."""

    out_dir: Path
    summary: pl.DataFrame
    analyzed: int = 0
    skipped: int = 0
    failed: int = 0
    seconds: float = 0.0
    pool_restarts: int = 0
    errors: list[str] = field(default_factory=list)
    #: The multi-rank job analysis, when asked for (``job=True``).
    job: JobResult | None = None
    #: Files the inputs matched that were left out, with why (see :func:`batch_paths`).
    excluded: list[tuple[str, str]] = field(default_factory=list)


def batch_paths(inputs: list[str | os.PathLike[str]]) -> tuple[list[str], list[tuple[str, str]]]:
    """The traces to analyze, and the files left out with why: traceanalyzer's own outputs
    (a batch's manifest, index, summary and reports, JSON reports) and annotated copies, when a
    folder or a glob matched them (a file named on its own is always analyzed)."""
    from traceanalyzer.batch.inputs import left_out

    named = {os.path.abspath(os.fspath(i)) for i in inputs}
    paths, excluded = [], []
    for path in expand_inputs(inputs):
        why = None if path in named else left_out(path)
        if why is None:
            paths.append(path)
        else:
            excluded.append((path, why))
    return paths, excluded


def check_batch_outputs(out: Path, paths: list[str], inputs: list[str | os.PathLike[str]],
                        job: bool) -> None:
    """The output guard over every file the batch will write (it may not replace an input)."""
    from traceanalyzer.batch.manifest import MANIFEST
    from traceanalyzer.cli.outputs import check_outputs

    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is not a folder")
    files = [MANIFEST, "index.html", "summary.csv", "summary.parquet"] + (["job.json", "job.html", "job_ranks.parquet"] * job)
    names = [report_name(p) for p in paths]
    outputs = [("--out", out / f) for f in files] + [
        ("--out", out / REPORTS / f"{n}.{ext}") for n in names for ext in ("json", "html")]
    check_outputs(outputs, paths)


def run_batch(
    inputs: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    workers: int | None = None,
    dask: str | None = None,
    force: bool = False,
    rules: bool = True,
    rule_config: Any = None,
    window: str = "steps",
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    timeout_s: float | None = None,
    progress: bool = False,
    job: bool = False,
    index_sections: list[str] | None = None,
) -> BatchResult:
    """Analyze every trace in ``inputs`` into ``out_dir``; see the module doc for the layout."""
    t0 = time.monotonic()
    inputs = list(inputs)
    out = Path(out_dir)
    paths, excluded = batch_paths(inputs)
    if not paths:
        raise UsageError("no trace files found in the given paths"
                         + (f" ({len(excluded)} left out: {excluded[0][1]}, ...)"
                            if excluded else ""))
    check_batch_outputs(out, paths, inputs, job)
    (out / REPORTS).mkdir(parents=True, exist_ok=True)
    if not workers:
        from traceanalyzer.cpus import usable_cpus

        workers = min(len(paths), usable_cpus())
    settings = Settings(rules=rules, rule_config=portable_rule_config(rule_config),
                        use_cache=use_cache, cache_dir=str(cache_dir) if cache_dir else None,
                        window=window, config_hash=config_hash(rules, rule_config, window))
    manifest = {} if force else read_manifest(out)
    tasks = [(p, _prior_key(out, manifest.get(p), p)) for p in paths]
    wanted = set(paths)
    entries: dict[str, dict[str, Any]] = {p: e for p, e in manifest.items() if p in wanted}
    result = BatchResult(out_dir=out, summary=pl.DataFrame(), excluded=excluded)
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
        sections.append(_job_section(out, result, rules, rule_config, use_cache, cache_dir,
                                     window, dask=dask, workers=workers))
    write_index(result.summary, out / "index.html", sections)
    result.seconds = time.monotonic() - t0
    return result


def _job_section(out: Path, result: BatchResult, rules: bool, rule_config: Any,
                 use_cache: bool, cache_dir: str | os.PathLike[str] | None,
                 window: str = "steps", *, dask: str | None = None,
                 workers: int | None = None) -> str:
    """Analyze the batch's good traces as one multi-rank job: ``job.json``, ``job.html`` (the
    sortable per-rank table), ``job_ranks.parquet`` and an index section.

    Runs on the same workers as the batch (the local pool or ``dask``): each reads its rank
    through the cache the batch filled and sends back small frames (:mod:`.job`).
    """
    from traceanalyzer.batch.index import esc, job_section
    from traceanalyzer.batch.job import run_job
    from traceanalyzer.cli.job import write_job_outputs
    from traceanalyzer.errors import TraceAnalyzerError

    ok = result.summary.filter(pl.col("status") == "ok")["path"].to_list()
    if not ok:
        return '<section id="job"><h2>Job</h2><p>No trace could be analyzed.</p></section>'
    try:
        job = run_job(ok, workers=workers, dask=dask, rules=rules, rule_config=rule_config,
                      window=window, use_cache=use_cache, cache_dir=cache_dir)
    except TraceAnalyzerError as exc:
        return f'<section id="job"><h2>Job</h2><p class="failed">{esc(exc)}</p></section>'
    write_job_outputs(job, 10, json_path=out / "job.json", html_path=out / "job.html",
                      parquet_path=out / "job_ranks.parquet", echo=False)
    result.job = job
    from traceanalyzer.report.terminal import JOB_TABLE_MAX_RANKS

    return job_section(job, rank_rows=job.ranks.height <= JOB_TABLE_MAX_RANKS, link="job.html")


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
