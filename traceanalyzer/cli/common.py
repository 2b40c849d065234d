"""Options and terminal formatting shared by commands."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import polars as pl


def cache_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--no-cache and --cache-dir, passed on as ``use_cache`` and ``cache_dir``."""

    @click.option("--no-cache", is_flag=True, help="Parse the trace again; ignore the Parquet cache.")
    @click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
                  envvar="TRACEANALYZER_CACHE_DIR", show_envvar=True,
                  help="Where ingested frames are cached [default: .traceanalyzer-cache beside "
                       "the trace, or the user cache folder].")
    @functools.wraps(func)
    def wrapper(*args: Any, no_cache: bool, cache_dir: Path | None, **kwargs: Any) -> Any:
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


def trace_processor_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """--trace-processor: a Perfetto trace_processor_shell to read Perfetto traces with."""
    return click.option(
        "--trace-processor", type=click.Path(dir_okay=False, path_type=Path),
        envvar="TRACEANALYZER_TRACE_PROCESSOR", show_envvar=True,
        help="A Perfetto trace_processor_shell binary to read Perfetto traces with (optional: "
             "the built-in reader needs none, and nothing is ever downloaded).")(func)


def safe(text: object, limit: int | None = None) -> str:
    """Untrusted text made safe for a terminal: control characters (escape sequences) replaced."""
    out = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    if limit is not None and len(out) > limit:
        out = out[: limit - 1] + "…"
    return out


def fmt_ns(ns: float | int | None) -> str:
    """A duration in the most readable unit."""
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.0f} ns"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def table(rows: list[list[str]], headers: list[str], right: set[int] | None = None) -> str:
    """A plain aligned text table."""
    right = right or set()
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def frame_output(frame: pl.DataFrame, fmt: str) -> str:
    """A frame as csv, json (records) or an aligned table."""
    if fmt == "csv":
        return frame.write_csv()
    if fmt == "json":
        return frame.write_json()
    rows = [[safe(v, 80) if isinstance(v, str) else _cell(v) for v in row] for row in frame.rows()]
    numeric = {i for i, dt in enumerate(frame.dtypes) if dt.is_numeric()}
    return table(rows, frame.columns, right=numeric)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
