"""The Nsight Compute reader: raw and details pages, reports through a fake ncu, bad input."""

from __future__ import annotations

import gzip
import os
import stat
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer.errors import InputError
from traceanalyzer.ingest import load, sniff
from traceanalyzer.ingest.ncu import read_kernel_metrics
from traceanalyzer.ingest.ncu.csvpage import function_name
from traceanalyzer.ingest.ncu.metrics import METRICS, unit_factor
from traceanalyzer.model import KERNEL_METRICS_SCHEMA, kernel_metrics_frame

NCU = Path(__file__).resolve().parents[3] / "sample_traces" / "ncu"


def by_function(frame: pl.DataFrame) -> dict[str, dict]:
    return {r["function"]: r for r in frame.iter_rows(named=True)}


def test_raw_page_a_has_the_readme_figures() -> None:
    report = read_kernel_metrics(NCU / "kernels_a_raw.csv.gz")
    m = report.metrics
    assert m.schema == KERNEL_METRICS_SCHEMA and report.source == "raw"
    k = by_function(m)
    assert list(k) == ["ta_copy_coalesced", "ta_copy_strided", "ta_regs_heavy", "ta_regs_light"]
    # gpu__time_duration.sum is written in ms: 0.211392 ms
    assert k["ta_copy_coalesced"]["duration_ns"] == 211_392
    assert k["ta_copy_strided"]["duration_ns"] == 2_086_368
    assert k["ta_copy_coalesced"]["global_load_sectors"] == 8_388_608
    assert k["ta_copy_strided"]["global_load_sectors"] == 67_108_864
    assert k["ta_copy_strided"]["global_load_sectors_per_request"] == 32.0
    assert k["ta_copy_strided"]["global_load_efficiency_pct"] == 12.5
    assert (k["ta_regs_heavy"]["registers"], k["ta_regs_light"]["registers"]) == (78, 24)
    assert k["ta_regs_heavy"]["occupancy_limiter"] == "registers"
    assert k["ta_regs_heavy"]["achieved_occupancy_pct"] == pytest.approx(36.615478)
    assert k["ta_regs_heavy"]["theoretical_occupancy_pct"] == 37.5
    # dram__bytes_read.sum is written in Mbyte: 268.444416 Mbyte
    assert k["ta_copy_coalesced"]["dram_bytes_read"] == 268_444_416
    # 1.504 Kbyte/cycle x 3.2 GHz
    assert k["ta_copy_coalesced"]["dram_peak_bytes_per_s"] == pytest.approx(4.811e12, rel=1e-3)
    assert k["ta_copy_coalesced"]["sm_clock_hz"] == pytest.approx(1.5e9, rel=1e-2)
    assert (k["ta_copy_coalesced"]["grid_x"], k["ta_copy_coalesced"]["block_x"]) == (262144, 256)
    assert report.devices == {0: "NVIDIA H200"}


def test_raw_page_b_flops_conflicts_and_waves() -> None:
    k = by_function(read_kernel_metrics(NCU / "kernels_b_raw.csv.gz").metrics)
    assert k["ta_transpose_conflicts"]["shared_load_bank_conflicts"] == 65_948_470
    assert k["ta_transpose_padded"]["shared_load_bank_conflicts"] == 287_364
    assert (k["ta_tail_effect"]["grid_x"], k["ta_full_waves"]["grid_x"]) == (265, 264)
    gemm = k["nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"]
    assert gemm["tensor_flop_per_s"] == pytest.approx(672.887e12, rel=1e-5)
    assert gemm["tensor_pipe_pct"] == pytest.approx(96.998364)
    # 265 x 1024 threads x 200000 FMAs x 2 FLOP in 3.81 ms: 28.5 TFLOP/s
    assert k["ta_tail_effect"]["flop_per_s"] == pytest.approx(28.5e12, rel=0.01)
    assert k["ta_tail_effect"]["fp32_pipe_pct"] == pytest.approx(56.18, abs=0.01)


