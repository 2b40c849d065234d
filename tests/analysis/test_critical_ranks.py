"""Collectives linked across ranks: the job's graph, replay, critical path and what-ifs
(docs/critical-path.md, "Collectives across ranks")."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer.analysis import critical_ranks as cr
from traceanalyzer.analysis.comm import flagged_comm_kernels
from traceanalyzer.analysis.critical_path import CATEGORIES
from traceanalyzer.analysis.job import analyze_job, combine, instances_from, job_to_dict
from traceanalyzer.analysis.job_reduce import analyze_summaries, reduce_trace
from traceanalyzer.analysis.views import Views
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import load

CATS = [f"{c}_ns" for c in CATEGORIES]
#: The two-rank pairs of the corpus: (workload, profiler) -> file pattern.
PAIRS = {
    ("rank_imbalance", "torch"): "torch/rank_imbalance_{}_rank{}.json.gz",
    ("rank_imbalance", "nsys"): "nsys/rank_imbalance_{}_rank{}.sqlite",
    ("nccl_overlap", "torch"): "torch/nccl_overlap_{}_rank{}.json.gz",
    ("nccl_overlap", "nsys"): "nsys/nccl_overlap_{}_rank{}.sqlite",
}
#: The fix of each workload, as the linked what-if names it.
FIX = {"rank_imbalance": "collective-wait", "nccl_overlap": "nccl-not-overlapped"}


def _anchor_rows(rows: list[dict[str, object]]) -> pl.DataFrame:
    full = [
        {**{c: 0 for c in CATS}, "pred": -1, "name": None, **r, "idx": i % 3}
        for i, r in enumerate(rows)
    ]
    for r in full:
        r["local_ns"] = int(r.get("local_ns", 0))  # type: ignore[call-overload]
        r["gpu_compute_ns"] = r["local_ns"]
    return pl.DataFrame(full).select(list(cr.ANCHOR_SCHEMA)).cast(cr.ANCHOR_SCHEMA)


def _toy() -> cr.Linked:
    """Two ranks, one step, one all-reduce: rank 0 reaches it at 10, rank 1 (slower) at 30;
    its transfer is 5, so it ends at 35 on both; each step ends 5 after it."""
    ar = "ncclAllReduce"
    rows: list[dict[str, object]] = []
    for rank, arrive in ((0, 10), (1, 30)):
        rows += [
            dict(
                rank=rank,
                kind="collective",
                step=1,
                name=ar,
                start_ns=arrive,
                end_ns=35,
                from_ns=0,
                local_ns=arrive,
            ),
            dict(
                rank=rank,
                kind="step",
                step=1,
                start_ns=0,
                end_ns=40,
                pred=0,
                from_ns=35,
                local_ns=5,
            ),
        ]
    anchors = _anchor_rows(rows).with_columns(idx=pl.int_range(pl.len()).over("rank"))
    coll = pl.DataFrame(
        {
            "rank": [0, 1],
            "name": [ar, ar],
            "start_ns": [10, 30],
            "transfer_ns": [5, 5],
            "exposed_ns": [5, 5],
            "exposed_wait_ns": [20, 0],
        }
    )
    matched = pl.DataFrame(
        {"rank": [0, 1], "name": [ar, ar], "start_ns": [10, 30], "step": [1, 1], "ordinal": [0, 0]}
    )
    lk = cr.link(anchors, coll, matched)
    assert lk is not None
    return lk


def test_toy_job_replays_and_names_the_slow_rank() -> None:
    lk = _toy()
    rep = cr.replay(lk)
    assert np.array_equal(rep.end, lk.end_ns)
    assert rep.step_times["duration_ns"].to_list() == [40]
    path = cr.critical_path(lk, rep)
    # rank 1's 30 of work, then the transfer after its arrival, then rank 1's (or 0's) tail
    assert path["rank"].to_list() == [1]
    assert path.select(pl.sum_horizontal(CATS)).item() == 40
    assert path["gpu_communication_ns"].item() == 5
    # Balanced: own time rank 0 = 40 - 20 waited, rank 1 = 40; each scaled to the mean 30.
    # Rank 1 arrives at 22.5, the all-reduce ends at 27.5, rank 0's tail (7.5) ends the step.
    balanced = cr.replay(lk, cr.balanced(lk))
    assert cr.step_time_ns(balanced) == pytest.approx(35, abs=1)
    # The exposed transfer hidden: everything after it moves 5 earlier.
    assert cr.step_time_ns(cr.replay(lk, cr.overlapped(lk))) == 35


def test_one_rank_is_not_linked() -> None:
    lk = _toy()
    one = lk.anchors.filter(pl.col("rank") == 0).select(list(cr.ANCHOR_SCHEMA))
    assert cr.link(one, pl.DataFrame(), pl.DataFrame()) is None


@cache
def _linked(pattern: str, variant: str) -> tuple[cr.Linked, Views]:
    paths = [SAMPLES / pattern.format(variant, r) for r in (0, 1)]
    if not all(p.is_file() for p in paths):
        pytest.skip("sample traces missing")
    views = Views(choose_window(combine([load(p) for p in paths]), "steps"))
    return _link_views(views), views


def _instances(views: Views) -> tuple[pl.DataFrame, pl.DataFrame]:
    kernels = views.marked_launches.filter(pl.col("kind") == "kernel")
    per_rank, inst, _ = instances_from(flagged_comm_kernels(kernels), len(views.ranks))
    return per_rank, inst


def _link_views(views: Views) -> cr.Linked:
    lk = cr.link(cr.views_anchors(views), views.collectives, _instances(views)[0])
    assert lk is not None
    return lk


def _check_exact(lk: cr.Linked, views: Views) -> None:
    rep = cr.replay(lk)
    # Every anchor comes back at its recorded time: arrivals, ends, step ends.
    assert np.array_equal(rep.end, lk.end_ns)
    assert np.array_equal(rep.arrival, np.where(lk.is_coll, lk.start_ns, lk.end_ns))
    # The job's steps: each ends with its last rank's step (as the ranks recorded them).
    walls = views.wall_steps.filter(pl.col("step").is_in(lk.steps))
    ends = walls.group_by("step").agg(pl.col("wall_end_ns").max()).sort("step")
    assert rep.step_times["end_ns"].to_list() == ends["wall_end_ns"].to_list()
    # Each anchor's local time is split by category without loss.
    a = lk.anchors.filter(pl.col("local_ns") >= 0)
    assert (a.select(pl.sum_horizontal(CATS)).to_series() == a["local_ns"]).all()
    # The path's breakdown adds up to each step.
    path = cr.critical_path(lk, rep)
    assert (path.select(pl.sum_horizontal(CATS)).to_series() == path["duration_ns"]).all()
    assert (path.select(CATS).min_horizontal() >= 0).all()


@pytest.mark.parametrize("pair", list(PAIRS), ids="-".join)
@pytest.mark.parametrize("variant", ["bad", "good"])
def test_unchanged_linked_graph_gives_back_the_trace(pair: tuple[str, str], variant: str) -> None:
    _check_exact(*_linked(PAIRS[pair], variant))


@pytest.mark.parametrize(
    "pattern",
    ["holdout/torch/ddp_gpt_train_rank{1}.json.gz", "holdout/nsys/ddp_gpt_train_rank{1}.sqlite.gz"],
)
def test_held_out_ddp_job_gives_back_the_trace(pattern: str) -> None:
    """A real DDP job (GPT, 2 ranks), CPU-bound: its path is host work, on one rank or the
    other."""
    lk, views = _linked(pattern, "")
    _check_exact(lk, views)
    path = cr.critical_path(lk, cr.replay(lk))
    assert ((path["cpu_ns"] + path["launch_ns"]) > 0.6 * path["duration_ns"]).all()


@pytest.mark.parametrize("profiler", ["torch", "nsys"])
def test_path_follows_the_straggler(profiler: str) -> None:
    """rank_imbalance gives one rank in turn twice the rows: each step's path is on the rank the
    others waited for in that step (the one that reached its all-reduces last)."""
    lk, views = _linked(PAIRS[("rank_imbalance", profiler)], "bad")
    path = cr.critical_path(lk, cr.replay(lk))
    _, inst = _instances(views)
    late = (
        inst.filter(pl.col("skew_ns") > 100_000)
        .group_by("step")
        .agg(pl.col("latest_rank").mode().first())
        .sort("step")
    )
    got = path.join(late, on="step")
    assert got.height >= 3
    assert (got["rank"] == got["latest_rank"].cast(pl.Int32)).all()
    assert (got["rank_pct"] > 80).all()
    assert (got["gpu_compute_ns"] > 0.8 * got["duration_ns"]).all()
    # the straggler changes from step to step
    assert got["rank"].n_unique() == 2


def test_exposed_all_reduce_is_on_the_path() -> None:
    bad, _ = _linked(PAIRS[("nccl_overlap", "nsys")], "bad")
    good, _ = _linked(PAIRS[("nccl_overlap", "nsys")], "good")

    def comm_share(lk: cr.Linked) -> float:
        p = cr.critical_path(lk, cr.replay(lk))
        return float(p["gpu_communication_ns"].sum() / p["duration_ns"].sum())

    assert comm_share(bad) > 0.15 > comm_share(good)


def test_linked_what_if_against_the_measured_savings() -> None:
    """The linked prediction of each pair's fix against the saving its good twin measured (job
    step times, bad - good; docs/critical-path.md has the table). The balanced ranks are within
    35% under both profilers; the hidden all-reduces are over-predicted (the GEMMs of the good
    twins run slower beside the NCCL kernels, which the graph does not model), within 35% under
    Nsight Systems."""
    errors = {}
    for (workload, profiler), pattern in PAIRS.items():
        _, _, measured, fixes = _pair(pattern)
        errors[(workload, profiler)] = fixes[FIX[workload]]["saving_ns"] / measured - 1
        # the other fix is not what these pairs are about: it predicts little
        other = next(s for s in FIX.values() if s != FIX[workload])
        assert fixes[other]["saving_ns"] < 0.15 * measured
    assert abs(errors[("rank_imbalance", "torch")]) <= 0.35, errors
    assert abs(errors[("rank_imbalance", "nsys")]) <= 0.35, errors
    assert 0 < errors[("nccl_overlap", "nsys")] <= 0.35, errors
    assert 0 < errors[("nccl_overlap", "torch")] < 1, errors


def _pair(pattern: str) -> tuple[int, int, int, dict]:
    """A pair's job step times (bad, good) as the unchanged linked replay gives them, the
    measured saving, and the bad job's linked what-ifs."""
    bad, _ = _linked(pattern, "bad")
    good, _ = _linked(pattern, "good")
    now, fixed = cr.step_time_ns(cr.replay(bad)), cr.step_time_ns(cr.replay(good))
    assert now is not None and fixed is not None
    return now, fixed, now - fixed, cr.what_if(bad)["fixes"]


