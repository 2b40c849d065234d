"""The critical path and the what-if on a bounded set of steps (critical_path.judged_steps):
over the node budget, whole contiguous steps around the median step, said in every report, and
a graph that does not grow with the trace. The budget is lowered here instead of building a
huge trace."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.synth import Synth
from traceanalyzer.analysis import analyze_trace, critical_path
from traceanalyzer.analysis.critical_path import build_graph, replay, step_time_ns
from traceanalyzer.analysis.views import Views
from traceanalyzer.report import jsonout
from traceanalyzer.report.whatif_view import judged_note, whatif_view

KERNELS = 12  # per step, plus one launch call each and a synchronize: 25 nodes a step
STEP_US = 1_000.0


def _trace(steps: int) -> Synth:
    """``steps`` equal steps of KERNELS kernels, each step ending in a device synchronize."""
    s = Synth()
    for n in range(steps):
        t = 100.0 + n * STEP_US
        s.step(n, t, STEP_US - 20)
        for i in range(KERNELS):
            s.kernel("ampere_sgemm_128x64_nn", t + 20 + i * 60, 50)
        s.api("cudaDeviceSynchronize", t + 20 + KERNELS * 60, 40)
    return s


def _views(steps: int) -> Views:
    return Views(_trace(steps).trace())


def test_under_the_budget_the_graph_is_the_whole_window() -> None:
    views = _views(12)
    g = build_graph(views, 0)
    assert g is not None and g.judged is not None
    assert not g.judged["bounded"]
    assert g.judged["steps"] == g.judged["of_steps"] == g.steps.height
    assert g.judged["nodes"] == g.judged["window_nodes"] == g.n_calls + g.n_gpu
    assert judged_note(g.judged) == ""


@pytest.mark.parametrize("budget", [100, 260, 1])
def test_over_the_budget_whole_steps_around_the_median(budget: int) -> None:
    views = _views(24)
    whole = build_graph(views, 0, budget=10**12)
    g = build_graph(views, 0, budget=budget)
    assert whole is not None and g is not None and g.judged is not None
    j = g.judged
    assert j["bounded"] and j["of_steps"] == whole.steps.height
    judged = g.steps["step"].to_list()
    # contiguous, the median step among them, at least one, and as reported
    all_steps = whole.steps["step"].to_list()
    at = all_steps.index(judged[0])
    assert judged == all_steps[at : at + len(judged)]
    assert all_steps[(len(all_steps) - 1) // 2] in judged
    assert len(judged) == j["steps"] >= 1
    assert (j["first"], j["last"]) == (judged[0], judged[-1])
    # within the budget (but for a single step bigger than it), and every node counted
    assert j["nodes"] == g.n_calls + g.n_gpu
    assert j["nodes"] <= budget or len(judged) == 1
    # whole steps: every activity of a judged step is in the graph, none of another step
    in_steps = whole.g_step[np.isin(whole.g_step, judged)]
    assert np.array_equal(np.sort(g.g_step), np.sort(in_steps))
    # a per-step figure: equal steps give the whole window's mean step time
    base, mean = step_time_ns(replay(g)), step_time_ns(replay(whole))
    assert base is not None and mean is not None
    assert abs(base - mean) <= 0.01 * mean


def test_the_graph_stays_within_the_budget_as_the_trace_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(critical_path, "NODE_BUDGET", 200)
    sizes = []
    for steps in (16, 128):  # 8x the trace
        g = build_graph(_views(steps), 0)
        assert g is not None and g.judged is not None and g.judged["bounded"]
        assert g.n_calls + g.n_gpu <= 200
        sizes.append((g.n_calls + g.n_gpu, g.judged["steps"], g.judged["of_steps"]))
    assert sizes[0][:2] == sizes[1][:2]  # the same nodes, the same steps judged
    assert sizes[1][2] > 7 * sizes[0][2]  # while the window's steps grew 8x


def test_every_report_says_which_steps_were_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(critical_path, "NODE_BUDGET", 120)
    s = _trace(24)
    # a sync per step makes a finding with a what-if, so that the what-if table shows
    result = analyze_trace(Views(s.trace()).trace)
    assert result.what_if is not None
    j = result.what_if["judged_steps"]
    assert j["bounded"] and j["node_budget"] == 120 and j["steps"] < j["of_steps"]
    doc = jsonout.to_json_dict(result)
    assert doc["what_if"]["judged_steps"]["first"] == j["first"]
    # the path's breakdown is there for the judged steps only
    with_path = [r["step"] for r in doc["steps"] if r.get("critical_path")]
    assert with_path == list(range(j["first"], j["last"] + 1))
    note = judged_note(j)
    assert f"steps {j['first']}-{j['last']}" in note and "of the window's" in note
    view = whatif_view(result)
    assert view is not None  # the one note, in the intro every report prints
    assert note in view.intro()


def _stepless(kernels: int) -> Views:
    """A serving loop's shape: launches and kernels, no steps."""
    s = Synth()
    for i in range(kernels):
        s.kernel("ampere_sgemm_128x64_nn", 100.0 + i * 60, 50)
    return Views(s.trace())


def test_a_window_without_steps_is_cut_to_its_middle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without steps there is no step time to explain, but the graph is built all the same:
    over the budget, the time range in the window's middle that holds the budget's nodes, the
    same however long the window grows, and said so."""
    monkeypatch.setattr(critical_path, "NODE_BUDGET", 200)
    whole = build_graph(_stepless(90), 0)
    assert whole is not None and whole.judged is not None and not whole.judged["bounded"]
    judged = []
    for kernels in (400, 3_200):  # 8x the trace
        g = build_graph(_stepless(kernels), 0)
        assert g is not None and g.judged is not None
        j = g.judged
        assert j["bounded"] and j["steps"] == j["of_steps"] == 0
        assert j["nodes"] == g.n_calls + g.n_gpu and 190 <= j["nodes"] <= 200
        assert j["window_nodes"] == 2 * kernels
        # the middle: as many nodes before the range as after it
        t0, span = 100_000, kernels * 60_000
        assert abs((j["start_ns"] - t0) - (t0 + span - j["end_ns"])) <= 2 * 60_000
        judged.append(j["nodes"])
        note = judged_note(j)
        assert "middle of the window" in note and f"{j['nodes']:,}" in note
    assert judged[0] == judged[1]
