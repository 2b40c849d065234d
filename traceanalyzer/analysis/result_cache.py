"""Cache of analysis results next to the Parquet frames: a re-run skips metrics and rules too.

The Parquet cache (:mod:`traceanalyzer.ingest.cache`) spares a second run the parsing, but on a
1 GB trace the metrics and rules still cost seconds. This cache keeps what the reports need: the
:class:`AnalysisResult` (metrics, tables, findings, rule outcomes) and the HTML timeline payload.
Its key covers everything that can change them:

- the trace's content key (which covers the ingest cache version and the kernel categories);
- the selection (``--steps``, ``--time-window``, ``--ranks``) and whether rules run;
- the active rules: each rule file's bytes, its resolved parameters, ``max_evidence``;
- the tool version, the Polars and NumPy versions, and a hash of the package's source code, so
  that editing a detector or a metric invalidates every entry (no version bump to forget).

Options that only shape the output (``--top``, ``--fail-on``, the output paths) are not in the
key: they are applied to a cached result exactly as to a fresh one.

The format is JSON plus Arrow IPC files, never pickle: the cache folder may be shared, and
unpickling runs code. An entry is written only when it round-trips exactly, so a cached run
writes byte-identical reports; it is written to a temporary folder and renamed into place. An
entry that cannot be read (truncated, edited, from another format) is deleted and the result
computed again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer import __version__
from traceanalyzer.analysis.result import AnalysisResult, Metrics
from traceanalyzer.analysis.timings import step
from traceanalyzer.findings import Finding, RuleOutcome
from traceanalyzer.ingest.cache import RESULTS_DIR, publish_dir, stored, touch
from traceanalyzer.model import Trace, TraceMeta

#: Bump when the entry layout changes (code changes are covered by :func:`code_hash`).
RESULT_CACHE_VERSION = "4"
FRAMES = ("steps", "kernels", "categories", "operators", "utilization", "streams", "ranks",
          "memory", "memory_holders", "memory_timeline", "perf", "kernel_verdicts",
          "critical_path", "critical_segments", "critical_path_ranks", "critical_path_gpus")
DOC = "result.json"


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """Hash of the tool version, the Polars/NumPy versions and every source file of the package:
    Python, and the C sources and headers of the compiled passes (a header such as
    ``_regexlite.h`` classifies kernels).

    The ingest layer's files are those the registry of formats names
    (:func:`traceanalyzer.ingest.formats.ingest_sources`). Reading ~150 small files costs a few
    milliseconds, once per process.
    """
    return source_hash(Path(__file__).resolve().parents[1])


def source_hash(package: Path) -> str:
    """:func:`code_hash` of the package folder ``package`` (a copy of it, in the tests)."""
    import numpy

    from traceanalyzer.ingest.formats import SOURCE_SUFFIXES, ingest_sources

    h = hashlib.blake2b(digest_size=16)
    h.update(f"traceanalyzer {__version__} polars {pl.__version__} numpy {numpy.__version__}\n"
             .encode())
    ingest = package / "ingest"
    files = {file for suffix in SOURCE_SUFFIXES for file in package.rglob(f"*{suffix}")
             if ingest not in file.parents}
    files.update(ingest_sources(ingest))
    for file in sorted(files):
        h.update(str(file.relative_to(package)).encode() + b"\0")
        try:
            h.update(file.read_bytes())
        except OSError:
            h.update(b"unreadable")
        h.update(b"\0")
    return h.hexdigest()


def rules_hash(rules: bool, rule_config: Any) -> str:
    """Hash of the rules that run: each active rule's slug, parameters and file bytes.

    Raises :class:`traceanalyzer.errors.RuleError` like the analysis would for a bad config.
    """
    h = hashlib.blake2b(digest_size=16)
    if not rules:
        h.update(b"no-rules\n")
        return h.hexdigest()
    from traceanalyzer.rules.loader import RuleConfig

    config = rule_config if rule_config is not None else RuleConfig()
    h.update(f"max_evidence={getattr(config, 'max_evidence', '')}\n".encode())
    for rule, params in config.active():
        h.update(f"{rule.slug} {json.dumps(params, sort_keys=True, default=str)}\n".encode())
        path = getattr(rule, "path", None)
        try:
            h.update(Path(path).read_bytes() if path else repr(rule).encode())
        except OSError:
            h.update(repr(rule).encode())
        h.update(b"\0")
    return h.hexdigest()


def result_key(content_key: str, *, rules: bool, rule_config: Any, selection: Any = None,
               window: str = "steps") -> str:
    """The entry name for the analysis of the trace with ``content_key`` under these settings."""
    h = hashlib.blake2b(digest_size=20)
    for part in (RESULT_CACHE_VERSION, content_key, code_hash(), rules_hash(rules, rule_config),
                 _selection_text(selection), f"window={window}"):
        h.update(part.encode() + b"\n")
    return h.hexdigest()


def _selection_text(selection: Any) -> str:
    if selection is None or getattr(selection, "empty", False):
        return "all"
    ranks = getattr(selection, "ranks", None)
    return repr((selection.steps, selection.time_window_ns,
                 sorted(ranks) if ranks is not None else None))


@dataclass
class Analyzed:
    """One trace analyzed: the result, the HTML timeline payload (None without a cache entry:
    ``render_html`` draws it from the trace then), and the trace when it was read (None on a
    cache hit unless asked for)."""

    result: AnalysisResult
    timeline: dict[str, Any] | None
    trace: Trace | None
    cached: bool


def analyze_path(path: str | os.PathLike[str], *, selection: Any = None, window: str = "steps",
                 rule_config: Any = None,
                 rules: bool = True, use_cache: bool = True,
                 cache_dir: str | os.PathLike[str] | None = None,
                 trace_processor: str | os.PathLike[str] | None = None,
                 need_trace: bool = False,
                 kernel_metrics: str | os.PathLike[str] | None = None) -> Analyzed:
    """Load, narrow and analyze the trace at ``path``, through both caches when ``use_cache``.

    ``window`` is the analysis window (``steps``, ``all``, ``profiler-range`` or START:END; see
    analysis.window.choose_window); an explicit ``selection`` takes precedence over it.

    ``need_trace`` also loads the trace on a cache hit (``--annotate`` needs its events).

    ``kernel_metrics`` names an Nsight Compute input (.ncu-rep, its raw or details CSV page)
    whose launches the kernel rules judge and the reports match to this trace's kernels
    (``--kernel-metrics``); it is read first, so that a bad one fails before the trace is read,
    and its content is part of the result's cache key.
    """
    extra: dict[str, Any] = {}
    if kernel_metrics is not None:
        from traceanalyzer.ingest.ncu import read_kernel_metrics

        report = read_kernel_metrics(kernel_metrics)
        extra["kernel_metrics"] = report.metrics.to_dicts()
        if not report.rules.is_empty():
            extra["ncu_rules"] = report.rules.to_dicts()
    from traceanalyzer.ingest import load, sniff
    from traceanalyzer.ingest.cache import cache_root, content_key
    from traceanalyzer.ingest.formats import FORMATS

    def read() -> Trace:
        with step("ingest", "ingest"):
            trace = load(path, use_cache=use_cache, cache_dir=cache_dir,
                         trace_processor=trace_processor)
        trace.meta.extra.update(extra)
        from traceanalyzer.analysis.window import choose_window

        if selection is None or selection.empty:
            # The window is found from views of the whole trace (launches, steps): check the
            # memory before them, not only before the rules (analyze_trace checks the narrowed
            # trace again). A --steps/--time-window/--ranks selection, the way out the message
            # names, is applied first and checked after.
            from traceanalyzer.analysis.memory_check import check_analysis_memory

            with step("memory check", "ingest"):
                check_analysis_memory(trace)
        with step("window", "ingest"):
            return choose_window(trace, window, selection)

    fmt = sniff(path)  # a missing or unreadable file fails here, as without the cache
    entry = None
    external = FORMATS[fmt].reads_externally(trace_processor)
    if use_cache and not external:  # an external reader's output is not what the key names
        try:
            content = content_key(path)
            if kernel_metrics is not None:
                content += "+kernel-metrics:" + content_key(kernel_metrics)
            key = result_key(content, rules=rules, rule_config=rule_config,
                             selection=selection, window=window)
            entry = cache_root(cache_dir) / RESULTS_DIR / key
        except OSError:
            entry = None  # the read below reports an unreadable file properly
    if entry is not None:
        hit = load_result(entry, path)
        if hit is not None:
            touch(entry)
            result, timeline = hit
            return Analyzed(result, timeline, read() if need_trace else None, cached=True)
    from traceanalyzer.analysis import analyze_trace
    from traceanalyzer.report.timeline import timeline_data

    trace = read()
    result = analyze_trace(trace, rule_config=rule_config, rules=rules)
    if entry is None:  # nothing to store it in: a report draws it from the trace, if one is asked for
        return Analyzed(result, None, trace, cached=False)
    with step("timeline", "report"):
        timeline = timeline_data(result, trace)
    with step("result cache", "report"):
        store_result(entry, result, timeline, path)
    return Analyzed(result, timeline, trace, cached=False)


# --- entries ----------------------------------------------------------------------------------


def load_result(entry: Path, path: str | os.PathLike[str]
                ) -> tuple[AnalysisResult, dict[str, Any] | None] | None:
    """The stored result, or None when there is none. A damaged entry is deleted."""
    if not (entry / DOC).is_file():
        return None
    try:
        return _read(entry, path)
    except Exception:  # noqa: BLE001 - whatever is wrong with an entry, computing again fixes it
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _read(entry: Path, path: str | os.PathLike[str]
          ) -> tuple[AnalysisResult, dict[str, Any] | None]:
    doc = json.loads((entry / DOC).read_text(encoding="utf-8"))
    if doc["version"] != RESULT_CACHE_VERSION:
        raise ValueError("other entry version")
    meta = TraceMeta.from_dict(doc["meta"])
    # The same file under another name: report it under the name given now, as the Parquet
    # cache does.
    if doc["request_path"] != str(path):
        meta.path = str(path)
    frames = {name: pl.read_ipc(entry / f"{name}.arrow")
              for name in FRAMES if name in doc["frames"]}
    result = AnalysisResult(
        meta=meta, metrics=Metrics(**doc["metrics"]),
        steps=frames["steps"], kernels=frames["kernels"], categories=frames["categories"],
        operators=frames["operators"], utilization=frames["utilization"],
        streams=frames["streams"], ranks=frames.get("ranks"), memory=frames.get("memory"),
        memory_holders=frames.get("memory_holders"),
        memory_timeline=frames.get("memory_timeline"), perf=frames.get("perf"),
        kernel_verdicts=frames.get("kernel_verdicts"),
        perf_summary=doc.get("perf_summary"),
        critical_path=frames.get("critical_path"),
        critical_segments=frames.get("critical_segments"), what_if=doc.get("what_if"),
        critical_path_ranks=frames.get("critical_path_ranks"),
        critical_path_gpus=frames.get("critical_path_gpus"),
        findings=[Finding(**f) for f in doc["findings"]],
        rule_outcomes=[RuleOutcome(**o) for o in doc["rule_outcomes"]],
    )
    return result, doc["timeline"]


def store_result(entry: Path, result: AnalysisResult, timeline: dict[str, Any] | None,
                 path: str | os.PathLike[str]) -> bool:
    """Store ``result``; False (nothing written) when it would not come back exactly or the
    disk refuses."""
    if any(o.status == "error" for o in result.rule_outcomes):  # may be transient (memory)
        return False
    frames = {name: getattr(result, name) for name in FRAMES}
    doc = {
        "version": RESULT_CACHE_VERSION,
        "request_path": str(path),
        "meta": result.meta.to_dict(),
        "metrics": dict(vars(result.metrics)),
        "findings": [asdict(f) for f in result.findings],
        "rule_outcomes": [asdict(o) for o in result.rule_outcomes],
        "perf_summary": result.perf_summary,
        "what_if": result.what_if,
        "frames": [name for name, frame in frames.items() if frame is not None],
        "timeline": timeline,
    }
    try:
        text = json.dumps(doc, ensure_ascii=False, allow_nan=False)
        if json.loads(text) != doc:  # e.g. a tuple in evidence would come back as a list
            return False
    except (TypeError, ValueError):  # a value JSON cannot hold (NumPy scalar, NaN)
        return False
    def write(tmp: Path) -> None:
        for name, frame in frames.items():
            if frame is not None:
                frame.write_ipc(tmp / f"{name}.arrow", compression="uncompressed")
        (tmp / DOC).write_text(text, encoding="utf-8")

    try:
        publish_dir(entry, write)
    except (OSError, pl.exceptions.PolarsError):
        return False  # a read-only or full disk only costs the speed-up
    stored(entry.parent.parent, entry)
    return True