#: The heading of the linked table in sample_traces/README.md's what-if proof section.
LINKED_HEADING = "### Linked across ranks"


def linked_table() -> list[str]:
    """The linked table of sample_traces/README.md (what-if proof section), one line a pair:
    the job step times of the bad and good pairs (each job step ends when its last rank's step
    ends, as recorded: the unchanged linked replay gives them back), the measured saving
    (bad - good), the linked prediction of the pair's fix and its error, and each rank's own
    prediction's error (the per-rank table above it: tests/analysis/test_whatif.py).
    ``python -m tests.analysis.test_critical_ranks`` prints it."""
    from tests.analysis.test_whatif import pairs, prediction

    per_rank = {
        (bad["workload"], bad["profiler"], bad["rank"]): prediction(bad, good)["error"]
        for bad, good in pairs()
        if bad["workload"] in FIX
    }
    lines = []
    for (workload, profiler), pattern in PAIRS.items():
        now, fixed, measured, fixes = _pair(pattern)
        predicted = fixes[FIX[workload]]["saving_ns"]
        ranks = ", ".join(
            f"{per_rank[(workload, profiler, r)] * 100:+.0f}% (rank {r})" for r in (0, 1)
        )
        cells = [
            f"`{profiler}/{workload}`",
            f"`{FIX[workload]}`",
            *(f"{v / 1e6:.2f}" for v in (now, fixed, measured, predicted)),
            f"{(predicted / measured - 1) * 100:+.0f}%",
            ranks,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def test_the_readme_linked_table_is_the_one_computed() -> None:
    text = (SAMPLES / "README.md").read_text()
    section = text.split("## What-if predictions against the measured savings", 1)[1]
    section = section.split(LINKED_HEADING, 1)[1].split("\n#", 1)[0]
    shown = [ln for ln in section.splitlines() if ln.startswith(("| `nsys/", "| `torch/"))]
    assert shown == linked_table(), "regenerate it: python -m tests.analysis.test_critical_ranks"


def test_job_reduced_rank_by_rank_equals_the_combined_trace() -> None:
    paths = [SAMPLES / PAIRS[("rank_imbalance", "nsys")].format("bad", r) for r in (0, 1)]
    if not all(p.is_file() for p in paths):
        pytest.skip("sample traces missing")
    traces = [load(p) for p in paths]
    old = analyze_job(choose_window(combine(traces), "steps"), rules=False)
    new = analyze_summaries([reduce_trace(choose_window(t, "steps")) for t in traces])
    assert old.critical is not None and new.critical is not None
    assert old.critical.steps.equals(new.critical.steps)
    assert old.critical.what_if == new.critical.what_if
    doc = job_to_dict(new)
    json.dumps(doc, allow_nan=False)
    steps = doc["critical_path"]["steps"]
    assert [s["rank"] for s in steps] == [0, 1, 0, 1, 0]
    assert doc["critical_path"]["what_if"]["fixes"]["collective-wait"]["saving_ns"] > 0


@pytest.mark.parametrize("name", ["nsysai_2gpu_sendrecv_before", "nsysai_2gpu_sendrecv_after"])
def test_public_trace_of_two_processes(name: str) -> None:
    """One Nsight Systems export holding both ranks of a torchrun job: its collectives link and
    replay exactly; its steps are inferred (a repeating kernel sequence), which need not line up
    across ranks, so the job has no steps to cut the path at."""
    path: Path = PUBLIC / "nsys" / f"{name}.sqlite"
    if not path.is_file():
        pytest.skip("../shared/traces/public is absent")
    views = Views(choose_window(load(path), "steps"))
    lk = _link_views(views)
    assert lk.n_inst > 10 and lk.ranks == [0, 1]
    rep = cr.replay(lk)
    assert np.array_equal(rep.end, lk.end_ns)
    assert np.array_equal(rep.arrival, lk.start_ns)
    # a what-if still moves the collectives, and replays back when it changes nothing
    assert np.array_equal(
        cr.replay(lk, cr.LinkedChange(cut_ns=np.zeros(lk.size, np.int64))).end, lk.end_ns
    )
    assert (cr.replay(lk, cr.overlapped(lk)).end <= lk.end_ns).all()
    assert lk.steps == []
    per_rank, _ = _instances(views)
    assert cr.analyze_linked(cr.views_anchors(views), views.collectives, per_rank) is None


if __name__ == "__main__":
    print("\n".join(linked_table()))
