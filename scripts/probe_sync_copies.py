"""Which PyTorch calls make synchronous cudaMemcpy/cudaMemset calls? (run on a GPU machine)

    python3 scripts/probe_sync_copies.py

Runs each candidate call under torch.profiler and prints the CUDA runtime/driver API calls that
the trace records for it. CuPy and Numba are tried too when they are installed. (That the
sync_memcpy workload's bad and good variants compute the same results is checked by
traceanalyzer/workloads/check.py.)
"""

from __future__ import annotations

import collections
import gzip
import io
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile


def api_calls(fn) -> collections.Counter:
    fn()  # once outside the profiler: lazy initialisation
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json.gz"
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(path))
        with gzip.open(path, "rt") as fh:
            events = json.load(fh)["traceEvents"]
    return collections.Counter(
        f"{e.get('cat')}:{e['name']}" for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and e["name"] not in ("cudaDeviceSynchronize",)
    )


def candidates():
    x = torch.randn(1 << 20, device="cuda")
    host = torch.randn(1 << 20)
    pinned = host.pin_memory()
    mask = x > 0
    yield "x.item()", lambda: x[0].item()
    yield "x.cpu()", lambda: x.cpu()
    yield "x.tolist() (small)", lambda: x[:16].tolist()
    yield "x.numpy() via cpu", lambda: x[:16].cpu().numpy()
    yield "torch.tensor(list, device=cuda)", lambda: torch.tensor([1.0, 2.0, 3.0], device="cuda")
    yield "pageable.cuda()", lambda: host.cuda()
    yield "pageable.to(cuda, non_blocking=True)", lambda: host.to("cuda", non_blocking=True)
    yield "pinned.cuda(non_blocking=True)", lambda: pinned.cuda(non_blocking=True)
    yield "x.copy_(pageable)", lambda: x.copy_(host)
    yield "pinned.copy_(x, non_blocking=True)", lambda: pinned.copy_(x, non_blocking=True)
    yield "x[mask]", lambda: x[mask]
    yield "torch.nonzero(x)", lambda: torch.nonzero(mask)
    yield "torch.unique(x)", lambda: torch.unique(x[:1024])
    yield "x.zero_()", lambda: x.zero_()
    yield "torch.zeros(device=cuda)", lambda: torch.zeros(1 << 20, device="cuda")
    yield "torch.save(cuda tensor)", lambda: torch.save(x, io.BytesIO())
    if torch.cuda.device_count() > 1:
        yield "x.to(cuda:1)", lambda: x.to("cuda:1")
        yield "torch.cuda.comm.broadcast", lambda: torch.cuda.comm.broadcast(x, [0, 1])
    try:
        import cupy as cp

        a = np.random.rand(1 << 20).astype(np.float32)
        yield "cupy.asarray(numpy)", lambda: cp.asarray(a)
        d = cp.asarray(a)
        yield "cupy ndarray.get()", lambda: d.get()
        yield "cupy.zeros", lambda: cp.zeros(1 << 20, dtype=cp.float32)
        yield "cupy ndarray.fill(0)", lambda: d.fill(0)
    except Exception as e:  # noqa: BLE001
        print("cupy not usable:", e)
    try:
        from numba import cuda as ncuda

        b = np.random.rand(1 << 20).astype(np.float32)
        yield "numba cuda.to_device(numpy)", lambda: ncuda.to_device(b)
        db = ncuda.to_device(b)
        yield "numba device_array.copy_to_host()", lambda: db.copy_to_host()
    except Exception as e:  # noqa: BLE001
        print("numba not usable:", e)


def main() -> None:
    print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))
    for name, fn in candidates():
        try:
            calls = api_calls(fn)
        except Exception as e:  # noqa: BLE001
            print(f"{name:40s} FAILED {e!r}")
            continue
        sync = [k for k in calls if k.split(":")[1].split("_v")[0] in
                ("cudaMemcpy", "cudaMemset", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemsetD8",
                 "cuMemsetD32", "cuMemcpyDtoD", "cudaMemcpyPeer")]
        mark = "SYNC" if sync else "    "
        print(f"{mark} {name:40s} {dict(sorted(calls.items()))}")


if __name__ == "__main__":
    main()
