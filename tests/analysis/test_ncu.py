"""Nsight Compute's launches judged and matched to a timeline (analysis/ncu.py), and
``analyze --kernel-metrics``."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.support.ncu import NCU
from traceanalyzer.analysis.result_cache import analyze_path
from traceanalyzer.cli.main import cli
from traceanalyzer.ingest import read_any


def verdicts(trace: str, metrics: str | None = None) -> pl.DataFrame:
    done = analyze_path(NCU / trace, use_cache=False,
                        kernel_metrics=NCU / metrics if metrics else None)
    assert done.result.kernel_verdicts is not None
    return done.result.kernel_verdicts


def test_profiled_kernels_match_the_timeline_by_name_grid_and_block() -> None:
    v = verdicts("kernels_trace.json.gz", "kernels_b_raw.csv.gz")
    rows = {r["function"]: r for r in v.iter_rows(named=True)}
    # ncu writes "ta_tail_effect(float *, int)", torch.profiler "ta_tail_effect(float*, int)"
    assert rows["ta_tail_effect"]["timeline_name"] == "ta_tail_effect(float*, int)"
    assert rows["ta_tail_effect"]["timeline_ns"] == 2_887_792
    # the same kernel with one block less is the other profiled launch, matched on its own
    assert rows["ta_full_waves"]["timeline_ns"] == 1_928_661
    gemm = rows["nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"]
    assert gemm["timeline_launches"] == 1 and gemm["near_roofline"]
    assert gemm["verdict"] == "near its compute roofline (97%)" and gemm["findings"] == ""
    assert rows["ta_tail_effect"]["findings"] == "tail-effect, compute-bound-below-peak"


def test_impact_is_scaled_to_the_timeline() -> None:
    done = analyze_path(NCU / "kernels_trace.json.gz", use_cache=False,
                        kernel_metrics=NCU / "kernels_a_raw.csv.gz")
    (f,) = [f for f in done.result.findings if f.slug == "uncoalesced-memory-access"]
    # 87.5% of the strided copy's time, in the timeline (1.58 ms) not under ncu (2.09 ms)
    assert f.impact_ns == pytest.approx(0.875 * 1_579_608, rel=1e-3)


def test_a_grid_that_differs_is_not_matched(tmp_path: Path) -> None:
    trace = read_any(NCU / "kernels_trace.json.gz")
    gpu = trace.gpu.with_columns(grid_x=pl.when(pl.col("name").str.starts_with("ta_tail"))
                                 .then(pl.lit(999, pl.Int32)).otherwise("grid_x"))
    from traceanalyzer.analysis.ncu import judge_kernels
    from traceanalyzer.ingest.ncu import read_kernel_metrics

    km = read_kernel_metrics(NCU / "kernels_b_raw.csv.gz").metrics
    rows = {r["function"]: r for r in judge_kernels(km, gpu).iter_rows(named=True)}
    assert rows["ta_tail_effect"]["timeline_launches"] == 0
    assert rows["ta_full_waves"]["timeline_launches"] == 1


def test_a_details_page_claims_no_roofline() -> None:
    rows = {r["function"]: r for r in verdicts("kernels_b_details.csv.gz").iter_rows(named=True)}
    assert rows["ta_transpose_conflicts"]["bound"] is None
    assert "no roofline" in rows["ta_transpose_conflicts"]["verdict"]
    assert rows["nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"]["near_roofline"]
    assert "LaunchConfiguration 50%" in rows["ta_tail_effect"]["ncu_rules"]
    assert rows["ta_tail_effect"]["findings"] == "tail-effect"


def test_cli_kernel_metrics_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    html = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["analyze", str(NCU / "kernels_trace.json.gz"),
                                   "--kernel-metrics", str(NCU / "kernels_b_raw.csv.gz"),
                                   "--no-cache", "--json", str(out), "--html", str(html)])
    assert res.exit_code == 0, res.output
    assert "Nsight Compute: 5 profiled launches, 5 matched" in res.output
    import json

    doc = json.loads(out.read_text())
    assert [r["function"] for r in doc["kernel_metrics"]][:2] == ["ta_transpose_conflicts",
                                                                "ta_transpose_padded"]
    assert "kernel_metrics" not in doc["trace"]["extra"]  # the rows are the table, not meta
    text = html.read_text()
    assert "Nsight Compute: profiled kernels" in text
    assert "near its compute roofline (97%)" in text


def test_cli_bad_kernel_metrics_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from traceanalyzer.cli.main import main

    bad = tmp_path / "bad.csv"
    bad.write_text('"ID","Process ID"\n')
    with pytest.raises(SystemExit) as e:
        main(["analyze", str(NCU / "kernels_trace.json.gz"), "--kernel-metrics", str(bad),
              "--no-cache"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "bad.csv: is not an Nsight Compute CSV page" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_a_report_alone_is_a_per_kernel_report(tmp_path: Path) -> None:
    md = tmp_path / "r.md"
    res = CliRunner().invoke(cli, ["analyze", str(NCU / "kernels_a_raw.csv.gz"), "--no-cache",
                                   "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    assert "memory-bound at 5% of its roofline" in res.output
    assert "**Nsight Compute**" in md.read_text()


def test_the_result_cache_keeps_the_verdicts_and_keys_on_the_metrics(tmp_path: Path) -> None:
    first = analyze_path(NCU / "kernels_trace.json.gz", cache_dir=tmp_path,
                         kernel_metrics=NCU / "kernels_a_raw.csv.gz")
    again = analyze_path(NCU / "kernels_trace.json.gz", cache_dir=tmp_path,
                         kernel_metrics=NCU / "kernels_a_raw.csv.gz")
    assert again.cached and again.result.kernel_verdicts is not None
    assert again.result.kernel_verdicts.equals(first.result.kernel_verdicts)
    other = analyze_path(NCU / "kernels_trace.json.gz", cache_dir=tmp_path,
                         kernel_metrics=NCU / "kernels_b_raw.csv.gz")
    assert not other.cached and other.result.kernel_verdicts.height == 5
    plain = analyze_path(NCU / "kernels_trace.json.gz", cache_dir=tmp_path)
    assert plain.result.kernel_verdicts is None
