"""``traceanalyzer stats``: summary tables like ``nsys stats``, for any input format."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyzer.cli.common import cache_options, trace_processor_option
from traceanalyzer.report.stats import REPORTS, stats_frame
from traceanalyzer.report.terminal import frame_output


@click.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--report", "report", type=click.Choice(REPORTS), default="kernels",
              show_default=True, help="kernels: per kernel name (cuda_gpu_kern_sum); api: per "
              "CUDA/HIP API (cuda_api_sum); memops: copies and memsets (cuda_gpu_mem_time_sum); "
              "nvtx: NVTX and user ranges (nvtx_sum).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@click.option("--limit", type=click.IntRange(min=0, max=2**31 - 1, clamp=True), default=None,
              help="Print only the first N rows.")
@click.option("--output", "-o", "output", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the table to this file instead of standard output "
                                 "(- is standard output).")
@trace_processor_option
@cache_options
def stats(trace: Path, report: str, fmt: str, limit: int | None, output: Path | None,
          trace_processor: Path | None, use_cache: bool,
          cache_dir: Path | None) -> None:
    """Print a summary table of TRACE (any supported format)."""
    from traceanalyzer.cli.outputs import check_outputs
    from traceanalyzer.ingest import load

    check_outputs([("--output", output)], [trace])
    loaded = load(trace, use_cache=use_cache, cache_dir=cache_dir, trace_processor=trace_processor)
    frame = stats_frame(loaded, report)
    if limit is not None:
        frame = frame.head(limit)
    text = frame_output(frame, fmt)
    if output is None or str(output) == "-":
        click.echo(text, nl=fmt == "table")
        return
    from traceanalyzer.report._common import write_text_atomic
    from traceanalyzer.report.terminal import safe

    write_text_atomic(output, text + ("\n" if fmt == "table" else ""))
    click.echo(f"wrote {safe(output)}", err=True)

