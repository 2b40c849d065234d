"""The dependency graph, its replay and the critical path (docs/critical-path.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import traceanalyzer
from tests.support.paths import PUBLIC, SAMPLES, public_kineto
from tests.support.synth import Synth
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.analysis import critical_path as cp
from traceanalyzer.analysis.views import Views
from traceanalyzer.analysis.window import choose_window, parse_window

#: Samples with what the graph must handle: host waits, a CUDA graph (node-level kernels of one
#: launch), several streams with waits between them (NCCL), two GPUs of one process.
SAMPLES_OF = {
    "host waits": "torch/hidden_sync_bad.json.gz",
    "host waits (nsys)": "nsys/hidden_sync_bad.sqlite",
    "cuda graph": "nsys/launch_bound_good.sqlite",
    "cuda graph (torch)": "torch/launch_bound_good.json.gz",
    "multi-stream": "torch/nccl_overlap_good_rank0.json.gz",
    "multi-stream (nsys)": "nsys/rank_imbalance_bad_rank1.sqlite",
    "multi-gpu": "nsys/naive_model_parallel_bad.sqlite",
    "blocking copies": "torch/sync_memcpy_bad.json.gz",
    "data loading": "torch/dataloader_stall_bad.json.gz",
}


def _views(path: Path) -> Views:
    return Views(choose_window(traceanalyzer.load(path), parse_window("steps")))


def _check_replay_and_path(views: Views) -> cp.Graph:
    rank = views.metrics.rank
    g = cp.build_graph(views, rank)
    assert g is not None
    rep = cp.replay(g)
    # The unchanged graph gives back every recorded time, and the steps' times.
    assert np.array_equal(rep.g_start, g.g_start)
    assert np.array_equal(rep.g_end, g.g_end)
    assert np.array_equal(rep.c_start, g.c_start)
    assert np.array_equal(rep.c_end, g.c_end)
    steps = views.wall_steps.filter(pl.col("rank") == rank).sort("start_ns")
    recorded = (steps["wall_end_ns"] - steps["wall_start_ns"]).to_list()
    assert rep.step_times["duration_ns"].to_list() == recorded
    # The path is contiguous segments in time order, and its breakdown adds up to each step.
    path = cp.critical_path(g, rep)
    assert (path.hi > path.lo).all()
    assert (path.lo[1:] >= path.hi[:-1]).all()
    bd = cp.breakdown(g, rep, path)
    cats = [f"{c}_ns" for c in cp.CATEGORIES]
    assert (bd.select(pl.sum_horizontal(cats)).to_series() == bd["duration_ns"]).all()
    assert (bd.select(cats).min_horizontal() >= 0).all()
    return g


@pytest.mark.parametrize("what", list(SAMPLES_OF))
def test_replay_gives_back_the_trace_and_the_path_adds_up(what: str) -> None:
    g = _check_replay_and_path(_views(SAMPLES / SAMPLES_OF[what]))
    if what.startswith("multi"):
        assert g.g_seg.max() >= 1
    if what in ("multi-stream (nsys)", "multi-gpu"):
        assert (g.g_x >= 0).sum() > 0, "waits between streams are inferred"
    if what == "multi-gpu":
        assert g.gpu["device"].n_unique() == 2
    if what.startswith("host waits"):
        assert (g.c_wait >= 0).sum() > 0


def test_cuda_graph_kernels_share_their_launch() -> None:
    g = cp.build_graph(_views(SAMPLES / SAMPLES_OF["cuda graph"]), 0)
    assert g is not None
    graph = g.gpu.filter(pl.col("graph_launched").fill_null(False))
    assert graph.height > 0
    # One launch call makes many kernels, which run in stream order behind each other.
    per_call = graph.group_by("_c").len()
    assert int(per_call["len"].to_numpy().max()) > 10


def test_breakdown_names_what_bounds_the_step() -> None:
    def share(path: str, cat: str) -> float:
        v = _views(SAMPLES / path)
        found = cp.analyze(v, v.metrics.rank)
        assert found is not None
        steps = found.steps
        return float(steps[f"{cat}_ns"].to_numpy().sum() / steps["duration_ns"].to_numpy().sum())

    assert share("torch/launch_bound_bad.json.gz", "gpu_compute") < 0.1  # host-bound
    assert share("torch/fp32_matmul_bad.json.gz", "gpu_compute") > 0.9  # GPU-bound
    assert share("torch/dataloader_stall_bad.json.gz", "data_loading") > 0.8
    assert share("torch/nccl_overlap_bad_rank0.json.gz", "gpu_communication") > 0.2


def _synthetic() -> Synth:
    """Two steps: each launches three 100 µs kernels, then syncs (waiting for the GPU), then
    does 200 µs of host work."""
    s = Synth()
    t = 0.0
    for n in range(2):
        s.step(n, t, 700)
        for k in range(3):
            s.kernel("sm90_gemm", t + 20 + 100 * k, 100, launch=t + 5 * k)
        s.api("cudaDeviceSynchronize", t + 20, 300)
        t += 700
    return s


def test_a_sync_is_a_host_wait_and_removing_it_overlaps_the_host_work() -> None:
    views = Views(_synthetic().trace())
    g = _check_replay_and_path(views)
    waits = np.nonzero(g.c_wait >= 0)[0]
    assert len(waits) == 2
    base = cp.step_time_ns(cp.replay(g))
    unblock = np.zeros(g.n_calls, bool)
    unblock[waits] = True
    fixed = cp.step_time_ns(cp.replay(g, cp.Change(unblock=unblock)))
    assert base is not None and fixed is not None
    assert fixed < base
    # Shorter kernels shorten the step as long as the GPU sets it.
    half = (g.g_end - g.g_start) // 2
    faster = cp.step_time_ns(cp.replay(g, cp.Change(g_dur=half)))
    assert faster is not None and faster < base


def _public() -> list[Path]:
    nsys = sorted((PUBLIC / "nsys").glob("*.sqlite")) if (PUBLIC / "nsys").is_dir() else []
    return public_kineto() + nsys


@pytest.mark.parametrize("path", _public() or [None], ids=lambda p: p.name if p else "none")
def test_public_traces(path: Path | None) -> None:
    """Other teams' traces (the two-GPU send/recv exports among them) replay exactly too."""
    if path is None:
        pytest.skip("../shared/traces/public is absent")
    views = _views(path)
    if views.launches.is_empty() or views.steps.is_empty():
        pytest.skip("no GPU work or no steps")
    _check_replay_and_path(views)


def test_gpu_activity_without_host_calls_has_no_path() -> None:
    """A GPU-only capture (an Nsight Compute report, a trace without the runtime API) launches
    nothing the graph could follow: no path, and the analysis still completes."""
    s = Synth()
    for n in range(3):
        s.kernel("sm90_gemm", n * 1000.0, 400)
    trace = s.trace()
    trace.cpu = trace.cpu.clear()
    views = Views(trace)
    assert cp.build_graph(views, 0) is None
    result = analyze_trace(trace)
    assert result.critical_path is None and result.what_if is None
