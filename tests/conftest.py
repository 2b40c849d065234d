"""Shared test helpers: paths to real traces and a builder for small synthetic Kineto traces."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO.parent / "shared" / "traces" / "public"
SAMPLES = REPO / "sample_traces"


def bench_module(name: str, module_name: str | None = None) -> ModuleType:
    """A script of bench/ as a module (bench/ is not a package; its scripts import each other)."""
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    module_name = module_name or name
    spec = importlib.util.spec_from_file_location(module_name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before running it: dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def public_kineto() -> list[Path]:
    folder = PUBLIC / "kineto"
    return sorted(folder.glob("*.json.gz")) if folder.is_dir() else []


@pytest.fixture
def public_dir() -> Path:
    if not PUBLIC.is_dir():
        pytest.skip("../shared/traces/public is not available")
    return PUBLIC


class KinetoBuilder:
    """Builds a small Kineto trace: CPU ops, runtime launches and the kernels they launch."""

    def __init__(self, device_name: str = "NVIDIA H200", sms: int = 132) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0
        self.top: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": device_name, "numSms": sms,
                                  "totalGlobalMem": 150 * 2**30, "computeMajor": 9,
                                  "computeMinor": 0}],
        }

    def op(self, name: str, ts: float, dur: float, ext: int | None = None, **args: Any) -> None:
        a = {"External id": ext} if ext is not None else {}
        a.update(args)
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
                            "ts": ts, "dur": dur, "args": a})

    def step(self, n: int, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                            "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}})

    def launch(self, kernel: str, cpu_ts: float, cpu_dur: float, gpu_ts: float, gpu_dur: float,
               stream: int = 7, ext: int | None = None, cat: str = "kernel",
               api: str = "cudaLaunchKernel", **kargs: Any) -> int:
        self.corr += 1
        c = self.corr
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 1, "tid": 1,
                            "ts": cpu_ts, "dur": cpu_dur,
                            "args": {"correlation": c, "External id": ext}})
        args = {"device": 0, "stream": stream, "correlation": c, "External id": ext,
                "grid": [132, 1, 1], "block": [256, 1, 1]}
        args.update(kargs)
        self.events.append({"ph": "X", "cat": cat, "name": kernel, "pid": 0, "tid": stream,
                            "ts": gpu_ts, "dur": gpu_dur, "args": args})
        return c

    def document(self) -> dict[str, Any]:
        return {**self.top, "traceEvents": self.events}

    def write(self, path: Path, indent: int | None = 1) -> Path:
        data = json.dumps(self.document(), indent=indent).encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path


@pytest.fixture
def kineto() -> KinetoBuilder:
    return KinetoBuilder()


def _sqlite_engines() -> list[str]:
    from traceanalyzer.ingest import sqlite_columns

    return ["sqlite3"] + (["connectorx"] if sqlite_columns.engine() == "connectorx" else [])


@pytest.fixture(params=_sqlite_engines())
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each SQLite engine the nsys ingest can use here (connectorx only when installed)."""
    monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", request.param)
    return request.param


def assert_engines_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nsys ingest gives the same frames through connectorx and through sqlite3."""
    from traceanalyzer.ingest.nsys import read_nsys

    monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", "sqlite3")
    slow = read_nsys(path)
    monkeypatch.delenv("TRACEANALYZER_SQLITE_ENGINE")
    fast = read_nsys(path)
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name
