"""Parity with Nsight Systems: our kernel summary against ``nsys stats -r cuda_gpu_kern_sum``.

Two sources of truth:
- the CSV files that ``nsys stats --format csv`` wrote next to each H200 export under
  ``sample_traces/nsys`` (any ``*cuda_gpu_kern_sum*.csv`` whose path names the export's stem);
- on every export (public ones included), the report's own SQL, restated: kernels grouped by the
  text of ``demangledName`` (the report's default, "templated" name), count and sum(end-start).
Instances and total ns per kernel name must agree exactly.
"""

from __future__ import annotations

import io
import re
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from tests.support.paths import REPO
from traceanalyzer.analysis.kernels import kernel_summary
from traceanalyzer.ingest.nsys import read_nsys
from traceanalyzer.ingest.nsys.frames import API_VERSION_SUFFIX

PUBLIC_NSYS = REPO.parent / "shared" / "traces" / "public" / "nsys"
SAMPLE_NSYS = REPO / "sample_traces" / "nsys"

# What cuda_gpu_kern_sum computes (nsys's cuda_gpu_kern_sum.py over its kernel view), restated.
KERN_SUM_SQL = """
SELECT s.value AS name, count(*) AS instances, sum(k.end - k.start) AS total_ns
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.demangledName
GROUP BY s.value
"""


def sample_pairs(report: str = "cuda_gpu_kern_sum") -> list[tuple[Path, Path]]:
    """(export, CSV of ``report``) pairs; a CSV belongs to the export with the longest stem in
    its path."""
    if not SAMPLE_NSYS.is_dir():
        return []
    exports = sorted(SAMPLE_NSYS.rglob("*.sqlite"))
    pairs = []
    for csv in sorted(SAMPLE_NSYS.rglob(f"*{report}*.csv")):
        rel = str(csv.relative_to(SAMPLE_NSYS))
        owners = [e for e in exports if e.stem in rel]
        if owners:
            pairs.append((max(owners, key=lambda e: len(e.stem)), csv))
    return pairs


def all_exports() -> list[Path]:
    found = sorted(PUBLIC_NSYS.glob("*.sqlite")) if PUBLIC_NSYS.is_dir() else []
    return found + (sorted(SAMPLE_NSYS.rglob("*.sqlite")) if SAMPLE_NSYS.is_dir() else [])


def read_raw_csv(path: Path, *header_words: str) -> pl.DataFrame | None:
    """The table of an ``nsys stats``/``nsys analyze`` CSV, all columns as text.

    nsys may print lines before the header (or only a "no problems" message: then None).
    """
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines)
                  if all(w in line for w in header_words)), None)
    if start is None:
        return None
    return pl.read_csv(io.StringIO("\n".join(lines[start:])), infer_schema=False)


def _number(column: str) -> pl.Expr:
    return pl.col(column).str.replace_all(",", "").cast(pl.Float64).cast(pl.Int64)


def _column(raw: pl.DataFrame, prefix: str) -> str:
    return next(c for c in raw.columns if c.strip().startswith(prefix))


def read_stats_csv(path: Path) -> pl.DataFrame:
    """An ``nsys stats`` kernel summary CSV as (name, instances, total_ns), whatever the
    header's units say; numbers may carry thousands separators."""
    raw = read_raw_csv(path, "Instances", "Name")
    if raw is None:  # nsys writes an empty file when the export has no kernels
        return pl.DataFrame(schema={"name": pl.String, "instances": pl.Int64,
                                    "total_ns": pl.Int64})

    total = _column(raw, "Total Time")
    scale = 1_000 if "(us)" in total else 1_000_000 if "(ms)" in total else 1
    return (
        raw.select(name=pl.col(_column(raw, "Name")), instances=_number(_column(raw, "Instances")),
                   total_ns=_number(total) * scale)
        .group_by("name")
        .agg(pl.col("instances").sum(), pl.col("total_ns").sum())
    )


