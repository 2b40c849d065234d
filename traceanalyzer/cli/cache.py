"""``traceanalyzer cache info|clear``: where the cache is, what it holds, and emptying it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click

from traceanalyzer.report.terminal import safe

_DIR_OPTION = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="TRACEANALYZER_CACHE_DIR",
    show_envvar=True,
    help="The cache folder [default: the user cache folder, e.g. ~/.cache/traceanalyzer].",
)


@click.group()
def cache() -> None:
    """The cache of ingested traces, analysis results and .nsys-rep exports.

    It lives in the user cache folder ($XDG_CACHE_HOME/traceanalyzer, else
    ~/.cache/traceanalyzer; ~/Library/Caches/traceanalyzer on macOS), never beside the traces,
    and is kept under $TRACEANALYZER_CACHE_MAX (default 5G) by deleting the least recently used
    entries.
    """


@cache.command()
@_DIR_OPTION
def info(cache_dir: Path | None) -> None:
    """Say where the cache is, how big it is and how many entries it holds."""
    from traceanalyzer.ingest.cache import cache_root, entries, max_bytes

    root = cache_root(cache_dir)
    found = list(entries(root))
    kinds = Counter(e.kind for e in found)
    size = sum(e.size for e in found)
    click.echo(f"cache: {safe(root)}{'' if root.is_dir() else ' (not created yet)'}")
    click.echo(
        f"size: {_human(size)} of {_human(max_bytes())} "
        "(least recently used entries go first; $TRACEANALYZER_CACHE_MAX sets the bound)"
    )
    click.echo(
        f"entries: {len(found)} ({kinds['frames']} ingested traces, "
        f"{kinds['result']} analysis results, {kinds['export']} .nsys-rep exports)"
    )


@cache.command()
@_DIR_OPTION
def clear(cache_dir: Path | None) -> None:
    """Delete every cache entry (nothing else in the folder is touched)."""
    from traceanalyzer.ingest.cache import cache_root
    from traceanalyzer.ingest.cache import clear as clear_cache

    root = cache_root(cache_dir)
    count, size = clear_cache(root)
    click.echo(f"removed {count} entries ({_human(size)}) from {safe(root)}")


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
