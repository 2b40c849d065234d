"""``traceanalyzer workload``: list and run the reference GPU workloads (needs torch and a GPU).

The runner lives in :mod:`traceanalyzer.workloads.run`; this is a thin layer over it. Listing needs
neither torch nor a GPU.
"""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyzer.workloads import WORKLOADS, get


@click.group("workload")
def workload() -> None:
    """Reference workloads: small GPU programs in a bad and a good (fixed) variant."""


@workload.command("list")
def list_cmd() -> None:
    """List the workloads, their variants and the rules their bad variant triggers."""
    for w in WORKLOADS.values():
        gpus = f"  [{w.min_gpus}+ GPUs]" if w.min_gpus > 1 else ""
        click.echo(f"{w.name:20s} {'/'.join(w.variants):18s} {', '.join(w.rules)}{gpus}")
        click.echo(f"{'':20s} {w.summary}")


@workload.command("run")
@click.argument("name")
@click.option("--variant", default="bad", show_default=True, help="bad, good (or another listed)")
@click.option("--profiler", type=click.Choice(["torch", "nsys", "none"]), default="torch",
              show_default=True,
              help="torch: write a torch.profiler trace; nsys: run under `nsys profile` (NVTX "
                   "ranges + capture range); none: time only")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("workload-out"), show_default=True)
@click.option("--iters", type=int, default=None, help="timed steps (default: about 1 s of work)")
def run_cmd(name: str, variant: str, profiler: str, out_dir: Path, iters: int | None) -> None:
    """Run workload NAME: warm up, time with CUDA events, profile, and write a run record."""
    try:
        info = get(name)
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="NAME") from None
    if variant not in info.variants:
        raise click.BadParameter(f"{name} has variants {', '.join(info.variants)}",
                                 param_hint="--variant")
    try:
        import torch
    except ImportError:
        raise click.ClickException(
            "workloads need torch: pip install 'traceanalyzer[workloads]'") from None
    if not torch.cuda.is_available():
        raise click.ClickException("workloads need a CUDA GPU; none is visible")
    from traceanalyzer.workloads.run import run_one

    rec = run_one(name, variant, profiler, out_dir, iters)
    trace = f", trace {out_dir / rec['trace']}" if rec["trace"] else ""
    click.echo(f"{name} {variant}: {rec['step_ms']:.3f} ms/step on {rec['device']['name']}"
               f" ({rec['timed_steps']} timed steps){trace}")
