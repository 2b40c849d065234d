"""Messages that agree with themselves and with docs/metrics.md (issue 37, item 6), checked on
what real traces render: counts in the number they take, relative changes only over bases
that make them mean something, pointers only to findings that exist, no bare "other"."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer import analyze
from traceanalyzer.findings import Finding, RuleOutcome
from traceanalyzer.report import diff as rd
from traceanalyzer.report._common import counted
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.terminal import render_summary
from traceanalyzer.rules.engine import _point_only_at_findings

REAL = [p for p in (PUBLIC / "kineto" / "hta_a100_rank3of8_control.json.gz",
                    PUBLIC / "kineto" / "tracelens_vllm_decode_cudagraph.json.gz",
                    PUBLIC / "nsys" / "nsysai_rtx3080_small.sqlite",
                    SAMPLES / "programs" / "torch" / "cudagraph_capture.json.gz") if p.exists()]
#: "1 steps", "1 kernels"...: a count of one with a plural noun.
ONE_PLURAL = re.compile(r"(?<![\d.,])1 (steps|kernels|ranks|gaps|collectives|runs|traces|copies)\b")
PERCENT = re.compile(r"\(([+−-])([\d,]+\.\d)%\)")


def test_counted_takes_the_number():
    assert counted(1, "step") == "1 step"
    assert counted(2, "step") == "2 steps"
    assert counted(1, "copy", "copies") == "1 copy"
    assert counted(12_000, "kernel") == "12,000 kernels"


@pytest.mark.skipif(not REAL, reason="traces absent")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_reports_say_one_step_not_one_steps(path):
    result = analyze(path, use_cache=False)
    for text in (render_summary(result), render_markdown(result)):
        assert not ONE_PLURAL.search(text), ONE_PLURAL.search(text)
        assert "worst other" not in text


@pytest.mark.skipif(not (SAMPLES / "torch" / "gpt_step_bad.json.gz").exists(),
                    reason="sample traces absent")
def test_a_diff_gives_no_percentage_over_a_tiny_base():
    before = analyze(SAMPLES / "torch" / "gpt_step_bad.json.gz", use_cache=False, rules=False)
    after = analyze(SAMPLES / "torch" / "gpt_step_good.json.gz", use_cache=False, rules=False)
    d = rd.diff_results(before, after)
    pcts = [p for p in d.kernels["delta_pct"].to_list() if p is not None]
    assert pcts and max(abs(p) for p in pcts) <= rd.MAX_RELATIVE_PCT
    # A kernel that (nearly) only the good run has is shown by its absolute change alone.
    grown = d.kernels.filter(d.kernels["after_ns"] > 11 * d.kernels["before_ns"])
    assert grown.height and grown["delta_pct"].is_null().all()
    text = rd.render_terminal(d, top=50) + rd.render_markdown(d, top=50)
    for _, number in PERCENT.findall(text):
        assert float(number.replace(",", "")) <= rd.MAX_RELATIVE_PCT


def _finding(slug: str, message: str) -> Finding:
    return Finding(slug, "TA999", "low", "t", message, "fix", 1, 0.1)


def test_a_pointer_to_a_rule_that_did_not_fire_says_so():
    fired = _finding("nccl-not-overlapped", "12 ms waited (see collective-wait).")
    other = _finding("hidden-sync", "Synced (see gpu-idle-gaps).")
    outcomes = [RuleOutcome("nccl-not-overlapped", "TA004", "fired", fired.message),
                RuleOutcome("collective-wait", "TA016", "quiet", "under 5%"),
                RuleOutcome("hidden-sync", "TA002", "fired", other.message),
                RuleOutcome("gpu-idle-gaps", "TA001", "fired", "idle")]
    _point_only_at_findings([fired, other], outcomes)
    assert fired.message == "12 ms waited (rule collective-wait stays under its threshold here)."
    assert outcomes[0].reason == fired.message
    assert other.message == "Synced (see gpu-idle-gaps)."  # it fired: the pointer stands


@pytest.mark.skipif(not (PUBLIC / "kineto" / "hta_v100_rank_of2_test.json.gz").exists(),
                    reason="public traces absent")
def test_terminal_fix_texts_are_cut_at_a_word_and_say_where_the_rest_is():
    result = analyze(PUBLIC / "kineto" / "hta_v100_rank_of2_test.json.gz", use_cache=False)
    fixes = {f.slug: " ".join(f.fix.split()) for f in result.findings}
    # The cost and fix line is wrapped at words, its continuation lines indented by 8 spaces.
    joined: list[str] = []
    for ln in render_summary(result).splitlines():
        if ln.startswith("        ") and joined:
            joined[-1] += " " + ln.strip()
        else:
            joined.append(ln)
    lines = [ln.split("; fix: ", 1)[1] for ln in joined if "; fix: " in ln]
    assert len(lines) == len(fixes)
    cut = [ln for ln in lines if "…" in ln]
    assert cut  # the V100's FP16 fix (autocast, GradScaler) is longer than a line
    for line in cut:
        shown, rest = line.split(" …", 1)
        slug = rest.rsplit("rules show ", 1)[1].rstrip("`)")
        whole = fixes[slug]
        assert whole.startswith(shown)
        assert whole[len(shown)] in " ,;:("  # the cut falls between words


_DUR = r"([\d.]+) (s|ms|µs|ns)"
_SCALE = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}


def _ns(value: str, unit: str) -> float:
    return float(value) * _SCALE[unit]


WINDOWED = [p for p in (SAMPLES / "torch" / "small_grid_bad.json.gz",
                        SAMPLES / "torch" / "gpt_step_bad.json.gz",
                        SAMPLES / "torch" / "fp32_matmul_bad.json.gz") if p.exists()]


@pytest.mark.skipif(not WINDOWED, reason="sample traces absent")
@pytest.mark.parametrize("path", WINDOWED, ids=lambda p: p.name)
def test_the_window_sentence_adds_up(path):
    # captured = left out before + analyzed window + left out after, as the sentence reads
    lines = render_summary(analyze(path, use_cache=False)).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("window:"))
    line = lines[at]
    for more in lines[at + 1:]:  # wrapped at 100 columns: its lines go on at 5 spaces
        if not more.startswith("     "):
            break
        line += " " + more.strip()
    captured = _ns(*re.search(_DUR + " captured", line).groups())
    window = re.search(r"of steps in a " + _DUR + " window", line)
    analyzed = _ns(*(window or re.search(r"analyzed steps [\d-]+, " + _DUR, line)).groups())
    before = re.search(_DUR + " start-up before the first step", line)
    after = re.search(_DUR + " after the last step", line)
    left = sum(_ns(*m.groups()) for m in (before, after) if m)
    assert analyzed + left == pytest.approx(captured, rel=0.01), line
