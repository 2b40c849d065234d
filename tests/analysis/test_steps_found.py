"""Steps however they are named, and inferred from the GPU when nothing names them."""

from __future__ import annotations

import pytest

from tests.support.kineto_builder import KinetoBuilder
from traceanalyzer.analysis.views import Views
from traceanalyzer.ingest import read_any


def _user(b: KinetoBuilder, name: str, ts: float, dur: float) -> None:
    b.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1,
                     "ts": ts, "dur": dur, "args": {}})


def _loop(b: KinetoBuilder, names: list[str], inner: str | None = None, period: float = 1000):
    for i, name in enumerate(names):
        t0 = 100 + i * period
        _user(b, name, t0, period - 50)
        if inner:
            _user(b, inner.format(i=i), t0 + 10, 200)
        for k in range(3):
            b.launch(f"kernel_{k}", t0 + 20 + k * 50, 10, t0 + 40 + k * 100, 80)


def _steps(tmp_path, b: KinetoBuilder) -> Views:
    return Views(read_any(b.write(tmp_path / "t.json")))


@pytest.mark.parametrize("pattern", ["step {i}", "step_{i}", "iter {i}", "Iteration {i}",
                                     "train_step[{i}]", "batch {i}", "## step {i} ##"])
def test_numbered_ranges_are_one_step_name(tmp_path, pattern):
    b = KinetoBuilder()
    _loop(b, [pattern.format(i=i + 10) for i in range(5)])
    views = _steps(tmp_path, b)
    assert views.step_source == "range"
    assert views.cpu_steps["step"].to_list() == [10, 11, 12, 13, 14]  # the numbers in the names
    assert views.step_label == pattern.format(i="#")


def test_outermost_repeating_range_is_the_step(tmp_path):
    b = KinetoBuilder()
    _loop(b, [f"iteration {i}" for i in range(4)], inner="step {i}")
    views = _steps(tmp_path, b)
    assert views.cpu_steps.height == 4
    assert views.step_label == "iteration #"


@pytest.mark.parametrize("name", ["batch_norm", "Optimizer.step#AdamW.step", "lr_scheduler.step",
                                  "step loss", "dataloader"])
def test_names_that_only_contain_a_step_word_are_not_steps(tmp_path, name):
    b = KinetoBuilder()
    _loop(b, [name] * 4)
    views = _steps(tmp_path, b)
    assert views.step_source != "range"


def test_unnumbered_repeating_step_name_and_serving_loop(tmp_path):
    for name in ("train_step", "execute_model"):
        b = KinetoBuilder()
        _loop(b, [name] * 4)
        (tmp_path / name).mkdir()
        views = _steps(tmp_path / name, b)
        assert views.step_source == "range"
        assert views.cpu_steps["step"].to_list() == [0, 1, 2, 3]


def test_profiler_steps_come_first(tmp_path):
    b = KinetoBuilder()
    _loop(b, [f"step {i}" for i in range(3)])
    for i in range(3):
        b.step(i + 7, 100 + i * 1000, 950)
    views = _steps(tmp_path, b)
    assert views.step_source == "ProfilerStep"
    assert views.cpu_steps["step"].to_list() == [7, 8, 9]


def test_steps_inferred_from_a_repeating_kernel_sequence(tmp_path):
    b = KinetoBuilder()
    t = 100.0
    for _ in range(6):  # a step: an embedding, three layers of two kernels, an optimizer
        for name in ["embed"] + ["gemm", "relu"] * 3 + ["adam"]:
            b.launch(name, t, 5, t + 10, 20)
            t += 30
        t += 500  # the host prepares the next batch
    views = _steps(tmp_path, b)
    assert views.step_source == "inferred"
    assert views.cpu_steps.height == 6
    assert "embed" in (views.step_label or "")  # the step starts after the long GPU gap


def test_a_cuda_graph_capture_is_not_a_loop(tmp_path):
    from tests.support.paths import SAMPLES

    views = Views(read_any(SAMPLES / "programs" / "torch" / "cudagraph_capture.json.gz"))
    assert views.cpu_steps.is_empty()


def test_serving_iterations_named_by_their_batch(tmp_path):
    b = KinetoBuilder()
    names = [f"execute_{n}_context_{c}(sq{n}sk{c}sqsq{n})" for n, c in
             [(32, 0), (1, 32), (1, 33), (1, 34)]]
    _loop(b, names)
    views = _steps(tmp_path, b)
    assert views.step_source == "range" and views.step_label == "execute_#_context_#"
    assert views.cpu_steps["step"].to_list() == [0, 1, 2, 3]
