"""Perfetto packet walker (``_perfettowalk.c``): a TracePacket stream into column buffers.

Python side: :mod:`traceanalyzer.ingest.perfetto.walker`.
"""

from typing import Any, final

from typing_extensions import Buffer

@final
class Walker:
    """Walks packet records chunk by chunk; state that outlives a chunk (sequences, interned
    names, track descriptors) stays in the walker."""

    def __new__(cls, raw_codes: dict[str, int], kinds: str) -> Walker:
        """``raw_codes``: debug annotation name -> code of the column it feeds (below 64);
        ``kinds[code]``: "i" for an int column, "s" for a text column."""
    def feed(self, buffer: Buffer, /) -> int:
        """Walk the complete packet records at the start of ``buffer``: where the last one ends,
        or -1 (declined: read the whole stream with the Python decoder)."""
    def take(self) -> dict[str, Any]:
        """This chunk's columns as bytes by name (``events``: their count), and start the
        next chunk."""
    @property
    def declined(self) -> str | None: ...
    @property
    def packets(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def unknown_iids(self) -> int: ...
    @property
    def unknown_clock(self) -> int: ...
    @property
    def bad_timestamps(self) -> int: ...
    @property
    def paired(self) -> bool:
        """Whether ``pr_begin``/``pr_end`` pair every slice (each track's came in time order)."""
    @property
    def unended(self) -> int: ...
    @property
    def orphan_ends(self) -> int: ...
    @property
    def tracks(self) -> dict[int, tuple[Any, ...]]:
        """uuid -> track row (as ``tables.TRACK_SCHEMA``)."""
    @property
    def ann_names(self) -> dict[int, dict[int, str]]:
        """Sequence generation -> {iid: annotation name}."""
    @property
    def ann_strings(self) -> dict[int, dict[int, str]]:
        """Sequence generation -> {iid: string value}."""
