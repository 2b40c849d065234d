"""The analysis window: the steady state by default, what it leaves out, and the other kinds."""

from __future__ import annotations

import pytest
import yaml

from tests.support.kineto_builder import KinetoBuilder
from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.analysis.window import choose_window, parse_window, window_of
from traceanalyzer.errors import UsageError
from traceanalyzer.ingest import read_any
from traceanalyzer.report._common import fmt_ns

PROGRAMS = SAMPLES / "programs"
EXPECTED = yaml.safe_load((PROGRAMS / "expected.yaml").read_text())
CASES = [(name, trace) for name, prog in EXPECTED["programs"].items() for trace in prog["traces"]]


def _analyzed(path, window="steps"):
    trace = choose_window(read_any(path), window)
    return analyze_trace(trace, rules=False), window_of(trace.meta.extra)


@pytest.mark.parametrize(("program", "trace"), CASES)
def test_every_recording_of_a_program_agrees_on_the_steady_state(program, trace):
    expected = EXPECTED["programs"][program]
    result, window = _analyzed(PROGRAMS / trace)
    m = result.metrics
    assert window.kind == "steps" and m.window_kind == "steps"
    assert abs(m.busy_pct - expected["busy_pct"]) <= EXPECTED["busy_points"]
    assert m.step_time_p50_ns / 1e6 == pytest.approx(expected["step_ms"],
                                                    rel=EXPECTED["step_tolerance"])


@pytest.mark.parametrize("program", EXPECTED["programs"])
def test_whole_process_capture_is_judged_on_its_steps(program):
    expected = EXPECTED["programs"][program]
    path = PROGRAMS / "nsys" / f"{program}_whole.sqlite"
    whole, _ = _analyzed(path, "all")
    assert whole.metrics.busy_pct < expected["busy_pct"] - 50  # start-up dominates the capture
    result, window = _analyzed(path)
    assert window.step_label == expected["step_label"]
    assert [w["step"] for w in window.warmup] == expected["warmup"]
    assert window.before_ns > 4e9  # seconds of start-up, left out
    text = window.describe()
    assert "start-up before the first step" in text and "as warm-up" in text
    assert f"steps {window.first_step}-{window.last_step}" in text
    assert result.steps["step"].to_list() == list(range(1, 8))


def test_capture_range_and_profiler_schedule_leave_little_out():
    _, window = _analyzed(PROGRAMS / "torch" / "gpt_bf16_torch.json.gz")
    assert window.warmup == []  # the schedule's warm-up is not in the trace
    assert window.before_ns < 1e6


def test_window_all_keeps_everything_and_says_so():
    path = PROGRAMS / "nsys" / "gpt_bf16_whole.sqlite"
    result, window = _analyzed(path, "all")
    assert window.kind == "all" and result.metrics.window_kind == "all"
    assert window.describe().endswith("analyzed all of it.")
    assert result.metrics.step_count == 8


def test_a_trace_without_steps_falls_back_to_the_whole_capture(tmp_path):
    b = KinetoBuilder()
    b.launch("gemm", 10, 5, 20, 100)
    b.launch("relu", 200, 5, 210, 10)
    result, window = _analyzed(b.write(tmp_path / "t.json"))
    assert window.kind == "all" and window.reason == "no steps found"
    assert "no steps found" in window.describe()


def test_time_window_and_profiler_range():
    path = PROGRAMS / "nsys" / "gpt_bf16_whole.sqlite"
    _, window = _analyzed(path, "9s:9.5s")
    assert window.kind == "time" and window.analyzed_ns <= 0.5e9 + 1e8
    # The whole-process capture has no cudaProfilerStart: the capture is the range.
    _, window = _analyzed(path, "profiler-range")
    assert window.kind == "profiler-range" and "no cudaProfilerStart" in window.reason
    _, window = _analyzed(PROGRAMS / "nsys" / "gpt_bf16_range.sqlite", "profiler-range")
    assert window.kind == "profiler-range"