def nsys_view(gpu: pl.DataFrame) -> pl.DataFrame:
    """The GPU activities Nsight's reports see: without whole-graph executions (graph-level
    tracing), which nsys lists in no kernel summary or gap analysis and we keep as activities."""
    return gpu.filter(~pl.col("name").str.starts_with("[CUDA graph "))


def ours(export: Path) -> pl.DataFrame:
    gpu = read_nsys(export).gpu
    return kernel_summary(nsys_view(gpu)).select("name", "instances", "total_ns")


def as_dict(frame: pl.DataFrame) -> dict[str, tuple[int, int]]:
    return {name: (n, t) for name, n, t in frame.select("name", "instances", "total_ns").rows()}


@pytest.mark.slow
@pytest.mark.parametrize("export,csv", sample_pairs() or [pytest.param(None, None, marks=
                         pytest.mark.skip(reason="no H200 nsys samples with stats CSVs yet"))],
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_kernel_summary_matches_cuda_gpu_kern_sum(export, csv):
    theirs = as_dict(read_stats_csv(csv))
    mine = as_dict(ours(export))
    assert mine.keys() == theirs.keys()
    mismatched = {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
    assert not mismatched


@pytest.mark.slow
@pytest.mark.parametrize("export", all_exports(), ids=lambda p: p.name)
def test_kernel_summary_matches_kern_sum_sql(export):
    rows = _sql_rows(export, KERN_SUM_SQL)
    assert as_dict(ours(export)) == {name: (n, t) for name, n, t in rows}


def test_csv_reader_handles_nsys_layouts(tmp_path):
    csv = tmp_path / "run_cuda_gpu_kern_sum.csv"
    csv.write_text(
        "Processing [run.sqlite] with [cuda_gpu_kern_sum.py]... \n"
        '"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)",'
        '"StdDev (ns)","Name"\n'
        '60.0,"1,200",3,400.0,400.0,300,500,100.0,"void k<(int)4, float>(float *, int)"\n'
        "40.0,800,1,800.0,800.0,800,800,0.0,relu_kernel\n"
    )
    assert as_dict(read_stats_csv(csv)) == {
        "void k<(int)4, float>(float *, int)": (3, 1200), "relu_kernel": (1, 800)}


def test_parity_on_a_built_export_with_duplicate_name_ids(tmp_path):
    """Two StringIds ids with the same text are one kernel for nsys, and for us."""
    from tests.support.nsys_fixtures import NsysBuilder

    b = NsysBuilder()
    b.launch("void gemm<(int)128>(float *)", 0, 10, 100, 50)
    b.launch("void gemm<(int)128>(float *)", 20, 10, 200, 70)
    b.launch("relu", 40, 10, 300, 5)
    path = b.write(tmp_path / "dup.sqlite")
    con = sqlite3.connect(path)
    con.execute("INSERT INTO StringIds VALUES (9999, 'void gemm<(int)128>(float *)')")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 9999 WHERE start = 200")
    con.commit()
    rows = con.execute(KERN_SUM_SQL).fetchall()
    con.close()
    expected = {"void gemm<(int)128>(float *)": (2, 120), "relu": (1, 5)}
    assert {n: (i, t) for n, i, t in rows} == expected
    assert as_dict(ours(path)) == expected


# --- nsys analyze rules, at the level of our frames ------------------------------------------
# Each rule's rows are recomputed from our canonical frames and compared with (a) the rule's own
# SQL restated on every export and (b) the CSV `nsys analyze` wrote next to each H200 export.
# (Whether the project's rules then flag the same rows is tested with the rules.)

SYNC_APIS = ("cudaDeviceSynchronize", "cudaStreamSynchronize")
# nsys's cuda_api_sync.
API_SYNC_SQL = """
SELECT r.start, r.end - r.start, (r.globalTid >> 24) & 0xFFFFFF, r.globalTid & 0xFFFFFF
FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
WHERE s.value LIKE 'cudaDeviceSynchronize%' OR s.value LIKE 'cudaStreamSynchronize%'
"""
# nsys's cuda_memcpy_async, joined on the pid as well: nsys joins on correlationId alone, which
# can pair a copy with another process's call.
MEMCPY_ASYNC_SQL = """
SELECT DISTINCT m.start, m.end - m.start, m.deviceId, m.streamId
FROM CUPTI_ACTIVITY_KIND_MEMCPY m
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
    AND ((r.globalTid >> 24) & 0xFFFFFF) = ((m.globalPid >> 24) & 0xFFFFFF)
JOIN StringIds s ON s.id = r.nameId
WHERE (m.srcKind = 0 OR m.dstKind = 0) AND s.value LIKE 'cudaMemcpy%Async%'
"""
#: nsys analyze's default gpu_gaps threshold (gap=500 ms).
GPU_GAP_NS = 500_000_000
#: Rows nsys analyze prints by default; a CSV of exactly this many rows may be cut.
ROW_LIMIT = 50


def our_sync_calls(trace) -> set[tuple[int, ...]]:
    calls = trace.cpu.filter(pl.col("name").is_in(SYNC_APIS))
    return set(calls.select("start_ns", pl.col("end_ns") - pl.col("start_ns"), "pid", "tid").rows())


def our_pageable_async_copies(trace) -> set[tuple[int, ...]]:
    copies = trace.gpu.filter(
        pl.col("kind") == "memcpy",
        (pl.col("src_kind") == "pageable") | (pl.col("dst_kind") == "pageable"),
    )
    calls = trace.cpu.filter(pl.col("name").str.contains(r"^cudaMemcpy.*Async")).select(
        "rank", "correlation")
    rows = copies.join(calls, on=["rank", "correlation"], how="semi")
    return set(rows.select("start_ns", pl.col("end_ns") - pl.col("start_ns"), "device",
                           "stream").rows())


def our_gpu_gaps(trace, threshold_ns: int) -> set[tuple[int, ...]]:
    """GPU idle gaps per process and device, as gpu_gaps finds them: the j-th end (ordered by
    end) paired with the (j+1)-th start (ordered by start), kept when start > end + threshold."""
    pid_of_rank = {p["rank"]: p["pid"] for p in trace.meta.extra["nsys"]["processes"]}
    ops = nsys_view(trace.gpu).filter(pl.col("start_ns") > 0).select(
        "rank", "device", "start_ns", "end_ns")
    key = ["rank", "device"]
    starts = ops.select(*key, s="start_ns").sort(*key, "s").with_columns(
        i=pl.int_range(pl.len()).over(key))
    ends = ops.select(*key, e="end_ns").sort(*key, "e").with_columns(
        i=pl.int_range(1, pl.len() + 1).over(key))
    gaps = starts.join(ends, on=[*key, "i"]).filter(pl.col("s") - pl.col("e") > threshold_ns)
    return {(e, s - e, pid_of_rank.get(r, 0), d)
            for r, d, s, _, e in gaps.select(*key, "s", "i", "e").rows()}


def _sql_rows(export: Path, query: str) -> set[tuple[int, ...]]:
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        return set(con.execute(query).fetchall())
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # a table the run did not produce
            return set()
        raise
    finally:
        con.close()


GAPS_SQL = """
WITH ops AS ({ops}),
starts AS (SELECT ROW_NUMBER() OVER (ORDER BY pid, deviceId, start) AS n, start, pid, deviceId
           FROM ops),
ends AS (SELECT ROW_NUMBER() OVER (ORDER BY pid, deviceId, end) AS n, end, pid, deviceId FROM ops)
SELECT ends.end, starts.start - ends.end, ends.pid, ends.deviceId
FROM starts JOIN ends ON starts.n - 1 = ends.n AND starts.pid = ends.pid
    AND starts.deviceId = ends.deviceId
WHERE starts.start - ends.end > {threshold}
"""


def gaps_sql(export: Path, threshold_ns: int) -> str:
    """nsys's gpu_gaps query over the GPU tables this export has."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    if not tables & {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                     "CUPTI_ACTIVITY_KIND_MEMSET"}:
        return "SELECT 1 WHERE 0"
    ops = " UNION ALL ".join(
        f"SELECT start, end, (globalPid >> 24) & 0xFFFFFF AS pid, deviceId FROM {t} "
        "WHERE start > 0"
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET") if t in tables)
    return GAPS_SQL.format(ops=ops, threshold=threshold_ns)


@pytest.mark.slow
@pytest.mark.parametrize("export", all_exports(), ids=lambda p: p.name)
def test_analyze_rules_restated_on_our_frames(export):
    trace = read_nsys(export)
    assert our_sync_calls(trace) == _sql_rows(export, API_SYNC_SQL)
    assert our_pageable_async_copies(trace) == _sql_rows(export, MEMCPY_ASYNC_SQL)
    # The public windows are short: compare at 100 us as well as at nsys's default.
    for threshold in (100_000, GPU_GAP_NS):
        assert our_gpu_gaps(trace, threshold) == _sql_rows(
            export, gaps_sql(export, threshold)), threshold


def test_restated_rules_are_not_vacuous_on_the_public_exports():
    path = PUBLIC_NSYS / "nsysai_2gpu_sendrecv_before.sqlite"
    if not path.is_file():
        pytest.skip("public nsys traces not available")
    trace = read_nsys(path)
    assert len(our_sync_calls(trace)) == 33
    assert len(our_pageable_async_copies(trace)) >= 30
    assert len(our_gpu_gaps(trace, 100_000)) > 0


def _analyze_rows(csv: Path, columns: list[str]) -> list[tuple[int, ...]] | None:
    raw = read_raw_csv(csv, "Duration", "Start")
    if raw is None:
        return None  # "There were no problems detected ..."
    return raw.select(*(_number(_column(raw, c)) for c in columns)).rows()


def _compare_with_limit(ours: set, theirs: list[tuple[int, ...]], duration_at: int) -> None:
    if len(theirs) >= ROW_LIMIT:  # the CSV holds the longest ROW_LIMIT rows only
        assert set(theirs) <= ours
        cut = min(row[duration_at] for row in theirs)
        assert {r for r in ours if r[duration_at] > cut} <= set(theirs)
    else:
        assert ours == set(theirs)


def _pairs_or_skip(report: str):
    return sample_pairs(report) or [pytest.param(None, None, marks=pytest.mark.skip(
        reason=f"no H200 nsys samples with {report} CSVs yet"))]


@pytest.mark.slow
@pytest.mark.parametrize("export,csv", _pairs_or_skip("cuda_api_sync"),
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_sync_calls_match_cuda_api_sync(export, csv):
    theirs = _analyze_rows(csv, ["Start", "Duration", "PID", "TID"]) or []
    ours = {(s, d, p, t) for s, d, p, t in our_sync_calls(read_nsys(export))}
    _compare_with_limit(ours, theirs, duration_at=1)


@pytest.mark.slow
@pytest.mark.parametrize("export,csv", _pairs_or_skip("cuda_memcpy_async"),
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_pageable_copies_match_cuda_memcpy_async(export, csv):
    # Not compared: bytes, which nsys analyze prints in MB with three decimals.
    theirs = _analyze_rows(csv, ["Start", "Duration", "Device ID", "Stream ID"]) or []
    _compare_with_limit(our_pageable_async_copies(read_nsys(export)), theirs, duration_at=1)


@pytest.mark.slow
@pytest.mark.parametrize("export,csv", _pairs_or_skip("gpu_gaps"),
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_gpu_gaps_match_nsys_gpu_gaps(export, csv):
    theirs = _analyze_rows(csv, ["Start", "Duration", "PID", "Device ID"]) or []
    ours = our_gpu_gaps(read_nsys(export), GPU_GAP_NS)
    _compare_with_limit(ours, theirs, duration_at=1)


def test_analyze_csv_reader(tmp_path):
    csv = tmp_path / "x_cuda_api_sync.csv"
    csv.write_text('"Duration (ns)","Start (ns)","PID","TID","API Name"\n'
                   '"1,500",1000,7,8,cudaStreamSynchronize_v3020\n')
    assert _analyze_rows(csv, ["Start", "Duration", "PID", "TID"]) == [(1000, 1500, 7, 8)]
    empty = tmp_path / "y_cuda_api_sync.csv"
    empty.write_text("There were no problems detected related to synchronization APIs.\n")
    assert _analyze_rows(empty, ["Start"]) is None


# --- the other `nsys stats` summaries behind `traceanalyzer stats --report api|memops|nvtx` ----

#: nsys's memops operations, by our copy kind.
MEMOP_LABELS = {"memcpy HtoD": "[CUDA memcpy Host-to-Device]",
                "memcpy DtoH": "[CUDA memcpy Device-to-Host]",
                "memcpy DtoD": "[CUDA memcpy Device-to-Device]",
                "memcpy HtoH": "[CUDA memcpy Host-to-Host]",
                "memcpy PtoP": "[CUDA memcpy Peer-to-Peer]",
                "memset": "[CUDA memset]"}


def _summary_rows(csv: Path, key: str, count: str) -> dict[str, tuple[int, int]]:
    raw = read_raw_csv(csv, "Total Time", key)
    if raw is None:
        return {}
    frame = raw.select(k=pl.col(_column(raw, key)), n=_number(_column(raw, count)),
                       t=_number(_column(raw, "Total Time")))
    return {k: (n, t) for k, n, t in frame.group_by("k").agg(pl.col("n").sum(),
                                                            pl.col("t").sum()).rows()}


def _stats(export: Path, report: str) -> pl.DataFrame:
    from traceanalyzer.cli.stats import stats_frame

    return stats_frame(read_nsys(export), report)


@pytest.mark.slow
@pytest.mark.parametrize("export,csv", _pairs_or_skip("cuda_api_sum"),
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_api_summary_matches_cuda_api_sum(export, csv):
    """Per API: calls and total ns. nsys strips only 4-digit version suffixes
    (cudaStreamIsCapturing_v10000 stays); we strip 5-digit ones too, so theirs are normalized."""
    theirs: dict[str, tuple[int, int]] = {}
    for name, (n, t) in _summary_rows(csv, "Name", "Num Calls").items():
        key = re.sub(API_VERSION_SUFFIX, "", name)
        old = theirs.get(key, (0, 0))
        theirs[key] = (old[0] + n, old[1] + t)
    ours = {k: (n, t) for k, n, t in _stats(export, "api").select("name", "count", "total_ns").rows()}
    assert ours == theirs


@pytest.mark.slow
@pytest.mark.parametrize("export,csv", _pairs_or_skip("cuda_gpu_mem_time_sum"),
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_memops_summary_matches_cuda_gpu_mem_time_sum(export, csv):
    theirs = _summary_rows(csv, "Operation", "Count")
    ours = {MEMOP_LABELS[k]: (n, t) for k, n, t in
            _stats(export, "memops").select("operation", "count", "total_ns").rows()}
    assert ours == theirs


@pytest.mark.slow
@pytest.mark.parametrize("export,csv", _pairs_or_skip("nvtx_sum"),
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_nvtx_ranges_match_nvtx_sum(export, csv):
    """nvtx_sum names a range "<domain>:<text>" (":<text>" in the default domain)."""
    theirs = _summary_rows(csv, "Range", "Instances")
    ann = read_nsys(export).annotations.filter(pl.col("end_ns") > pl.col("start_ns"))
    ours = {k: (n, t) for k, n, t in ann.group_by(
        pl.format("{}:{}", pl.col("domain").fill_null(""), pl.col("name")).alias("k")
    ).agg(pl.len(), (pl.col("end_ns") - pl.col("start_ns")).sum()).rows()}
    assert ours == theirs
