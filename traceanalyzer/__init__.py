"""traceanalyzer: tells you why your GPU code is slow.

Library API (the CLI is a thin layer over it)::

    import traceanalyzer
    trace = traceanalyzer.load("trace.json.gz")       # canonical Polars frames
    result = traceanalyzer.analyze("trace.json.gz")   # metrics, kernel summary, findings

Importing the package imports nothing heavy: the reference workloads run on machines without
Polars, and the CLI starts faster.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceanalyzer.analysis.result import AnalysisResult
    from traceanalyzer.model import Trace
    from traceanalyzer.rules import RuleConfig

__version__ = "0.1.0"


def load(
    path: str | os.PathLike[str],
    *,
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    trace_processor: str | os.PathLike[str] | None = None,
) -> Trace:
    """Read a trace of any supported format (Kineto JSON, Nsight Systems SQLite or ``.nsys-rep``,
    Perfetto) into a canonical :class:`~traceanalyzer.model.Trace`.

    ``use_cache`` reads and fills the Parquet cache of ingested frames in ``cache_dir`` (by
    default ``$TRACEANALYZER_CACHE_DIR``, else the user cache folder such as
    ``~/.cache/traceanalyzer``; never beside the trace; bounded by
    ``$TRACEANALYZER_CACHE_MAX``, see :mod:`traceanalyzer.ingest.cache`).
    ``trace_processor`` names a Perfetto ``trace_processor_shell`` to read Perfetto traces with
    (such reads bypass the cache). See :func:`traceanalyzer.ingest.load`.
    """
    from traceanalyzer.ingest import load as _load

    return _load(path, use_cache=use_cache, cache_dir=cache_dir, trace_processor=trace_processor)


def analyze(
    path: str | os.PathLike[str],
    *,
    rule_config: RuleConfig | None = None,
    rules: bool = True,
    window: str = "steps",
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    trace_processor: str | os.PathLike[str] | None = None,
) -> AnalysisResult:
    """Load the trace at ``path`` and analyze it: metrics, summaries and findings.

    ``rules``: run the rules (False: metrics only). ``rule_config``: the rules and their
    parameters (None: the built-in rules; :func:`traceanalyzer.rules.load_config` makes one).
    ``window``: what is judged: the steady state by default (``"steps"``), or ``"all"``,
    ``"profiler-range"`` or ``"START:END"`` (see
    :func:`traceanalyzer.analysis.window.choose_window`; ``result.window`` says what was
    judged). ``use_cache``, ``cache_dir`` and ``trace_processor`` are as in :func:`load`.
    See :func:`traceanalyzer.analysis.analyze_trace`.
    """
    from traceanalyzer.analysis import analyze_trace
    from traceanalyzer.analysis.window import choose_window, parse_window

    trace = load(path, use_cache=use_cache, cache_dir=cache_dir, trace_processor=trace_processor)
    return analyze_trace(choose_window(trace, parse_window(window)), rule_config=rule_config,
                         rules=rules)


__all__ = ["__version__", "analyze", "load"]
