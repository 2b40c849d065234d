"""Hostile values (issue 30, classes 5 and 7): values a trace may hold that once gave internal
errors (exit 3) or silent nonsense, each through the real command line (a child process).

Every case must end as docs/reliability.md promises: analyzed (exit 0) with the warning that
says what was dropped or doubtful, in the terminal, the JSON and the HTML report; or a one-line
error with exit code 2. Never exit 3, never a span beyond int64.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability.test_corpus import (
    CORPUS,
    GOOD,
    assert_analyzed,
    assert_rejected,
    run_cli,
    write_json,
)
from tests.support.nsys_fixtures import NsysBuilder
from tests.support.paths import REPO

INT64_MAX = 2**63 - 1
UNTIMED = "without a usable timestamp"
UNUSABLE_DUR = "not a usable number"
DROPPED = "records whose start or end time is missing or beyond"

# Corpus files of these classes -> (warning, kernels left).
CORPUS_CASES = {
    "kineto_ts_beyond_int64_ns.json": (UNTIMED, 2),
    "kineto_ts_wraps_into_range.json": (UNTIMED, 2),
    "kineto_end_beyond_limit.json": (UNTIMED, 2),
    "kineto_dur_1e308.json": (UNUSABLE_DUR, 3),
    "kineto_dur_nan_infinity.json": (UNUSABLE_DUR, 2),
    "kineto_mixed_us_ns.json": ("implausible for one trace", 3),
    "kineto_surrogate_device.json": (None, 2),
    "kineto_surrogate_metadata.json": (None, 2),
}


def _span_within_int64(report: dict) -> None:
    m = report["metrics"]
    assert 0 <= m["span_ns"] <= INT64_MAX and 0 <= m["busy_ns"] <= m["span_ns"]


@pytest.mark.parametrize("name", sorted(CORPUS_CASES))
def test_hostile_kineto_values(name: str, tmp_path: Path) -> None:
    warning, kernels = CORPUS_CASES[name]
    out = run_cli(CORPUS / name, tmp_path / "out")
    assert_analyzed(out, warning)
    _span_within_int64(out.report)
    assert out.report["metrics"]["kernel_count"] == kernels
    if "surrogate" in name:  # valid UTF-8 everywhere, the lone surrogate as U+FFFD
        assert out.json_path.read_bytes().decode("utf-8")
        assert "\ufffd" in json.dumps(out.report["trace"], ensure_ascii=False)


def test_mixed_units_warning_says_what_was_analyzed(tmp_path: Path) -> None:
    out = run_cli(CORPUS / "kineto_mixed_us_ns.json", tmp_path / "out")
    (warning,) = [w for w in out.warnings if "implausible" in w]
    assert "53.9 years" in warning and "all of it was analyzed" in warning
    assert "--time-window" in warning


# ---------------------------------------------------------------------------------------------
# Nsight Systems exports holding what nsys never writes

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _export(tmp: Path, *sql: str, params: tuple = (), loose: bool = False) -> Path:
    b = NsysBuilder()
    b.launch("gemm", 1000, 500, 2000, 3000)
    b.launch("relu", 1600, 500, 6000, 1000)
    path = b.write(tmp / "export.sqlite")
    con = sqlite3.connect(path)
    if loose:  # the kernel table without NOT NULL, as a forged file may have it
        con.execute(f"CREATE TABLE k2 AS SELECT * FROM {KERNEL}")
        con.execute(f"DROP TABLE {KERNEL}")
        con.execute(f"ALTER TABLE k2 RENAME TO {KERNEL}")
    for i, statement in enumerate(sql):
        con.execute(statement, params if i == len(sql) - 1 else ())
    con.commit()
    con.close()
    return path


TGI = (
    "CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER, "
    "totalMemory INTEGER, computeMajor INTEGER, computeMinor INTEGER)"
)
ENV = (
    "CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, "
    "nameEnum INTEGER, value TEXT)"
)
ENV_ROW = "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'x', 'DeviceEnvironment', 0, ?)"
SESSION = "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT)"

# name -> (make(tmp), warning or None, kernels left)
NSYS_CASES: dict[str, tuple[Callable[[Path], Path], str | None, int]] = {
    "null_kernel_start": (
        lambda t: _export(t, f"UPDATE {KERNEL} SET start = NULL WHERE rowid = 1", loose=True),
        DROPPED,
        1,
    ),
    "null_kernel_end": (
        lambda t: _export(t, f"UPDATE {KERNEL} SET end = NULL WHERE rowid = 1", loose=True),
        DROPPED,
        1,
    ),
    "time_near_int64_max": (
        lambda t: _export(
            t,
            f"UPDATE {KERNEL} SET start = 9223372036854775000, end = 9223372036854775807 "
            "WHERE rowid = 1",
        ),
        DROPPED,
        1,
    ),
    "time_near_int64_min": (
        lambda t: _export(t, f"UPDATE {KERNEL} SET start = -9223372036854775000 WHERE rowid = 1"),
        DROPPED,
        1,
    ),
    "duplicate_string_ids": (
        lambda t: _export(
            t,
            "CREATE TABLE s2 AS SELECT * FROM StringIds",
            "INSERT INTO s2 SELECT id, value || '_dup' FROM StringIds",
            "DROP TABLE StringIds",
            "ALTER TABLE s2 RENAME TO StringIds",
        ),
        "duplicate or null ids",
        2,
    ),
    "device_id_beyond_int32": (
        lambda t: _export(
            t, f"UPDATE {KERNEL} SET deviceId = 4294967296, gridX = 9999999999 WHERE rowid = 1"
        ),
        "read 2 device ids, grid or block sizes or register counts beyond int32 as missing",
        2,
    ),
    "ids_beyond_int64": (
        lambda t: _export(
            t,
            f"UPDATE {KERNEL} SET correlationId = 1e20, streamId = 'seven', "
            "demangledName = x'00' WHERE rowid = 1",
        ),
        "read 3 ids that are not integers within int64",
        2,
    ),
    "text_in_target_info_gpu": (
        lambda t: _export(
            t,
            TGI,
            "INSERT INTO TARGET_INFO_GPU VALUES ('zero', 'H200', 'many', 'lots', 'nine', 'x')",
        ),
        None,
        2,
    ),
    "numbers_beyond_range_in_target_info_gpu": (
        lambda t: _export(
            t, TGI, "INSERT INTO TARGET_INFO_GPU VALUES (0, x'ff00', 1e300, -5, 99999999999, 0)"
        ),
        None,
        2,
    ),
    "utc_epoch_yesterday": (
        lambda t: _export(
            t, SESSION, "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES ('yesterday', 'x')"
        ),
        None,
        2,
    ),
    "rank_of_5000_digits": (
        lambda t: _export(
            t, ENV, ENV_ROW, params=("RANK=" + "1" * 5000 + ";WORLD_SIZE=" + "9" * 5001,)
        ),
        None,
        2,
    ),
    "rank_beyond_int32": (
        lambda t: _export(t, ENV, ENV_ROW, params=("RANK=3000000000;WORLD_SIZE=4000000000",)),
        None,
        2,
    ),
}


@pytest.mark.parametrize("name", sorted(NSYS_CASES))
def test_hostile_nsys_values(name: str, tmp_path: Path) -> None:
    make, warning, kernels = NSYS_CASES[name]
    out = run_cli(make(tmp_path), tmp_path / "out")
    assert_analyzed(out, warning)
    _span_within_int64(out.report)
    assert out.report["metrics"]["kernel_count"] == kernels
    trace = out.report["trace"]
    assert all(-(2**31) <= d["id"] < 2**31 for d in trace["devices"])
    assert all(d["sm_count"] is None or isinstance(d["sm_count"], int) for d in trace["devices"])
    assert trace["time_base_ns"] is None or isinstance(trace["time_base_ns"], int)
    assert 0 <= trace["rank"] < 2**31


def test_nsys_null_times_then_annotate(tmp_path: Path) -> None:
    """NULL kernel times were kept without a warning, and --annotate then failed."""
    path = NSYS_CASES["null_kernel_start"][0](tmp_path)
    annotated = tmp_path / "annotated.pftrace"
    out = run_cli(path, tmp_path / "out", "--annotate", str(annotated))
    assert_analyzed(out, DROPPED)
    assert annotated.is_file()


def test_nsys_kernel_table_that_is_a_recursive_view(tmp_path: Path) -> None:
    """A view never ends (4.75 GB and growing): refused before any row is read."""
    cols = (
        "start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, "
        "shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
        "staticSharedMemory, dynamicSharedMemory"
    )
    path = _export(
        tmp_path,
        f"DROP TABLE {KERNEL}",
        f"CREATE VIEW {KERNEL} AS WITH RECURSIVE r({cols}) AS (SELECT 1, 2, 0, 1, 7, "
        "1, 0, 1000, 1000, 1, 1, 1, 1, 1, 1, 1, 0, 0 UNION ALL SELECT start + 1, "
        "end + 1, 0, 1, 7, 1, 0, 1000, 1000, 1, 1, 1, 1, 1, 1, 1, 0, 0 FROM r) "
        "SELECT * FROM r",
    )
    assert_rejected(run_cli(path, tmp_path / "out"), path, "is a view")


# ---------------------------------------------------------------------------------------------
# Options with hostile numbers: usage errors (exit 2), never internal errors

NINES = "9" * 400


@pytest.mark.parametrize(
    "option",
    [
        ["--top", str(10**30)],
        ["--top", "-5"],
        ["--time-window", f"0:{NINES}"],
        ["--time-window", f"0:{NINES}s"],
        ["--steps", NINES],
        ["--steps", f"1-{NINES}"],
        ["--steps", "99999999999999999999"],
        ["--ranks", NINES],
        ["--ranks", "3000000000"],
        ["--ranks", "9" * 5000],
    ],
    ids=lambda o: f"{o[0]}={o[1][:12]}",
)
def test_hostile_option_values(option: list[str], tmp_path: Path) -> None:
    trace = write_json(tmp_path / "t.json", GOOD)
    out = run_cli(trace, tmp_path / "out", *option)
    assert out.code == 2, (out.code, out.stderr)
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr
    assert max(len(line) for line in out.stderr.splitlines()) < 500, out.stderr
    assert not out.json_path.exists()


@pytest.mark.parametrize("where", ["missing_folder", "long_name"])
def test_annotate_path_that_cannot_be(where: str, tmp_path: Path) -> None:
    trace = write_json(tmp_path / "t.json", GOOD)
    target = (
        tmp_path / "no" / "such" / "a.json"
        if where == "missing_folder"
        else tmp_path / ("a" * 250 + ".json")
    )
    out = run_cli(trace, tmp_path / "out", "--annotate", str(target))
    assert out.code == 2, (out.code, out.stderr)
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: ") and "Traceback" not in out.stderr
    assert not target.exists()


# ---------------------------------------------------------------------------------------------
# The ingest cache


@pytest.mark.parametrize(
    "meta",
    [
        "[]",
        '{"devices": 5}',
        '{"path": 1}',
        "null",
        '"x"',
        '{"devices": [{"nope": 1}]}',
        "{",
        '{"warnings": 3}',
        '{"devices": [{"id": "G\\ud800"}], "extra": []}',
    ],
)
def test_a_damaged_cached_meta_json_is_rebuilt(meta: str, tmp_path: Path) -> None:
    """A meta.json that parses as something else was fatal on every later run."""
    from traceanalyzer.ingest.cache import cached_read

    trace = write_json(tmp_path / "t.json", GOOD)
    cache = tmp_path / "cache"
    assert cached_read(trace, "kineto", cache_dir=cache).gpu.height == 2
    (entry,) = cache.glob("*/meta.json")
    entry.write_text(meta)
    for _ in range(2):  # rebuilt, then read from the rebuilt entry
        again = cached_read(trace, "kineto", cache_dir=cache)
        assert again.gpu.height == 2 and again.meta.devices[0].name == "GPU"
    assert isinstance(json.loads(entry.read_text()), dict)


def test_a_damaged_cached_meta_json_through_the_cli(tmp_path: Path) -> None:
    trace = write_json(tmp_path / "t.json", GOOD)
    cache = tmp_path / "cache"

    def analyze() -> subprocess.CompletedProcess:
        for results in cache.glob("results"):  # the result cache would answer first
            shutil.rmtree(results)
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "traceanalyzer",
                "analyze",
                str(trace),
                "--json",
                str(tmp_path / "r.json"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env={**os.environ, "TRACEANALYZER_DEBUG": "", "TRACEANALYZER_CACHE_DIR": str(cache)},
        )

    assert analyze().returncode == 0
    (entry,) = cache.glob("*/meta.json")
    entry.write_text('{"devices": 5}')
    for _ in range(2):
        proc = analyze()
        assert proc.returncode == 0, proc.stderr
        assert json.loads((tmp_path / "r.json").read_text())["metrics"]["kernel_count"] == 2


@pytest.mark.parametrize("limit", [str(10**30), "-3"])
def test_stats_limit_beyond_range_is_clamped(limit: str, tmp_path: Path) -> None:
    trace = write_json(tmp_path / "t.json", GOOD)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceanalyzer",
            "stats",
            str(trace),
            "--no-cache",
            "--limit",
            limit,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "TRACEANALYZER_DEBUG": ""},
    )
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
