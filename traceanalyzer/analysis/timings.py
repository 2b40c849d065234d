"""Where one run's time and memory go, step by step: ingest, each view, summary, rule and report.

Off unless ``$TRACEANALYZER_TIMINGS`` names a file: then every :func:`step` is recorded and the
records are written there as JSON when the process exits (``bench/matrix.py`` reads them). Off,
a step costs one dictionary look-up. On, it reads the clock, the process's CPU time and
``/proc/self/statm`` twice: microseconds, against steps of milliseconds or more.

A step's figures are its own: a view first computed inside a rule is a step of its own, and its
time is not counted again in the rule's (``self_*`` fields; ``wall_s``/``cpu_s`` include the
nested steps). CPU time is the whole process's (Polars's threads included). Memory is what the
process holds after the step (``rss_mb``), how much that grew (``rss_grew_mb``), and how much
the step raised the process's peak (``peak_grew_mb``: the kernel's high-water mark, so a step
whose transient peak stays below an earlier one shows 0).
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ENV = "TRACEANALYZER_TIMINGS"

_records: list[dict[str, Any]] = []
_stack: list[list[float]] = []  # per open step: nested wall s, nested CPU s
_registered = False
_PAGE_MB = resource.getpagesize() / 2**20


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_MB
    except (OSError, IndexError, ValueError):
        return 0.0


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@contextmanager
def step(name: str, kind: str = "step") -> Iterator[None]:
    """Record the time and memory of the ``with`` block as step ``name`` (of ``kind``: ingest,
    view, summary, rule, report) when timings are on; otherwise do nothing."""
    if not os.environ.get(ENV):
        yield
        return
    _register()
    rss0, peak0, cpu0, wall0 = _rss_mb(), _peak_mb(), _cpu_s(), time.perf_counter()
    _stack.append([0.0, 0.0])
    try:
        yield
    finally:
        wall, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
        nested_wall, nested_cpu = _stack.pop()
        if _stack:
            _stack[-1][0] += wall
            _stack[-1][1] += cpu
        rss = _rss_mb()
        _records.append(
            {
                "name": name,
                "kind": kind,
                "depth": len(_stack),
                "wall_s": round(wall, 6),
                "cpu_s": round(cpu, 6),
                "self_wall_s": round(wall - nested_wall, 6),
                "self_cpu_s": round(cpu - nested_cpu, 6),
                "rss_mb": round(rss, 1),
                "rss_grew_mb": round(rss - rss0, 1),
                "peak_grew_mb": round(_peak_mb() - peak0, 1),
            }
        )


def records() -> list[dict[str, Any]]:
    """The steps recorded so far, in the order they ended."""
    return list(_records)


def _register() -> None:
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_write)


def _write() -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    doc = {"steps": _records, "peak_rss_mb": round(_peak_mb(), 1)}
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
    except OSError:
        pass  # a benchmark's aid: never the reason a run fails
