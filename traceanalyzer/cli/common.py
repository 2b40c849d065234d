"""Options shared by commands; what they print is :mod:`traceanalyzer.report.terminal`."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def interactive(stream: Any) -> bool:
    """Whether ``stream`` is a terminal that may get progress lines (carriage returns): not a
    file or a pipe, and not ``TERM=dumb``. traceanalyzer prints no colour at all, so
    ``NO_COLOR`` always holds; a log or a pipe gets only whole lines."""
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


def cache_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--no-cache and --cache-dir, passed on as ``use_cache`` and ``cache_dir``."""

    @click.option("--no-cache", is_flag=True, help="Parse the trace again; ignore the Parquet cache.")
    @click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
                  envvar="TRACEANALYZER_CACHE_DIR", show_envvar=True,
                  help="The cache folder (ingested frames, results, .nsys-rep exports) "
                       "[default: the user cache folder, e.g. ~/.cache/traceanalyzer; never "
                       "beside the trace]. Its size stays under $TRACEANALYZER_CACHE_MAX "
                       "(default 5G); `traceanalyzer cache info|clear`.")
    @functools.wraps(func)
    def wrapper(*args: Any, no_cache: bool, cache_dir: Path | None, **kwargs: Any) -> Any:
        if cache_dir is not None:  # .nsys-rep exports and batch workers follow it too
            os.environ["TRACEANALYZER_CACHE_DIR"] = str(cache_dir)
        return func(*args, use_cache=not no_cache, cache_dir=cache_dir, **kwargs)

    return wrapper


def report_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--json, --html and --markdown output files, passed on as json_path, html_path and
    markdown_path."""
    for name, what in (("markdown", "a short Markdown summary (for a pull request or chat)"),
                       ("html", "the self-contained HTML report"),
                       ("json", "the versioned JSON result")):
        func = click.option(f"--{name}", f"{name}_path",
                            type=click.Path(dir_okay=False, path_type=Path),
                            help=f"Write {what} here.")(func)
    return func


def window_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """--window: the part of each trace that is judged, passed on as ``window`` (checked)."""

    def check(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
        from traceanalyzer.analysis.window import parse_window

        return parse_window(value)

    return click.option(
        "--window", "window", default="steps", show_default=True, callback=check,
        help="What to analyze: steps (the steady state: from the first step after warm-up to "
             "the last), all (the whole capture), profiler-range (between cudaProfilerStart and "
             "Stop) or START:END after the first event (e.g. 100ms:2s); docs/metrics.md.")(func)


def trace_processor_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """--trace-processor: a Perfetto trace_processor_shell to read Perfetto traces with."""
    return click.option(
        "--trace-processor", type=click.Path(dir_okay=False, path_type=Path),
        envvar="TRACEANALYZER_TRACE_PROCESSOR", show_envvar=True,
        help="A Perfetto trace_processor_shell binary to read Perfetto traces with (optional: "
             "the built-in reader needs none, and nothing is ever downloaded).")(func)
