"""nccl-not-overlapped on small synthetic traces. It counts the steps' communication when the
trace marks steps: a collective before the first step (a barrier, DDP's parameter broadcast,
ranks lining up after a profiler started) is set-up, not communication that overlap could hide.
Seen on the real 2-GPU nccl_overlap_good traces, where the barrier that lines the ranks up waited
30 ms on one rank.

It also leaves out the time a collective waits for the other ranks (analysis/comm.py), seen on
the held-out DDP run (sample_traces/holdout, ddp_gpt_train), and collectives launched before the
profiler started. That wait is collective-wait's finding."""

from __future__ import annotations

import polars as pl
import pytest

from tests.support.synth import NCCL, US, Synth, busy_loop, run, steps_with_exposed_allreduce
from traceanalyzer.analysis.comm import step_collectives


def test_nccl_not_overlapped_fires_when_exposed():
    s = Synth()
    end = busy_loop(s, n=10)
    s.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", end + 2, 2000, stream=20)
    findings, _ = run(s)
    f = findings["nccl-not-overlapped"]
    assert f.impact_ns == 2000 * US
    assert "allreduce" in f.message and "0% of 2.0 ms of transfers overlapped" in f.message
    assert f.evidence[0]["stream"] == 20


def test_nccl_not_overlapped_quiet_when_hidden_by_compute():
    s = Synth()
    busy_loop(s, n=20)
    s.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 100, 2000, stream=20)
    assert "nccl-not-overlapped" not in run(s)[0]


def _pre_step_barrier(s: Synth, *, exposed_in_step: float = 0) -> None:
    s.kernel(NCCL, 0, 2000, launch=-10, stream=20)  # before the steps, nothing to overlap with
    end = busy_loop(s, n=20, start=2100)  # two steps of compute, 2.1 ms each
    s.step(0, 2090, 2110)
    s.step(1, 4200, end - 4200 + 10 + exposed_in_step)
    if exposed_in_step:
        s.kernel(NCCL, end + 2, exposed_in_step, launch=end - 20, stream=20)


def test_collective_before_the_first_step_is_not_counted():
    s = Synth()
    _pre_step_barrier(s)
    findings, outcomes = run(s)
    assert "nccl-not-overlapped" not in findings
    assert outcomes["nccl-not-overlapped"].status == "quiet"


def test_exposed_collective_inside_a_step_still_fires():
    s = Synth()
    _pre_step_barrier(s, exposed_in_step=1000)
    f = run(s)[0]["nccl-not-overlapped"]
    assert f.impact_ns == 1000 * 1000  # the step's collective only, not the 2 ms barrier
    assert "in 1 collective," in f.message and len(f.evidence) == 1


def test_without_steps_every_collective_counts():
    s = Synth()
    s.kernel(NCCL, 0, 2000, launch=-10, stream=20)
    busy_loop(s, n=20, start=2100)
    f = run(s)[0]["nccl-not-overlapped"]
    assert f.impact_ns == 2000 * 1000


def test_the_wait_for_other_ranks_is_not_counted():
    # The same all-reduce in three steps: 300 µs of transfer, and in step 0 2.7 ms more waiting
    # for a late rank. Only the transfers are exposed communication.
    s = Synth()
    steps_with_exposed_allreduce(s, [3000, 300, 300])
    f = run(s)[0]["nccl-not-overlapped"]
    assert f.impact_ns == pytest.approx(900 * 1000)
    assert ("Not counted: 2.7 ms the collectives spent waiting for other ranks (2.7 ms of it "
            "with no compute beside it: see collective-wait)") in f.message
    waits = sorted(row["wait_us"] for row in f.evidence)
    assert waits == pytest.approx([0, 0, 2700])


def test_a_wait_in_every_step_stays_counted():
    # Nothing shorter to compare with: the estimate errs towards transfer, never towards wait.
    s = Synth()
    steps_with_exposed_allreduce(s, [3000, 3000, 3000])
    f = run(s)[0]["nccl-not-overlapped"]
    assert f.impact_ns == pytest.approx(9000 * 1000)
    assert "Not counted: 0.0 ms" in f.message


def test_a_collective_launched_before_the_profiler_is_not_counted():
    # Running at the start with no launch recorded: the previous step's tail, of unknown step.
    s = Synth()
    s.kernel(NCCL, 0, 2000, stream=20, api=None)
    busy_loop(s, n=20, start=2100)
    assert "nccl-not-overlapped" not in run(s)[0]


def test_other_ranks_bound_the_transfer():
    # The same collective (same step, name and ordinal) on two ranks: it ends on both when the
    # later rank has arrived, so the shorter duration is the transfer and rank 0 waited 800 µs.
    rows = {"rank": [0, 1], "device": [0, 0], "stream": [20, 20], "kind": ["kernel"] * 2,
            "category": ["communication"] * 2, "name": [NCCL] * 2, "step": [3, 3],
            "start_ns": [1_000_000, 1_800_000], "end_ns": [2_000_000] * 2,
            "launch_start_ns": [990_000, 1_790_000]}
    comm = step_collectives(pl.DataFrame(rows), pl.DataFrame({"rank": [0, 1]})).sort("rank")
    assert comm["transfer_ns"].to_list() == [200_000, 200_000]
    assert comm["wait_ns"].to_list() == [800_000, 0]
    assert comm["exposed_ns"].to_list() == [200_000, 200_000]
