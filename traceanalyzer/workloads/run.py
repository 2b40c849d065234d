"""Run a workload variant: warm up, time it with CUDA events, and optionally profile it.

Usable without the rest of traceanalyzer (the GPU machine has torch but no polars)::

    python3 traceanalyzer/workloads/run.py hidden_sync --variant bad --profiler torch --out DIR
    nsys profile ... python3 traceanalyzer/workloads/run.py hidden_sync --variant bad --profiler nsys

With ``--profiler torch`` it writes ``DIR/<workload>_<variant>.json.gz`` (3 active steps of
``schedule(wait=1, warmup=1, active=3)``). With ``--profiler nsys`` it is meant to run under
``nsys profile``: after timing it runs the profiled steps between ``cudaProfilerStart``/``Stop``,
each in an NVTX range ``ProfilerStep#N`` (the name torch.profiler gives its steps). Every run
writes ``DIR/<workload>_<variant>.<profiler>.record.json`` with the step time, device and versions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run by path: load this folder as the top-level package "workloads" so that nothing of
    # traceanalyzer (and so no polars) is imported.
    _here = Path(__file__).resolve().parent
    _spec = importlib.util.spec_from_file_location(
        "workloads", _here / "__init__.py", submodule_search_locations=[str(_here)]
    )
    assert _spec is not None and _spec.loader is not None
    _pkg = importlib.util.module_from_spec(_spec)
    sys.modules["workloads"] = _pkg
    _spec.loader.exec_module(_pkg)
    __package__ = "workloads"

from . import WORKLOADS, WorkloadInfo, get, load_module  # noqa: E402
from .base import time_steps  # noqa: E402

PROFILE_STEPS = 5  # wait=1, warmup=1, active=3: the trace holds 3 steps


def device_info() -> dict[str, object]:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
    }


def versions() -> dict[str, object]:
    import torch

    out: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


def profile_torch(step, path: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        record_shapes=True,
        with_stack=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for i in range(PROFILE_STEPS):
            step()
            if i == 1:  # the next prof.step() starts recording: let every rank start it together
                _barrier()
            prof.step()
    torch.cuda.synchronize()


def profile_nvtx(step) -> None:
    """Profiled steps for Nsight Systems: a capture range around NVTX-labelled steps."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    _barrier()  # each rank's capture starts at its own time: line the ranks up again
    for i in range(PROFILE_STEPS):
        torch.cuda.nvtx.range_push(f"ProfilerStep#{i}")
        step()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def _barrier() -> None:
    """Wait for every rank (multi-GPU runs): a profiler's start costs each process a different
    time, and a rank that starts its recorded steps late makes the others wait inside their
    first collectives, which the trace would show as exposed communication."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.cuda.synchronize()


def _dist_rank() -> tuple[int, int]:
    """Join the process group when started by torchrun; (rank, world_size)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
    return dist.get_rank(), world


def _enough_gpus(info: WorkloadInfo) -> bool:
    import torch

    return torch.cuda.device_count() >= info.gpus_per_process


def run_one(
    name: str,
    variant: str,
    profiler: str,
    out_dir: Path,
    iters: int | None = None,
) -> dict[str, object]:
    """Build, warm up, time and (optionally) profile one variant; return its record."""
    import torch

    info = get(name)
    if variant not in info.variants:
        raise ValueError(f"{name} has variants {', '.join(info.variants)}, not {variant!r}")
    rank, world = _dist_rank()
    if world < info.min_gpus:
        raise RuntimeError(
            f"{name} needs {info.min_gpus}+ GPUs: start it with "
            f"torchrun --nproc-per-node N {Path(__file__).name} {name} ..."
        )
    if not _enough_gpus(info):
        raise RuntimeError(f"{name} needs {info.gpus_per_process} GPUs in one process")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}_{variant}" + (f"_rank{rank}" if world > 1 else "")
    t_build = time.perf_counter()
    built = load_module(name).build(variant)
    for _ in range(built.warmup):
        built.step()
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - t_build
    step_ms, n = time_steps(built.step, iters)
    trace = None
    if profiler == "torch":
        trace = out_dir / f"{stem}.json.gz"
        profile_torch(built.step, trace)
    elif profiler == "nsys":
        profile_nvtx(built.step)
    if built.close is not None:
        built.close()
    record: dict[str, object] = {
        "workload": name,
        "variant": variant,
        "profiler": profiler,
        "step_ms": round(step_ms, 4),
        "timed_steps": n,
        "warmup_steps": built.warmup,
        "setup_s": round(setup_s, 2),
        "trace": trace.name if trace else None,
        "rank": rank,
        "world_size": world,
        "device": device_info(),
        "versions": versions(),
        "params": built.params,
    }
    (out_dir / f"{stem}.{profiler}.record.json").write_text(json.dumps(record, indent=2) + "\n")
    del built
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+", help="workload names, or 'all' (runnable on this machine)")
    ap.add_argument("--variant", default="all", help="bad, good, another listed variant, or all")
    ap.add_argument("--profiler", choices=("torch", "nsys", "none"), default="none")
    ap.add_argument("--out", type=Path, default=Path("workload-out"))
    ap.add_argument("--iters", type=int, default=None, help="timed steps (default: about 1 s)")
    args = ap.parse_args(argv)
    names = list(WORKLOADS) if args.names == ["all"] else args.names
    failed = 0
    for name in names:
        info = get(name)
        if args.names == ["all"] and info.min_gpus > 1:
            print(f"skip {name}: needs {info.min_gpus}+ GPUs", file=sys.stderr)
            continue
        if args.names == ["all"] and info.gpus_per_process > 1 and not _enough_gpus(info):
            print(f"skip {name}: needs {info.gpus_per_process} GPUs", file=sys.stderr)
            continue
        variants = info.variants if args.variant == "all" else (args.variant,)
        for variant in variants:
            try:
                rec = run_one(name, variant, args.profiler, args.out, args.iters)
            except Exception:  # noqa: BLE001 - one broken workload must not stop a corpus run
                failed += 1
                print(f"FAILED {name} {variant}", file=sys.stderr)
                traceback.print_exc()
                continue
            print(f"{name:20s} {variant:8s} {rec['step_ms']:10.3f} ms/step  "
                  f"(setup {rec['setup_s']} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