def test_details_page_agrees_with_the_raw_page() -> None:
    raw = by_function(read_kernel_metrics(NCU / "kernels_a_raw.csv.gz").metrics)
    report = read_kernel_metrics(NCU / "kernels_a_details.csv.gz")
    assert report.source == "details"
    details = by_function(report.metrics)
    for fn, row in details.items():
        # the details page rounds to 3-4 digits ("211.39 us", "2.09 ms")
        assert row["duration_ns"] == pytest.approx(raw[fn]["duration_ns"], rel=2e-3)
        assert row["achieved_occupancy_pct"] == pytest.approx(
            raw[fn]["achieved_occupancy_pct"], abs=0.01
        )
        assert row["registers"] == raw[fn]["registers"]
        assert row["occupancy_limiter"] == raw[fn]["occupancy_limiter"]
        # the SOL "Memory Throughput" is the %, not the later "Memory Throughput" in Tbyte/s
        assert row["memory_throughput_pct"] == pytest.approx(
            raw[fn]["memory_throughput_pct"], abs=0.01
        )
    assert {"SOLBottleneck", "TheoreticalOccupancy", "UncoalescedGlobalAccess"} <= set(
        report.rules["rule"]
    )


def test_units_are_converted() -> None:
    assert unit_factor("ms", "ns") == 1e6 and unit_factor("usecond", "ns") == 1e3
    assert unit_factor("Mbyte", "byte") == 1e6 and unit_factor("Kbyte/block", "byte") == 1e3
    assert unit_factor("KiByte", "byte") == 1024 and unit_factor("Ghz", "hz") == 1e9
    assert unit_factor("Gbyte/s", "byte/s") == 1e9
    assert unit_factor("cycle", "ns") is None and unit_factor("%", "byte") is None


def test_units_row_drives_the_conversion(tmp_path: Path) -> None:
    page = NCU / "kernels_a_raw.csv.gz"
    text = gzip.decompress(page.read_bytes()).decode()
    header, units, *rows = text.splitlines()
    cols = header.split('","')
    i = next(n for n, c in enumerate(cols) if c.strip('"') == "gpu__time_duration.sum")
    unit_cells = units.split('","')
    assert unit_cells[i] == "ms"
    unit_cells[i] = "us"
    row = rows[0].split('","')
    row[i] = "211.392"
    out = tmp_path / "raw.csv"
    out.write_text("\n".join([header, '","'.join(unit_cells), '","'.join(row)]) + "\n")
    m = read_kernel_metrics(out).metrics
    assert m["duration_ns"].to_list() == [211_392]


def test_a_report_goes_through_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "ncu"
    raw, details = NCU / "kernels_a_raw.csv.gz", NCU / "kernels_a_details.csv.gz"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$2" in *.ncu-rep) ;; *) echo not a report >&2; exit 3;; esac\n'
        'head -c 4 "$2" | grep -q NVR || exit 4\n'
        f'if [ "$5" = raw ]; then gzip -dc {raw}; else gzip -dc {details}; fi\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("TRACEANALYZER_NCU", str(fake))
    report = read_kernel_metrics(NCU / "kernels_a.ncu-rep.gz")
    assert report.source == "ncu-rep" and report.metrics.height == 4
    assert not report.rules.is_empty()
    trace = load(NCU / "kernels_a.ncu-rep.gz", use_cache=False)
    assert trace.gpu.height == 4 and trace.meta.source_format == "ncu"
    assert kernel_metrics_frame(trace.meta)["duration_ns"].sum() == trace.gpu["end_ns"].max()


def test_without_ncu_a_report_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEANALYZER_NCU", str(tmp_path / "missing-ncu"))
    with pytest.raises(
        InputError, match="is an Nsight Compute report and .* not an executable"
    ) as e:
        read_kernel_metrics(NCU / "kernels_b.ncu-rep.gz")
    assert "\n" not in str(e.value) and e.value.exit_code == 2


