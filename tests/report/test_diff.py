import json

import pytest

from tests.support.paths import REPO
from tests.support.report_fixtures import HOSTILE, hostile_trace_and_result, make_result, make_trace
from traceanalyzer.findings import Finding
from traceanalyzer.report import diff as rd

PUBLIC = REPO.parent / "shared" / "traces" / "public"


def _pair():
    before = make_result()
    after = make_result(kernel_scale=0.5)
    after.metrics.busy_ns = int(after.metrics.span_ns * 0.9)
    after.findings = [f for f in after.findings if f.slug != "gpu-idle-gaps"]
    after.findings.append(Finding("small-grid", "TA010", "low", "Small grids", "m", "fix",
                                  1000, 0.1))
    return before, after


def test_metric_deltas_and_verdicts():
    before, after = _pair()
    d = rd.diff_results(before, after)
    m = {x.name: x for x in d.metrics}
    assert m["step_time_mean_ns"].delta == pytest.approx(-0.5e6)
    assert m["step_time_mean_ns"].delta_pct == pytest.approx(-50.0)
    assert m["step_time_mean_ns"].verdict == "better"
    assert m["busy_pct"].delta == pytest.approx(20.0, abs=0.01)
    assert m["busy_pct"].verdict == "better"  # higher busy is better
    assert {"idle_host_wait_pct", "idle_kernel_wait_pct", "idle_other_pct"} <= set(m)


def test_kernel_and_category_deltas_per_step():
    before, after = _pair()
    after.metrics.step_count = 6  # twice the steps: per-step times halve again
    d = rd.diff_results(before, after)
    assert d.basis == "per step"
    k = {r["name"]: r for r in d.kernels.iter_rows(named=True)}
    gemm = k["ampere_sgemm_128x64_tn"]
    assert gemm["before_ns"] == pytest.approx(100_000)  # 300 µs over 3 steps
    assert gemm["after_ns"] == pytest.approx(25_000)  # 150 µs over 6 steps
    assert gemm["delta_pct"] == pytest.approx(-75.0)
    # largest absolute change first
    deltas = [abs(x) for x in d.kernels["delta_ns"].to_list()]
    assert deltas == sorted(deltas, reverse=True)
    assert set(d.categories["category"].to_list()) >= {"gemm", "communication"}


def test_kernels_only_on_one_side_are_kept():
    before, after = _pair()
    after.kernels = after.kernels.filter(after.kernels["name"] != "flash_fwd_kernel")
    d = rd.diff_results(before, after)
    row = d.kernels.filter(d.kernels["name"] == "flash_fwd_kernel").row(0, named=True)
    assert row["after_ns"] == 0 and row["after_count"] == 0 and row["delta_pct"] == -100.0


def test_findings_resolved_new_unchanged():
    before, after = _pair()
    d = rd.diff_results(before, after)
    assert [x.slug for x in d.resolved] == ["gpu-idle-gaps"]
    assert [x.slug for x in d.new] == ["small-grid"]
    assert [x.slug for x in d.unchanged] == ["exposed-communication"]
    u = d.unchanged[0]
    assert u.before_impact_ns is not None and u.after_impact_ns is not None
    assert d.new[0].before_impact_ns is None and d.new[0].after_impact_ns == 1000
    assert d.resolved[0].after_impact_ns is None and d.resolved[0].before_impact_ns > 0


def test_outputs(tmp_path):
    before, after = _pair()
    d = rd.diff_results(before, after)
    rd.write_json(d, tmp_path / "d.json")
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["kind"] == "diff" and doc["schema_version"] >= 1
    assert {"resolved", "new", "unchanged"} == set(doc["findings"])
    assert doc["metrics"][0]["name"] == "step_time_mean_ns"
    text = rd.render_terminal(d)
    assert "Resolved findings (1)" in text and "gpu-idle-gaps" in text
    md = rd.render_markdown(d)
    assert "| Step time (mean) | 1 ms | 500 µs |" in md
    html = rd.render_html(d)
    assert html.startswith("<!DOCTYPE html>") and "Resolved (1)" in html


