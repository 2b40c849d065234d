"""nccl-not-overlapped counts the steps' communication when the trace marks steps: a collective
before the first step (a barrier, DDP's parameter broadcast, ranks lining up after a profiler
started) is set-up, not communication that overlap could hide. Seen on the real 2-GPU
nccl_overlap_good traces, where the barrier that lines the ranks up waited 30 ms on one rank."""

from __future__ import annotations

from test_rules_detectors import Synth, busy_loop, run

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


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
