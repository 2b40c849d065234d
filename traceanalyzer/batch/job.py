"""A multi-rank job on the local process pool or on Dask: one task per trace, reduced in the worker.

:func:`reduce_one` runs in a worker: it loads one trace (through the cache), narrows it to its
window and reduces it (:func:`analysis.job_reduce.reduce_trace`) to a few small frames, which are
all that travels back. :func:`run_job` submits one task per trace to the same runners as the
batch (:class:`.pool.PoolRunner`, :func:`.dask_runner.run_dask`, with Dask's own scheduling and
retries) and combines the summaries on the client (:func:`analysis.job_reduce.analyze_summaries`).
The client's memory grows with ranks x collectives, never with a trace's events; a trace that
fails to load is listed in the job's ``failed`` and the job is analyzed without it.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Sequence
from typing import Any

from traceanalyzer.batch.task import (
    Settings,
    _rule_config,
    config_hash,
    one_line,
    portable_rule_config,
)
from traceanalyzer.errors import InputError

#: Dask retries of a task whose worker died (killed, out of memory), before the rank is failed.
DASK_RETRIES = 1


def peak_rss_kb() -> int:
    """This process's peak resident set size, in KiB: Linux's VmHWM (ru_maxrss keeps the peak
    of the process that forked this one across exec), else ru_maxrss."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def reduce_one(path: str, _prior_key: str | None, settings: Settings) -> dict[str, Any]:
    """Load and reduce the trace at ``path``. Never raises for a bad trace: the error comes back
    as one line. Returns path, status ("ok" or "failed"), error, summary, seconds and the
    worker's peak RSS (KiB)."""
    started = time.perf_counter()
    out: dict[str, Any] = {
        "path": path,
        "status": "failed",
        "error": None,
        "summary": None,
        "seconds": 0.0,
        "peak_rss_kb": None,
    }
    try:
        from traceanalyzer.analysis.job_reduce import reduce_trace
        from traceanalyzer.analysis.window import choose_window
        from traceanalyzer.ingest import load

        trace = choose_window(
            load(path, use_cache=settings.use_cache, cache_dir=settings.cache_dir), settings.window
        )
        out["summary"] = reduce_trace(
            trace, rules=settings.rules, rule_config=_rule_config(settings)
        )
        out["status"] = "ok"
    except MemoryError:
        out["error"] = f"{path}: out of memory while loading this trace"
    except Exception as exc:  # noqa: BLE001 - one bad rank must not stop the job
        from traceanalyzer.errors import TraceAnalyzerError

        out["error"] = one_line(
            str(exc) if isinstance(exc, TraceAnalyzerError) else f"{path}: internal error: {exc!r}"
        )
    out["seconds"] = time.perf_counter() - started
    out["peak_rss_kb"] = peak_rss_kb()
    return out


def run_job(
    paths: Sequence[str | os.PathLike[str]],
    *,
    workers: int | None = None,
    dask: str | None = None,
    rules: bool = True,
    rule_config: Any = None,
    window: str = "steps",
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    min_lateness_us: float | None = None,
    progress: bool = False,
    stats: dict[str, Any] | None = None,
) -> Any:
    """Analyze ``paths`` (one trace per rank, or traces of several ranks) as one job.

    ``workers`` local processes (default: one per CPU, at most one per trace; 1 runs the tasks in
    this process), or the Dask cluster at ``dask`` ("local": a LocalCluster of ``workers``
    processes). ``stats``, when given, receives the workers' peak RSS (KiB, per task) and the
    reduce seconds. Returns an :class:`analysis.job.JobResult` with its ``scale`` view.
    """
    from traceanalyzer.analysis.job_reduce import analyze_summaries, default_workers
    from traceanalyzer.batch.pool import failed_outcome
    from traceanalyzer.batch.progress import Progress

    names = [str(p) for p in paths]
    if not names:
        raise InputError("job", "no trace files given")
    workers = workers or default_workers(len(names))
    settings = Settings(
        rules=rules,
        rule_config=portable_rule_config(rule_config),
        use_cache=use_cache,
        cache_dir=str(cache_dir) if cache_dir else None,
        window=window,
        config_hash=config_hash(rules, rule_config, window),
    )
    tasks: list[tuple[str, str | None]] = [(p, None) for p in names]
    outcomes: dict[int, dict[str, Any]] = {}
    bar = Progress(len(tasks), progress)

    def on_done(index: int, outcome: dict[str, Any]) -> None:
        outcomes[index] = outcome
        bar.update(outcome["status"] != "ok")

    try:
        if dask:
            from traceanalyzer.batch.dask_runner import run_dask

            run_dask(tasks, settings, dask, workers, on_done, fn=reduce_one, retries=DASK_RETRIES)
        elif workers == 1:
            for index, (path, _) in enumerate(tasks):
                on_done(index, reduce_one(path, None, settings))
        else:
            from traceanalyzer.batch.pool import PoolRunner

            PoolRunner(tasks, settings, workers, on_done, fn=reduce_one).run()
    finally:
        bar.close()
    summaries, failed = [], []
    for index, (path, _) in enumerate(tasks):
        outcome = outcomes.get(index) or failed_outcome(path, f"{path}: not analyzed")
        if outcome["status"] == "ok":
            summaries.append(outcome["summary"])
        else:
            failed.append({"path": path, "error": outcome["error"] or f"{path}: failed"})
        if stats is not None:
            stats.setdefault("worker_peak_rss_kb", []).append(outcome.get("peak_rss_kb"))
            stats.setdefault("seconds", []).append(outcome.get("seconds"))
    outcomes.clear()
    if not summaries:
        raise InputError(
            failed[0]["path"],
            "no trace of the job could be loaded ("
            f"{len(failed)} failed; first: {failed[0]['error']})",
        )
    return analyze_summaries(summaries, failed=failed, min_lateness_us=min_lateness_us)