def test_hostile_names_are_escaped_everywhere():
    trace, evil = hostile_trace_and_result()
    d = rd.diff_results(make_result(make_trace()), evil)
    html = rd.render_html(d)
    for s in HOSTILE:
        if "<" in s:  # text such as "javascript:x" is harmless; markup must not survive
            assert s not in html
    assert "<script" not in html.lower()
    md = rd.render_markdown(d)
    assert "<script" not in md and "<img" not in md
    term = rd.render_terminal(d)
    assert "\x1b" not in term


def test_terminal_strips_escape_sequences():
    before, after = _pair()
    after.kernels = after.kernels.with_columns(
        after.kernels["name"].str.replace("flash", "\x1b[31mflash"))
    assert "\x1b" not in rd.render_terminal(rd.diff_results(before, after))


def _run_cli(args):
    from click.testing import CliRunner

    from traceanalyzer.cli.diff import diff

    assert args[0] == "diff"
    return CliRunner().invoke(diff, args[1:], catch_exceptions=False)


@pytest.mark.slow
def test_cli_diff_nsys_pair(tmp_path):
    b = PUBLIC / "nsys" / "nsysai_2gpu_sendrecv_before.sqlite"
    a = PUBLIC / "nsys" / "nsysai_2gpu_sendrecv_after.sqlite"
    if not (b.exists() and a.exists()):
        pytest.skip("public nsys traces not present")
    res = _run_cli(["diff", str(b), str(a), "--no-cache", "--json", str(tmp_path / "d.json"),
                    "--html", str(tmp_path / "d.html"), "--markdown", str(tmp_path / "d.md")])
    assert res.exit_code == 0, res.output
    assert "GPU busy" in res.output and "Resolved findings" in res.output
    doc = json.loads((tmp_path / "d.json").read_text())
    names = {m["name"]: m for m in doc["metrics"]}
    assert names["busy_pct"]["before"] != names["busy_pct"]["after"]
    assert doc["kernels"] and doc["categories"]
    assert (tmp_path / "d.html").stat().st_size > 1000


@pytest.mark.slow
def test_cli_diff_kineto_pair(tmp_path):
    b = PUBLIC / "kineto" / "hta_v100_rank_of2_test.json.gz"
    a = PUBLIC / "kineto" / "hta_a100_rank3of8_control.json.gz"
    if not (b.exists() and a.exists()):
        pytest.skip("public kineto traces not present")
    res = _run_cli(["diff", str(b), str(a), "--no-cache", "--json", str(tmp_path / "d.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["basis"] == "per step"
    m = {x["name"]: x for x in doc["metrics"]}
    assert m["step_time_mean_ns"]["before"] and m["step_time_mean_ns"]["after"]
    assert m["step_time_mean_ns"]["delta"] == pytest.approx(
        m["step_time_mean_ns"]["after"] - m["step_time_mean_ns"]["before"], abs=0.01)
    total = len(doc["findings"]["resolved"]) + len(doc["findings"]["new"]) + \
        len(doc["findings"]["unchanged"])
    assert total >= 1


def test_diff_names_the_memory_peaks_where_recorded():
    from tests.support.paths import REPO
    from traceanalyzer import analyze
    from traceanalyzer.report.diff import diff_results

    torch_dir = REPO / "sample_traces" / "programs" / "torch"
    bad, good = (analyze(torch_dir / f"empty_cache_{v}_torch.json.gz") for v in ("bad", "good"))
    rows = {m.name: m for m in diff_results(bad, good).metrics}
    assert rows["peak_memory_reserved_bytes"].before == 2315255808
    assert rows["peak_memory_reserved_bytes"].after == 2292187136
    assert rows["peak_memory_allocated_bytes"].verdict == "better"
    plain = analyze(REPO / "sample_traces" / "torch" / "gpt_step_bad.json.gz")  # no memory events
    assert "peak_memory_allocated_bytes" not in {m.name for m in diff_results(plain, plain).metrics}
