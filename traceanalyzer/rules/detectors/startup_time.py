"""startup-time: what the capture held before the first step, which the steady-state window
leaves out (analysis.window.start_up measures it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis.window import window_of
from traceanalyzer.rules.detectors import Detection, Params, detector

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

NS_PER_S = 1_000_000_000


@detector(
    params=("min_startup_s",),
    fields=("startup_s", "startup_pct", "captured_s", "gpu_busy_ms", "copies", "copy_mb",
            "pageable_copies", "kernels"),
)
def startup_time(views: Views, p: Params) -> Detection | None:
    """Fires when the window is the steady state and at least ``min_startup_s`` was captured
    before its first step. Informational: its impact is 0, so it ranks after the problems in
    the steps."""
    window = window_of(views.meta.extra)
    if window is None or window.kind != "steps" or not window.startup:
        return None
    startup = window.startup
    if startup.get("rank", views.metrics.rank) != views.metrics.rank:
        return None  # the start-up measured is another rank's (the file's headline rank's)
    duration = int(startup.get("duration_ns", 0))
    if duration < p["min_startup_s"] * NS_PER_S:
        return None
    start = window.captured_start_ns or 0
    evidence = pl.DataFrame({"start_ns": [start], "end_ns": [start + duration],
                             "what": ["start-up before the first step"]})
    return Detection(
        impact_ns=0,
        fields={
            "startup_s": duration / NS_PER_S,
            "startup_pct": 100.0 * duration / window.captured_ns if window.captured_ns else 0.0,
            "captured_s": window.captured_ns / NS_PER_S,
            "gpu_busy_ms": float(startup.get("gpu_busy_ns", 0)) / 1e6,
            "copies": int(startup.get("copies", 0)),
            "copy_mb": int(startup.get("copy_bytes", 0)) / 1e6,
            "pageable_copies": int(startup.get("pageable_copies", 0)),
            "kernels": int(startup.get("kernels", 0)),
        },
        evidence=evidence,
    )
