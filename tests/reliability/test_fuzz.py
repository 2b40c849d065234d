"""Property tests over generated Chrome traces and nsys SQLite exports (Hypothesis).

The strategies and properties live in tests/reliability/fuzz/props.py, shared with the long
fuzzing sessions run outside CI (``python tests/reliability/fuzz/fuzz_ingest.py --minutes 10``).
Each test here is kept to a few seconds to ~20 s.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.reliability.fuzz.props import check_file, chrome_trace_bytes, nsys_db
from tests.support.nsys_fixtures import NsysBuilder
from traceanalyzer.ingest import load

# No shrinking: a failing case is reported as generated (shrinking SQLite files takes minutes).
FUZZ = settings(deadline=None, database=None, derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(FUZZ, max_examples=60)
@given(chrome_trace_bytes())
def test_generated_chrome_traces(case: tuple[bytes, str]) -> None:
    data, name = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        check_file(path)


@settings(FUZZ, max_examples=30)
@given(st.data())
def test_generated_nsys_exports(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = data.draw(nsys_db(Path(tmp) / "export.sqlite"))
        check_file(path)


# Regressions found by the fuzzing sessions (SQLite files are generated: too big for the corpus
# folder, tests/reliability/corpus).


def test_nsys_value_of_wrong_sqlite_type(tmp_path: Path) -> None:
    """A blob and text in INTEGER columns of a CUPTI table (a corrupt export) become null."""
    path = NsysBuilderFixture.export(tmp_path)
    con = sqlite3.connect(path)
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId,"
                " correlationId, demangledName, shortName, registersPerThread, gridX, gridY, gridZ,"
                " blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory) VALUES "
                "(?, ?, ?, 1, 7, ?, 1000, 1000, 32, 1, 1, 1, 1, 1, 1, 0, 0)",
                (b"\x8d\xa7", "soon", 1e300, b""))
    con.commit()
    con.close()
    assert check_file(path) == "analyzed"
    trace = load(path, use_cache=False)  # the row whose start is a blob has no time: dropped
    assert trace.gpu.height == 2
    assert any("start or end time is missing" in w for w in trace.meta.warnings)


def test_nsys_records_ending_before_they_start(tmp_path: Path) -> None:
    b = NsysBuilder()
    b.launch("gemm", 1000, 500, 2000, -300)  # kernel end < start
    b.nvtx("step", 5000, 4000)  # NVTX range end < start
    path = b.write(tmp_path / "backwards.sqlite")
    trace = load(path, use_cache=False)
    assert check_file(path) == "analyzed"
    assert (trace.gpu["end_ns"] >= trace.gpu["start_ns"]).all()
    assert any("end before they start" in w for w in trace.meta.warnings)


class NsysBuilderFixture:
    @staticmethod
    def export(tmp: Path) -> Path:
        b = NsysBuilder()
        b.launch("gemm", 1000, 500, 2000, 3000)
        b.launch("relu", 1600, 500, 6000, 1000)
        return b.write(tmp / "export.sqlite")


def test_chrome_lone_surrogates_become_replacement_characters(tmp_path: Path) -> None:
    """JSON's "\\udbd4" with no low surrogate after it: the C decoder and Polars' reader both
    refuse it, and the per-line pass wrote it back escaped, which Polars refused again (a
    traceback, found by the fuzz test in a different test order)."""
    path = tmp_path / "surrogates.json"
    path.write_text('{"traceEvents": [\n'
                    '{"ph": "X", "cat": "kernel", "name": "k\\udbd4\\uBe99\\ud8db\\udfc1", '
                    '"pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"correlation": 1}}\n]}')
    assert check_file(path) == "analyzed"
    paired = json.loads('"\\ud8db\\udfc1"')  # a valid pair: one character, kept
    assert load(path, use_cache=False).gpu["name"].to_list() == [f"k\ufffd\ube99{paired}"]


def test_nsys_kernel_starting_at_int64_min(tmp_path: Path) -> None:
    """Found by fuzz_ingest (hostile values): a start of -2^63 got past the time limit, since
    abs(INT64_MIN) wraps to itself; the span was 2^63 + 62,575 ns and busy negative."""
    path = NsysBuilderFixture.export(tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ? WHERE rowid = 1", (-(2**63),))
    con.commit()
    con.close()
    assert check_file(path) == "analyzed"
    trace = load(path, use_cache=False)
    assert trace.gpu.height == 1
    assert any("start or end time is missing or beyond" in w for w in trace.meta.warnings)
