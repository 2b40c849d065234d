"""What issue 37 left open, checked on real traces of each kind: steps named by the trace's own
ProfilerStep numbers in every report, the "exposed transfer" figure in every report under one
label, and a window sentence that accounts for the whole window."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer import analyze
from traceanalyzer.report._common import EXPOSED_TRANSFER_LABEL
from traceanalyzer.report.html import render_html
from traceanalyzer.report.jsonout import to_json_dict
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.terminal import render_summary

BERT = SAMPLES / "holdout" / "torch" / "bert_fp32_train.json.gz"  # ProfilerStep#2-#4
V100 = PUBLIC / "kineto" / "hta_v100_rank_of2_test.json.gz"  # ProfilerStep#1009-#1014
GPT_BF16 = SAMPLES / "programs" / "torch" / "gpt_bf16_torch.json.gz"  # ProfilerStep#2-#7
NSYS_WARMUP = SAMPLES / "nsys" / "unfused_attention_good.sqlite"  # NVTX ProfilerStep#, warm-up
NSYS_2GPU = PUBLIC / "nsys" / "nsysai_2gpu_sendrecv_before.sqlite"  # two ranks, inferred steps
DDP0 = SAMPLES / "holdout" / "torch" / "ddp_gpt_train_rank0.json.gz"
NSYS_DDP0 = SAMPLES / "holdout" / "nsys" / "ddp_gpt_train_rank0.sqlite.gz"


def _have(*paths):
    return [p for p in paths if p.exists()]


def _outputs(result) -> dict[str, str]:
    return {
        "terminal": render_summary(result),
        "markdown": render_markdown(result),
        "html": render_html(result),
    }


# --- 1. steps are named by the trace's numbers --------------------------------------------------

PROFILER_STEPS = _have(BERT, V100, GPT_BF16, NSYS_WARMUP)


@pytest.mark.skipif(len(PROFILER_STEPS) < 2, reason="traces absent")
@pytest.mark.parametrize("path", PROFILER_STEPS, ids=lambda p: p.name)
def test_steps_are_named_by_their_profilerstep_number_everywhere(path):
    result = analyze(path, use_cache=False)
    steps = result.steps.filter(result.steps["rank"] == result.metrics.rank)
    numbers = set(steps["step"].to_list())
    # The trace's own names carry the same numbers: ProfilerStep#12 is step 12.
    for number, name in zip(steps["step"].to_list(), steps["name"].to_list(), strict=True):
        assert name == f"ProfilerStep#{number}"
    first, last = min(numbers), max(numbers)
    named = (
        f"steps {first}-{last}, numbered as the trace names them: ProfilerStep#{first} to "
        f"ProfilerStep#{last}"
    )
    outputs = _outputs(result)
    assert f"steps: {len(numbers)} ({named})" in " ".join(outputs["terminal"].split())  # wrapped
    assert "ProfilerStep#\u200d" in outputs["markdown"] or named in outputs["markdown"]
    assert named in outputs["html"]
    for where, text in outputs.items():
        # No other numbering of steps: no "#N" labels, and every step a report names is one
        # of the trace's (a warm-up step left out of the window is one of them too).
        assert not re.search(r"step #\d|\(#\d", text), where
        found = {int(n) for n in re.findall(r"\bsteps? (\d+)(?![\d.,]* ?(?:ms|µs|s|%))", text)}
        warmup = {w["step"] for w in (result.window.warmup if result.window else [])}
        assert found and found <= numbers | warmup, (where, found - numbers - warmup)
    doc = json.loads(json.dumps(to_json_dict(result), default=str))
    assert {s["step"] for s in doc["steps"]} == numbers
    assert doc["window"]["first_step"] == first and doc["window"]["last_step"] == last


@pytest.mark.skipif(not NSYS_2GPU.exists(), reason="public traces absent")
def test_inferred_steps_say_they_are_numbered_in_order():
    result = analyze(NSYS_2GPU, use_cache=False)
    line = next(ln for ln in render_summary(result).splitlines() if ln.strip().startswith("steps:"))
    assert "inferred from a repeating kernel sequence, numbered in order" in line


VLLM = PUBLIC / "kineto" / "tracelens_vllm_decode_cudagraph.json.gz"  # one execute_... range


@pytest.mark.skipif(not VLLM.exists(), reason="public traces absent")
def test_a_serving_range_is_not_said_to_carry_its_step_number():
    # vLLM's execute_32_context_0(sq0...)_generation_32(...) holds numbers (batch sizes), one of
    # them a 0: step 0 was said to be "numbered as the trace names them", and the name was cut
    # at 60 characters mid-word with no mark.
    result = analyze(VLLM, use_cache=False)
    name = result.steps["name"][0]
    assert name.startswith("execute_32_context_0(") and len(name) > 60
    from traceanalyzer.report._common import step_numbering

    line = step_numbering(result)
    assert "numbered as the trace names them" not in line
    assert line == (
        f"1 (step 0, numbered in order: the trace's {name[:59]}… ranges carry no step number)")


# --- 2. the exposed transfer in every report --------------------------------------------------

COMM = _have(NSYS_2GPU, DDP0, V100, NSYS_DDP0)


@pytest.mark.skipif(len(COMM) < 2, reason="traces absent")
@pytest.mark.parametrize("path", COMM, ids=lambda p: p.name)
def test_exposed_transfer_is_in_every_report_under_one_label(path):
    result = analyze(path, use_cache=False)
    m = result.metrics
    assert m.exposed_transfer_basis in ("ranks", "steps")
    pct = f"{100 * m.exposed_transfer_ns / m.span_ns:.1f}%"
    outputs = _outputs(result)
    row = next(ln for ln in outputs["terminal"].splitlines() if EXPOSED_TRANSFER_LABEL in ln)
    assert row.rstrip().endswith(pct)
    assert f"| {EXPOSED_TRANSFER_LABEL.capitalize()} | {pct} (" in outputs["markdown"]
    assert f"{EXPOSED_TRANSFER_LABEL} {pct}" in outputs["html"]
    # The label is the one docs/metrics.md defines.
    docs = (SAMPLES.parent / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert f'"{EXPOSED_TRANSFER_LABEL}"' in docs


@pytest.mark.skipif(not BERT.exists(), reason="holdout traces absent")
def test_no_exposed_transfer_row_where_it_is_not_a_separate_figure():
    result = analyze(BERT, use_cache=False)
    assert result.metrics.exposed_transfer_basis in (None, "none")  # no collectives
    for text in _outputs(result).values():
        assert EXPOSED_TRANSFER_LABEL not in text.lower()


# --- 5. the window sentence accounts for the whole window -----------------------------------

_DUR = r"([\d.]+) (s|ms|µs|ns)"
_SCALE = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}


def _ns(match) -> float:
    value, unit = match.groups()[-2:]
    return float(value) * _SCALE[unit]


WINDOWS = _have(
    BERT,
    GPT_BF16,
    NSYS_WARMUP,
    SAMPLES / "nsys" / "fp32_matmul_good.sqlite",
    SAMPLES / "nsys" / "launch_bound_good_graphlevel.sqlite",
    SAMPLES / "nsys" / "unfused_optimizer_good.sqlite",
    DDP0,
)


@pytest.mark.skipif(len(WINDOWS) < 2, reason="traces absent")
@pytest.mark.parametrize("path", WINDOWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_window_sentence_accounts_for_the_whole_window(path):
    result = analyze(path, use_cache=False)
    sentence = result.window.describe()
    # The parts the sentence names: the window is its steps' time plus what it says besides;
    # the capture is the window plus what was left out.
    captured = _ns(re.search(_DUR + " captured", sentence))
    both = re.search(
        r"analyzed steps [\d-]+, " + _DUR + " of steps in a " + _DUR + " window", sentence
    )
    if both:
        steps = float(both.group(1)) * _SCALE[both.group(2)]
        window = float(both.group(3)) * _SCALE[both.group(4)]
        rest = sentence[both.end() :].split("; left out")[0]
        besides = sum(
            _ns(m)
            for m in re.finditer(_DUR + r" (?:of it from|after this rank's|between steps)", rest)
        )
        assert rest.startswith(": ") and besides > 0, sentence
        assert steps + besides == pytest.approx(window, rel=0.01), sentence
    else:
        window = _ns(re.search(r"analyzed steps [\d-]+, " + _DUR, sentence))
        assert window == pytest.approx(result.window.analyzed_ns, rel=0.01), sentence
    left = sentence.split("; left out ", 1)[1] if "; left out " in sentence else ""
    out = sum(
        _ns(m)
        for m in re.finditer(
            _DUR + r" (?:start-up before the first step|of warm-up|after the last step)", left
        )
    )
    warmup = re.search(r"steps? [\d, -]+ \(" + _DUR + r"\) as warm-up", left)
    out += _ns(warmup) if warmup else 0
    assert window + out == pytest.approx(captured, rel=0.005), sentence


@pytest.mark.skipif(not BERT.exists(), reason="holdout traces absent")
def test_bert_window_names_the_first_steps_cpu_range_before_its_gpu_work():
    sentence = analyze(BERT, use_cache=False).window.describe()
    assert (
        "175 ms of steps in a 208 ms window: 33.3 ms of it from step 2's CPU start to the "
        "start of its GPU work, while the GPU ran" in sentence
    )
    assert "of work launched before the capture began" in sentence


# --- 6. what the nsys reports said that did not hold for the trace ---------------------------

NSYS = SAMPLES / "nsys"
NSYS_GPT = NSYS / "gpt_step_bad.sqlite"
NSYS_NANOGPT = SAMPLES / "holdout" / "nsys" / "nanogpt_train.sqlite.gz"
NSYS_RTX = PUBLIC / "nsys" / "nsysai_rtx3080_small.sqlite"


def _finding(result, slug):
    return next((f for f in result.findings if f.slug == slug), None)


NO_SHAPES = _have(NSYS_GPT, NSYS_NANOGPT, NSYS_RTX)


@pytest.mark.skipif(len(NO_SHAPES) < 2, reason="traces absent")
@pytest.mark.parametrize("path", NO_SHAPES, ids=lambda p: p.name)
def test_nsys_traces_are_not_told_to_record_shapes_with_torch_profiler_options(path):
    result = analyze(path, use_cache=False)
    reasons = [o.reason for o in result.rule_outcomes if o.status == "not_applicable"]
    shapes = [r for r in reasons if "shapes were not recorded" in r]
    assert shapes
    for reason in shapes:
        assert "(profile with record_shapes=True)" not in reason
        assert "Nsight Systems records none" in reason
    line = next(ln for ln in render_summary(result).splitlines() if "MFU:" in ln)
    assert "Nsight Systems records none" in line and "Nsight Systems, or torch.profiler" not in line


@pytest.mark.skipif(not (NSYS / "hidden_sync_bad.sqlite").exists(), reason="sample traces absent")
def test_hidden_sync_names_a_costliest_operator_only_where_operators_are_recorded():
    for path in (NSYS_GPT, NSYS / "hidden_sync_bad.sqlite", NSYS / "sync_memcpy_bad.sqlite"):
        f = _finding(analyze(path, use_cache=False), "hidden-sync")
        assert f is not None and "no operator recorded" not in f.message
        assert "costliest operator" not in f.message
    f = _finding(
        analyze(SAMPLES / "torch" / "hidden_sync_bad.json.gz", use_cache=False), "hidden-sync"
    )
    assert f is not None and re.search(r"costliest operator aten::\w+, \d+x", f.message)


@pytest.mark.skipif(not NSYS_NANOGPT.exists(), reason="holdout traces absent")
def test_odd_matmul_shape_counts_kernels_not_shapes_where_shapes_are_not_recorded():
    for path in (NSYS_NANOGPT, NSYS / "odd_matmul_shape_bad.sqlite"):
        f = _finding(analyze(path, use_cache=False), "odd-matmul-shape")
        kernels = len({row["kernel"] for row in f.evidence})
        assert re.search(rf"in {kernels} kernels? \(shapes not recorded\)", f.message)
        assert " shape had" not in f.message and " shapes had" not in f.message
    f = _finding(
        analyze(SAMPLES / "torch" / "odd_matmul_shape_bad.json.gz", use_cache=False),
        "odd-matmul-shape",
    )
    assert re.search(r"in \d+ shapes? had", f.message)


@pytest.mark.skipif(not (NSYS / "launch_bound_bad.sqlite").exists(), reason="sample traces absent")
def test_launch_overhead_share_is_of_what_the_message_says():
    for path in (NSYS / "launch_bound_bad.sqlite", NSYS / "dataloader_stall_bad.sqlite"):
        f = _finding(analyze(path, use_cache=False), "launch-overhead-bound")
        said = float(
            re.search(
                r"launch overhead (\d+)% of the time from those steps' first "
                r"kernel to their last",
                f.message,
            ).group(1)
        )
        # Evidence rows: one per flagged step, from its first kernel's start to its last's end.
        span = sum(r["end_ns"] - r["start_ns"] for r in f.evidence)
        gaps = sum(r["launch_gap_us"] for r in f.evidence) * 1000
        assert said == pytest.approx(100 * gaps / span, abs=0.6)


@pytest.mark.skipif(not (NSYS / "unfused_optimizer_bad.sqlite").exists(), reason="absent")
def test_kernel_counts_have_thousands_separators_in_every_message():
    result = analyze(NSYS / "unfused_optimizer_bad.sqlite", use_cache=False)
    for f in result.findings:
        assert not re.search(r"(?<![\d.,])\d{4,} kernels", f.message), f.message


SPAN_SHORT = _have(NSYS_RTX, NSYS / "dataloader_stall_bad.sqlite")


@pytest.mark.skipif(len(SPAN_SHORT) < 2, reason="traces absent")
@pytest.mark.parametrize("path", SPAN_SHORT, ids=lambda p: p.name)
def test_reports_say_what_percentages_are_of_when_the_gpu_span_is_short(path):
    result = analyze(path, use_cache=False)
    assert result.metrics.span_ns < 0.9 * result.window.analyzed_ns
    for text in (render_summary(result), render_markdown(result)):
        text = " ".join(text.split())  # the terminal wraps at words
        assert "every percentage, each finding's share included, is of the GPU's active span" in text


WARNED = _have(NSYS_RTX, SAMPLES / "programs" / "torch" / "cudagraph_capture.json.gz")


@pytest.mark.skipif(not WARNED, reason="traces absent")
@pytest.mark.parametrize("path", WARNED, ids=lambda p: p.name)
def test_markdown_shows_the_trace_warnings_it_counts(path):
    result = analyze(path, use_cache=False)
    assert result.meta.warnings
    text = render_markdown(result)
    assert "warning(s)" not in text
    for warning in result.meta.warnings[:3]:
        assert warning.split(":")[0][:40].replace("_", "\\_") in text


DEVICES = _have(NSYS / "sync_memcpy_bad.sqlite", NSYS_DDP0, V100)


@pytest.mark.skipif(len(DEVICES) < 2, reason="traces absent")
@pytest.mark.parametrize("path", DEVICES, ids=lambda p: p.name)
def test_the_device_line_names_the_gpus_the_rank_used(path):
    # These traces list two GPUs; the analyzed rank ran work on one of them.
    result = analyze(path, use_cache=False)
    used = set(result.streams.filter(result.streams["rank"] == result.metrics.rank)["device"])
    assert len(result.meta.devices) == 2 and len(used) == 1
    line = next(ln for ln in render_summary(result).splitlines() if "device:" in ln)
    assert "(+1 more)" not in line
    assert line.endswith("; the trace lists 1 more GPU that ran none of this rank's work")


@pytest.mark.skipif(not (NSYS / "naive_model_parallel_bad.sqlite").exists(), reason="absent")
def test_a_process_on_two_gpus_lists_both():
    result = analyze(NSYS / "naive_model_parallel_bad.sqlite", use_cache=False)
    line = next(ln for ln in render_summary(result).splitlines() if "device:" in ln)
    assert line.strip() == "device: 2 × NVIDIA H200 (GPUs 0, 1)"


GRAPH_LEVEL = NSYS / "launch_bound_good_graphlevel.sqlite"  # graphs traced whole
GRAPH_NODES = NSYS / "launch_bound_good.sqlite"  # the same program, graph nodes traced


@pytest.mark.skipif(not GRAPH_LEVEL.exists(), reason="sample traces absent")
def test_kernel_counts_say_when_a_cuda_graph_is_one_activity():
    result = analyze(GRAPH_LEVEL, use_cache=False)
    graphs = int(result.kernels["instances"].sum())
    note = (
        f"{graphs} CUDA graph executions traced whole (nsys --cuda-graph-trace=graph) count "
        "as one kernel each; the kernels inside them are not in the trace"
    )
    assert f"kernels: {note}" in " ".join(render_summary(result).split())  # wrapped at words
    assert f"**Kernels:** {note}" in render_markdown(result).replace("\\", "")
    # Traced node by node, the same program's kernels are in the trace: no note.
    nodes = analyze(GRAPH_NODES, use_cache=False)
    assert "traced whole" not in render_summary(nodes)
    assert nodes.metrics.kernels_per_step > result.metrics.kernels_per_step


GPT_BAD = SAMPLES / "torch" / "gpt_step_bad.json.gz"


@pytest.mark.skipif(not GPT_BAD.exists(), reason="sample traces absent")
def test_launch_api_time_has_one_name_in_every_report():
    # The terminal said "launch API time" (docs/metrics.md's name), the Markdown, HTML and diff
    # "Launch overhead", the launch-overhead-bound rule's word for the GPU's wait on launches.
    result = analyze(GPT_BAD, use_cache=False)
    pct = f"{result.metrics.launch_overhead_pct:.1f}%"
    outputs = _outputs(result)
    assert re.search(rf"launch API time\s+{re.escape(pct)}", outputs["terminal"])
    assert f"| Launch API time (CPU) | {pct} |" in outputs["markdown"]
    assert "Launch API time (CPU)" in outputs["html"]
    for text in outputs.values():
        assert "Launch overhead" not in text
    # The model's rows are capitalized like the others in the Markdown table.
    assert "| Model FLOPs per step |" in outputs["markdown"]
    assert "| Achieved |" in outputs["markdown"]