def test_warm_up_steps_and_gpu_work_launched_before_the_window(tmp_path):
    b = KinetoBuilder()
    # step 0 is slow (autotuning); its last kernel runs into step 1's time
    b.step(0, 0, 5000)
    b.launch("autotune", 10, 5, 20, 4000)
    b.launch("tail", 4990, 5, 5000, 1500)
    for i in range(1, 5):
        t0 = 5000 + (i - 1) * 1000
        b.step(i, t0, 990)
        b.launch("gemm", t0 + 10, 5, max(t0 + 20, 6510), 500)
    result, window = _analyzed(b.write(tmp_path / "t.json"))
    assert [w["step"] for w in window.warmup] == [0]
    assert result.steps["step"].to_list() == [1, 2, 3, 4]
    kernels = result.kernels["name"].to_list()
    assert "tail" not in kernels and "autotune" not in kernels  # launched in the warm-up


def _steps_then_one_without_gpu_work(tmp_path, last_dur):
    b = KinetoBuilder()
    for i in range(4):
        t0 = i * 1000
        b.step(i, t0, 950)
        b.launch("gemm", t0 + 10, 5, t0 + 20, 900)
    b.step(4, 4000, last_dur)  # the step the profiler stopped in: no GPU work recorded
    return _analyzed(b.write(tmp_path / "t.json"))


def test_a_last_step_cut_short_is_left_out_and_said(tmp_path):
    result, window = _steps_then_one_without_gpu_work(tmp_path, 40)
    assert result.steps["step"].to_list() == [0, 1, 2, 3]
    assert [c["step"] for c in window.cut_short] == [4]
    assert result.metrics.step_time_mean_ns == pytest.approx(result.metrics.step_time_p50_ns,
                                                             rel=0.05)
    text = window.describe()
    took = window.cut_short[0]["duration_ns"]
    assert took < 1e5  # from step 3's wall-clock end to step 4's CPU end
    assert f"step 4 ({fmt_ns(took)}) in it, cut short by the end of the capture" in text
    assert window.end_ns - window.start_ns <= 4000 * 1000  # ends at step 4's CPU start


def test_a_long_last_step_without_gpu_work_stays(tmp_path):
    # A whole step with the GPU idle (the host stalled) is what the analysis should report.
    result, window = _steps_then_one_without_gpu_work(tmp_path, 3000)
    assert result.steps["step"].to_list() == [0, 1, 2, 3, 4]
    assert window.cut_short == []


@pytest.mark.skipif(not (PUBLIC / "kineto" / "hta_mi250_rocm.json.gz").exists(),
                    reason="public traces absent")
def test_the_mi250_trace_leaves_out_the_step_the_profiler_stopped_in():
    result, window = _analyzed(PUBLIC / "kineto" / "hta_mi250_rocm.json.gz")
    assert result.steps["step"].to_list() == [1]
    assert [c["step"] for c in window.cut_short] == [2]
    assert result.metrics.step_time_mean_ns == result.metrics.step_time_p50_ns


@pytest.mark.parametrize("text", ["sometimes", "1:", "steps,all"])
def test_bad_window_is_a_usage_error(text):
    with pytest.raises(UsageError):
        parse_window(text)


def test_a_graph_capture_trace_says_what_it_holds():
    trace = choose_window(read_any(PROGRAMS / "torch" / "cudagraph_capture.json.gz"))
    (capture,) = [w for w in trace.meta.warnings if "capture of a CUDA/HIP graph" in w]
    assert "192 of 194 kernel launches were captured and ran no kernel" in capture
    assert "2 graph launches" in capture


def test_a_span_that_is_mostly_one_gap_is_said(tmp_path):
    b = KinetoBuilder()
    b.launch("early", 0, 5, 10, 10)
    for i in range(5):
        b.launch("gemm", 10_000 + i * 100, 5, 10_010 + i * 100, 90)
    trace = choose_window(read_any(b.write(tmp_path / "t.json")))
    assert any("one GPU idle gap" in w and "1 GPU activity before it, 5 after" in w
               for w in trace.meta.warnings)
    steady = choose_window(read_any(PROGRAMS / "nsys" / "gpt_bf16_whole.sqlite"))
    assert not any("one GPU idle gap" in w for w in steady.meta.warnings)


