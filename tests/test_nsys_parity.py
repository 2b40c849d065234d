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
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer.analysis.kernels import kernel_summary
from traceanalyzer.ingest.nsys import read_nsys

REPO = Path(__file__).resolve().parents[1]
PUBLIC_NSYS = REPO.parent / "shared" / "traces" / "public" / "nsys"
SAMPLE_NSYS = REPO / "sample_traces" / "nsys"

# What cuda_gpu_kern_sum computes (nsys's cuda_gpu_kern_sum.py over its kernel view), restated.
KERN_SUM_SQL = """
SELECT s.value AS name, count(*) AS instances, sum(k.end - k.start) AS total_ns
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.demangledName
GROUP BY s.value
"""


def sample_pairs() -> list[tuple[Path, Path]]:
    """(export, kern_sum CSV) pairs; a CSV belongs to the export with the longest stem in its path."""
    if not SAMPLE_NSYS.is_dir():
        return []
    exports = sorted(SAMPLE_NSYS.rglob("*.sqlite"))
    pairs = []
    for csv in sorted(SAMPLE_NSYS.rglob("*cuda_gpu_kern_sum*.csv")):
        rel = str(csv.relative_to(SAMPLE_NSYS))
        owners = [e for e in exports if e.stem in rel]
        if owners:
            pairs.append((max(owners, key=lambda e: len(e.stem)), csv))
    return pairs


def all_exports() -> list[Path]:
    found = sorted(PUBLIC_NSYS.glob("*.sqlite")) if PUBLIC_NSYS.is_dir() else []
    return found + (sorted(SAMPLE_NSYS.rglob("*.sqlite")) if SAMPLE_NSYS.is_dir() else [])


def read_stats_csv(path: Path) -> pl.DataFrame:
    """An ``nsys stats`` CSV as (name, instances, total_ns), whatever the header's units say.

    nsys may print lines before the header; numbers may carry thousands separators.
    """
    lines = path.read_text(errors="replace").splitlines()
    start = next(i for i, line in enumerate(lines) if "Instances" in line and "Name" in line)
    raw = pl.read_csv(io.StringIO("\n".join(lines[start:])), infer_schema=False)

    def col(prefix: str) -> str:
        return next(c for c in raw.columns if c.strip().startswith(prefix))

    number = lambda c: pl.col(c).str.replace_all(",", "").cast(pl.Float64).cast(pl.Int64)  # noqa: E731
    total = col("Total Time")
    scale = 1_000 if "(us)" in total else 1_000_000 if "(ms)" in total else 1
    return (
        raw.select(name=pl.col(col("Name")), instances=number(col("Instances")),
                   total_ns=number(total) * scale)
        .group_by("name")
        .agg(pl.col("instances").sum(), pl.col("total_ns").sum())
    )


def ours(export: Path) -> pl.DataFrame:
    return kernel_summary(read_nsys(export).gpu).select("name", "instances", "total_ns")


def as_dict(frame: pl.DataFrame) -> dict[str, tuple[int, int]]:
    return {name: (n, t) for name, n, t in frame.select("name", "instances", "total_ns").rows()}


@pytest.mark.slow
@pytest.mark.parametrize("export,csv", sample_pairs() or [pytest.param(None, None, marks=
                         pytest.mark.skip(reason="no H200 nsys samples with stats CSVs yet"))],
                         ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_kernel_summary_matches_cuda_gpu_kern_sum(export, csv):
    theirs = as_dict(read_stats_csv(csv))
    mine = as_dict(ours(export))
    assert theirs, f"{csv} has no kernel rows"
    assert mine.keys() == theirs.keys()
    mismatched = {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
    assert not mismatched


@pytest.mark.slow
@pytest.mark.parametrize("export", all_exports(), ids=lambda p: p.name)
def test_kernel_summary_matches_kern_sum_sql(export):
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        rows = con.execute(KERN_SUM_SQL).fetchall()
    finally:
        con.close()
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
    from nsys_fixtures import NsysBuilder

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
