"""Batch performance plumbing: CPUs counted as the process may use them, Polars threads shared
among workers, and report keys that change when the code does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from traceanalyzer import cpus
from traceanalyzer.analysis import result_cache
from traceanalyzer.batch import pool
from traceanalyzer.batch.task import config_hash


def test_usable_cpus_follows_affinity_and_quota(monkeypatch):
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity API on this platform")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(cpus, "_cgroup_cpu_quota", lambda: None)
    assert cpus.usable_cpus() == 2  # taskset -c 0,1 on a 16-core host
    monkeypatch.setattr(cpus, "_cgroup_cpu_quota", lambda: 1)
    assert cpus.usable_cpus() == 1


@pytest.mark.parametrize(("files", "expected"), [
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu.max": "150000 100000\n"}, 2),
    ({"cpu.max": "50000 100000\n"}, 1),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu.max": "garbage"}, None),
    ({}, None),
])
def test_cgroup_quota(tmp_path: Path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cpus._cgroup_cpu_quota(tmp_path) == expected


def test_worker_threads_share_usable_cpus(monkeypatch):
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    monkeypatch.setattr(pool, "usable_cpus", lambda: 4)
    with pool.worker_threads_env(2):
        assert os.environ["POLARS_MAX_THREADS"] == "2"
    assert "POLARS_MAX_THREADS" not in os.environ
    with pool.worker_threads_env(8):
        assert os.environ["POLARS_MAX_THREADS"] == "1"
    monkeypatch.setenv("POLARS_MAX_THREADS", "3")  # the user's own setting wins
    with pool.worker_threads_env(2):
        assert os.environ["POLARS_MAX_THREADS"] == "3"


def test_report_key_changes_with_the_code(monkeypatch):
    """A stored report must not count as up to date after a detector was edited."""
    before = config_hash(False, None)
    assert config_hash(False, None) == before
    monkeypatch.setattr(result_cache, "code_hash", lambda: "an edited detector")
    assert config_hash(False, None) != before


def test_report_key_changes_with_rule_parameters():
    from traceanalyzer.rules import load_config

    default = config_hash(True, load_config(use_project_config=False))
    changed = config_hash(True, load_config(sets=["gpu-idle-gaps.min_gap_us=7"],
                                            use_project_config=False))
    assert default != changed
    assert default != config_hash(False, None)


def test_pool_runs_biggest_files_first(tmp_path: Path):
    from traceanalyzer.batch.task import Settings

    tasks = []
    for name, size in (("a.json", 10), ("b.json", 1000), ("c.json", 100)):
        path = tmp_path / name
        path.write_bytes(b"x" * size)  # not traces: each task fails fast, which is enough here
        tasks.append((str(path), None))
    assert pool.biggest_first(tasks) == [1, 2, 0]
    # Every task still runs once (completion order is not asserted: futures that finish
    # between two waits are reported in no particular order).
    done: list[int] = []
    pool.PoolRunner(tasks, Settings(use_cache=False), 1,
                    lambda index, outcome: done.append(index)).run()
    assert sorted(done) == [0, 1, 2]
