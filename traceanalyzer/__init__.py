"""traceanalyzer: tells you why your GPU code is slow.

Library API (the CLI is a thin layer over it)::

    import traceanalyzer
    trace = traceanalyzer.load("trace.json.gz")       # canonical Polars frames
    result = traceanalyzer.analyze("trace.json.gz")   # metrics, kernel summary, findings
"""

from __future__ import annotations

__version__ = "0.1.0"

from traceanalyzer.ingest import load  # noqa: E402


def analyze(path, **kwargs):  # type: ignore[no-untyped-def]
    """Load ``path`` and analyze it; see :func:`traceanalyzer.analysis.analyze_trace`."""
    from traceanalyzer.analysis import analyze_trace

    load_kwargs = {k: kwargs.pop(k) for k in ("use_cache", "cache_dir") if k in kwargs}
    return analyze_trace(load(path, **load_kwargs), **kwargs)


__all__ = ["__version__", "analyze", "load"]
