"""The performance model's options (``--peak-tflops``, ``--peak-bandwidth``,
``--tokens-per-step``, ``--flops-per-step``), gathered into one ``perf`` argument."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

_POSITIVE = click.FloatRange(min=0.0, min_open=True)


def perf_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the options and passes them to ``fn`` as ``perf`` (a perfmodel.PerfOptions)."""

    @click.option(
        "--peak-tflops",
        type=_POSITIVE,
        default=None,
        help="The GPU's peak TFLOP/s for MFU and the roofline (default: the dense BF16 "
        "peak of the device in the trace, from docs/perf-model.md's table).",
    )
    @click.option(
        "--peak-bandwidth",
        "peak_bandwidth",
        type=_POSITIVE,
        default=None,
        help="The GPU's memory bandwidth in GB/s for the roofline (default: the "
        "device's HBM bandwidth from the same table).",
    )
    @click.option(
        "--tokens-per-step",
        type=click.IntRange(min=1),
        default=None,
        help="Tokens (or samples) per step: reports tokens_per_s.",
    )
    @click.option(
        "--flops-per-step",
        type=_POSITIVE,
        default=None,
        help="Model FLOPs per step, for traces without shapes (Nsight Systems); "
        "overrides the FLOPs counted from the shapes.",
    )
    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        peak_tflops: float | None,
        peak_bandwidth: float | None,
        tokens_per_step: int | None,
        flops_per_step: float | None,
        **kwargs: Any,
    ) -> Any:
        from traceanalyzer.perfmodel import PerfOptions

        kwargs["perf"] = PerfOptions(peak_tflops, peak_bandwidth, tokens_per_step, flops_per_step)
        return fn(*args, **kwargs)

    return wrapper
