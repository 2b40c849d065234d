"""The per-step table (analysis.step_breakdown, shown by every report): a step's busy time and
its idle by cause add up to the step, on every sample trace."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer.analysis import step_breakdown
from traceanalyzer.analysis.views import Views
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import load
from traceanalyzer.report._common import step_rows

TRACES = sorted((SAMPLES / "torch").glob("*.json.gz")) + sorted((SAMPLES / "nsys").glob("*.sqlite"))
CAUSES = ["idle_host_wait_ns", "idle_kernel_wait_ns", "idle_other_ns"]


@pytest.mark.skipif(not TRACES, reason="sample traces absent")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_busy_and_idle_by_cause_add_up_to_each_step(path: Path) -> None:
    views = Views(choose_window(load(path), "steps"))
    steps = step_breakdown(views)
    assert not steps.is_empty()
    causes = steps.select(pl.sum_horizontal(CAUSES)).to_series()
    # To the nanosecond: the causes are the idle, busy + idle the step.
    assert (causes == steps["idle_ns"]).all()
    assert (steps["busy_ns"] + steps["idle_ns"] == steps["duration_ns"]).all()
    assert (steps.select(pl.min_horizontal("busy_ns", *CAUSES)).to_series() >= 0).all()
    # The reports' percentages of it (report._common.step_rows) add up to 100 within rounding.
    rows, _ = step_rows(SimpleNamespace(steps=steps, metrics=views.metrics), limit=None)
    totals = [
        r["busy_pct"] + r["host_wait_pct"] + r["kernel_wait_pct"] + r["other_pct"] for r in rows
    ]
    assert np.allclose(totals, 100.0, atol=1e-6)


def test_a_gap_across_a_step_boundary_is_shared_between_the_steps() -> None:
    """dataloader_stall_bad (nsys): the GPU waits about 75 ms for each batch, and each wait runs
    from one step into the next; each step holds its own part of it, not the one where it began
    (step 1 was 98.9% host wait + 3.6% busy = 102.5% of itself before)."""
    path = SAMPLES / "nsys" / "dataloader_stall_bad.sqlite"
    if not path.exists():
        pytest.skip("sample trace absent")
    steps = step_breakdown(Views(choose_window(load(path), "steps")))
    share = (steps["idle_host_wait_ns"] / steps["duration_ns"]).to_numpy()
    assert share.min() > 0.9 and share.max() < 1.0


MI250 = PUBLIC / "kineto" / "hta_mi250_rocm.json.gz"
CPU_ONLY = MI250.with_name("hta_cpu_only.json.gz")


@pytest.mark.skipif(not MI250.exists(), reason="public traces absent")
def test_a_last_step_with_no_gpu_work_makes_no_step_an_outlier() -> None:
    # HTA's MI250 trace: step 1 runs every kernel (9.3 ms), step 2 is cut short by the profiler
    # (86 µs, nothing launched); with two steps the median made step 1 an "outlier". The
    # steady-state window leaves step 2 out (test_window); the whole capture keeps it.
    steps = step_breakdown(Views(choose_window(load(MI250), "all")))
    assert steps["launch_count"].to_list()[-1] == 0
    assert not steps["outlier"].any()


@pytest.mark.skipif(not CPU_ONLY.exists(), reason="public traces absent")
def test_a_cpu_only_trace_splits_no_gpu_time_in_its_steps() -> None:
    # No GPU was recorded: "host wait 100%" would say a GPU waited for its host.
    from traceanalyzer.analysis import analyze_trace

    rows, total = step_rows(analyze_trace(choose_window(load(CPU_ONLY), "steps")))
    assert total == 1
    assert all(rows[0][k] is None for k in ("busy_pct", "host_wait_pct", "kernel_wait_pct",
                                            "other_pct"))