def test_a_schedule_with_repeat_is_judged_on_one_window(tmp_path):
    b = KinetoBuilder()
    # two profiler windows: steps 2-4 and 8-11, with unrecorded steps between them
    for i, step in enumerate([2, 3, 4, 8, 9, 10, 11]):
        t0 = i * 1000 + (5000 if step >= 8 else 0)
        b.step(step, t0, 950)
        b.launch("gemm", t0 + 10, 5, t0 + 20, 900)
    result, window = _analyzed(b.write(tmp_path / "t.json"))
    assert result.steps["step"].to_list() == [8, 9, 10, 11]
    assert "2 profiler windows" in window.describe()


@pytest.mark.parametrize("trace", ["torch/gpt_step_bad.json.gz", "nsys/gpt_step_bad.sqlite",
                                   "nsys/unfused_optimizer_bad.sqlite"])
def test_the_window_is_found_on_the_same_steps_as_the_analysis_sees(trace):
    """StepViews (launch times only, before any full view) finds the steps Views finds."""
    from traceanalyzer.analysis.views import StepViews, Views

    loaded = read_any(SAMPLES / trace)
    slim, full = StepViews(loaded), Views(loaded)
    assert slim.steps.height > 0
    assert slim.steps.equals(full.steps)
    assert (slim.step_source, slim.step_label) == (full.step_source, full.step_label)
    assert "call_stack" not in slim.launches.columns
    assert slim.launches["step"].equals(full.launches["step"])


WHOLE_TORCH = sorted((PROGRAMS / "torch").glob("*_whole.json.gz"))  # no ProfilerStep: inferred


@pytest.mark.parametrize("path", WHOLE_TORCH, ids=lambda p: p.name)
def test_inferred_steps_of_the_window_are_the_steps_analyzed(path):
    # The GPT program's whole-process capture: the window was chosen on 7 inferred steps
    # (0-6, 646 ms) while the analysis inferred them again from the window's kernels, found
    # another anchor kernel and 6 steps (0-5, 555.7 ms): "analyzed steps 0-6" beside "steps: 6
    # (steps 0-5 ...)". The analysis now keeps the window's steps.
    result, window = _analyzed(path)
    assert window.step_source == "inferred"
    steps = result.steps["step"].to_list()
    assert (window.first_step, window.last_step) == (min(steps), max(steps))
    assert window.steps_analyzed == len(steps) == result.metrics.step_count
    assert int(result.steps["duration_ns"].sum()) == window.steps_ns
    # --steps on inferred steps analyzes those steps (it found none before: "the selected
    # window", no step table).
    from traceanalyzer.analysis.window import Selection

    first = min(steps) + 1
    chosen = choose_window(read_any(path), selection=Selection(steps=(first, first + 1)))
    picked = analyze_trace(chosen,
                           rules=False)
    assert picked.steps["step"].to_list() == [first, first + 1]


VLLM = PUBLIC / "kineto" / "tracelens_vllm_decode_cudagraph.json.gz"


@pytest.mark.skipif(not VLLM.exists(), reason="public traces absent")
def test_a_lead_with_queued_gpu_work_is_not_called_idle():
    # TraceLens's vLLM decode step: its CPU range opens the window 8.37 ms before its GPU
    # work, with nothing recorded on the GPU, but its first copy was launched 7.84 ms before it
    # started: the stream was busy with work the capture does not hold, not idle.
    text = window_of(choose_window(read_any(VLLM)).meta.extra).describe()
    assert "the GPU (or its stream) was busy with work the trace does not hold" in text
    assert "7.84 ms after its launch call" in text and "the GPU idle" not in text


def test_a_lead_is_idle_unless_the_first_work_waited_after_its_launch(tmp_path):
    # The first step's CPU range opens the window 300 µs before its GPU work, and its kernel
    # starts 10 µs after its launch: the GPU waited for the host, idle. Launched 600 µs before
    # it started instead, the kernel waited behind work the trace does not hold.
    for start, said in ((300, "the GPU idle"), (890, "trace does not hold")):
        b = KinetoBuilder()
        b.step(0, 0, 300)
        b.launch("k0", 285, 5, start, 1000)
        b.step(1, start + 1000, 300)
        b.launch("k1", start + 1285, 5, start + 1300, 1000)
        trace = choose_window(read_any(b.write(tmp_path / "t.json")))
        text = window_of(trace.meta.extra).describe()
        assert said in text, text
