"""A builder for small synthetic Kineto traces: CPU ops, runtime launches and their kernels."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


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

    def memory(self, ts: float, nbytes: int, allocated: int, reserved: int, addr: int,
               device: int = 0) -> None:
        """A ``[memory]`` instant event as ``profile_memory=True`` records it."""
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                            "pid": 1, "tid": 1, "ts": ts,
                            "args": {"Total Reserved": reserved, "Total Allocated": allocated,
                                     "Bytes": nbytes, "Device Id": device, "Device Type": 1,
                                     "Addr": addr}})

    def document(self) -> dict[str, Any]:
        return {**self.top, "traceEvents": self.events}

    def write(self, path: Path, indent: int | None = 1) -> Path:
        data = json.dumps(self.document(), indent=indent).encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path
