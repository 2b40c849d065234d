"""The small Kineto trace that the tests of bench/make_big_trace.py and bench/run.py tile."""

from __future__ import annotations

from pathlib import Path

from tests.support.kineto_builder import KinetoBuilder


def seed_trace(path: Path) -> Path:
    k = KinetoBuilder()
    for step in range(3):
        t0 = 1000.0 + step * 100
        k.step(step + 5, t0, 90)
        k.op("aten::mm 100%", t0 + 1, 20, ext=step + 1, **{"Input Dims": [[2, 3], [3, 4]]})
        k.launch("gemm_kernel", t0 + 2, 5, t0 + 10.5, 30.5, ext=step + 1)
        k.launch("elementwise", t0 + 30, 5, t0 + 50, 10.25, ext=step + 1)
    k.events.append({"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 1002, "cat": "ac2g",
                     "name": "ac2g"})
    k.events.append({"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 1010, "cat": "ac2g",
                     "name": "ac2g", "bp": "e"})
    k.events.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}})
    return k.write(path)