def test_ncu_that_fails_or_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho '==ERROR== cannot open report' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("TRACEANALYZER_NCU", str(fake))
    with pytest.raises(InputError, match="failed: ==ERROR== cannot open report"):
        read_kernel_metrics(NCU / "kernels_b.ncu-rep.gz")
    fake.write_text("#!/bin/sh\nsleep 5\n")
    monkeypatch.setenv("TRACEANALYZER_NCU_TIMEOUT", "0.2")
    with pytest.raises(InputError, match="did not finish in 0 s"):
        read_kernel_metrics(NCU / "kernels_b.ncu-rep.gz")


def test_sniffed_by_content(tmp_path: Path) -> None:
    assert sniff(NCU / "kernels_a_raw.csv.gz") == "ncu-csv"
    odd = tmp_path / "page.txt"
    odd.write_bytes(gzip.decompress((NCU / "kernels_b_details.csv.gz").read_bytes()))
    assert sniff(odd) == "ncu-csv"
    rep = tmp_path / "renamed.bin"
    rep.write_bytes(b"NVR\x00" + b"\x00" * 60)
    assert sniff(rep) == "ncu-rep"
    rep_gz = tmp_path / "renamed.gz"
    rep_gz.write_bytes(gzip.compress(b"NVR\x00" + b"\x00" * 60))
    assert sniff(rep_gz) == "ncu-rep-gz"


@pytest.mark.parametrize(
    "text, match",
    [
        ('"ID","Process ID"\n"0","1"\n', "no column 'Process Name'|no column"),
        (
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","x"\n"","","","","","","","","","","",""\n'
            '"0","1","p","h","k","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","1"\n',
            "no gpu__time_duration.sum",
        ),
        (
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum"\n'
            '"","","","","","","","","","","","ms"\n"0","1","p","h","k","1"\n',
            "a cut or damaged",
        ),
        ("==PROF== nothing here\n", "no header row"),
        (
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum"\n'
            '"","","","","","","","","","","","ms"\n',
            "without any profiled launch",
        ),
    ],
)
def test_malformed_pages(tmp_path: Path, text: str, match: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    with pytest.raises(InputError, match=match) as e:
        read_kernel_metrics(bad)
    assert "\n" not in str(e.value)


def test_odd_values_are_null_not_errors(tmp_path: Path) -> None:
    bad = tmp_path / "odd.csv"
    bad.write_text(
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum",'
        '"launch__registers_per_thread","dram__bytes_read.sum"\n'
        '"","","","","","","","","","","","ms","register/thread","parsec"\n'
        '"0","1","p","h","_Z3fooPf","1","7","(32, 1, 1)","(x, 1)","0","9.0","n/a",'
        '"1e300","12"\n'
    )
    row = read_kernel_metrics(bad).metrics.row(0, named=True)
    assert row["name"] == "foo(float*)" and row["function"] == "foo"
    assert row["duration_ns"] is None and row["registers"] is None
    assert row["dram_bytes_read"] is None  # a unit that is not bytes is not guessed at
    assert row["grid_x"] is None and row["block_x"] == 32


def test_function_name() -> None:
    assert function_name("ta_copy_strided(const float *, float *, long)") == "ta_copy_strided"
    assert (
        function_name("void at::native::f<float, (int)4>(float*, int)")
        == "at::native::f<float, (int)4>"
    )
    assert function_name("nvjet_sm90_tst_320x128") == "nvjet_sm90_tst_320x128"


def test_every_metric_column_is_in_the_schema_or_a_helper() -> None:
    helpers = {m.column for m in METRICS if m.column not in KERNEL_METRICS_SCHEMA}
    assert all(h.endswith(("_per_cycle", "_clock_hz", "_bytes_per_sector")) for h in helpers), (
        helpers
    )
    assert os.path.isfile(NCU / "kernels_a.ncu-rep.gz")


def test_a_page_too_large_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceanalyzer.ingest.ncu import csvpage

    monkeypatch.setattr(csvpage, "MAX_PAGE_BYTES", 1000)
    with pytest.raises(InputError, match="is larger than 0 MB"):
        read_kernel_metrics(NCU / "kernels_a_raw.csv.gz")
