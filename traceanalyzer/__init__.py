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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceanalyzer.model import Trace

__version__ = "0.1.0"


def load(path: str | os.PathLike[str], **kwargs: Any) -> Trace:
    """Read a trace of any supported format into a canonical :class:`~traceanalyzer.model.Trace`."""
    from traceanalyzer.ingest import load as _load

    return _load(path, **kwargs)


def analyze(path: Any, **kwargs: Any) -> Any:
    """Load ``path`` and analyze it; see :func:`traceanalyzer.analysis.analyze_trace`."""
    from traceanalyzer.analysis import analyze_trace

    load_kwargs = {k: kwargs.pop(k) for k in ("use_cache", "cache_dir") if k in kwargs}
    return analyze_trace(load(path, **load_kwargs), **kwargs)


__all__ = ["__version__", "analyze", "load"]
