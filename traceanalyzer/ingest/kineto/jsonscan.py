"""Split a Chrome/Kineto trace's ``traceEvents`` array into NDJSON chunks, without parsing it.

Polars' NDJSON reader is the fastest JSON decoder we have (multi-threaded, typed, columnar), but a
Chrome trace is one big JSON object whose events sit in an array, each spread over several lines.
This module finds the event boundaries with a vectorised structural scan in NumPy, so no Python
object is built per event:

1. quotes that are not escaped (an odd run of backslashes escapes the next byte) delimit strings;
2. brackets outside strings give the nesting depth (a cumulative sum);
3. an event is an object that opens at the array's depth and closes back to it.

Raw newlines cannot occur inside JSON strings, so every newline is whitespace and can be turned
into a space; the commas between events then become newlines, which yields NDJSON.

Most traces put each event on lines of its own (Kineto writes ``},\n  {`` between events). Once
the structural scan of a chunk has shown that layout, later chunks are split at the newlines that
begin an event line, a pass over the newlines (``by_layout``, half the CPU of the scan). That split is
checked, not trusted: a piece that is not exactly one JSON object fails to decode, and the reader
starts over with the structural scan. With a decoder that reads events as the array holds them
(the C decoder, ``raw_runs``), those chunks are not rewritten at all: each is only cut before its
last event start and handed on in place (:class:`EventRun`).

The file is read in chunks; a plain file in the learned layout is not read at all but cut in
memory-mapped windows (:func:`_mapped_runs`), which saves the copy out of the page cache. A chunk
ends at the last complete event; the bytes of the event still open are carried into the next
chunk, where the scan restarts outside any string at array depth.
What is left when the input ends (an event cut short by a killed profiler) is reported as
truncation, and every complete event before it is kept.
"""

from __future__ import annotations

import io
import mmap
import os
import re
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from traceanalyzer.ingest.kineto.mapguard import AVAILABLE as GUARD_AVAILABLE
from traceanalyzer.ingest.kineto.mapguard import guard_mapping, unguard_mapping

QUOTE, BACKSLASH = ord('"'), ord("\\")
LBRACE, RBRACE, LBRACKET, RBRACKET = ord("{"), ord("}"), ord("["), ord("]")
NEWLINE, CR, SPACE = ord("\n"), ord("\r"), ord(" ")
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
PHASE_KEY = np.frombuffer(b'"ph": "', dtype=np.uint8)
DEFAULT_CHUNK_BYTES = 4 << 20
FIRST_READ_BYTES = 1 << 20
HEADER_READ_BYTES = 64 << 10  # the first read: the array's start and the events' layout
HEADER_GROWS_BYTES = 1 << 20  # a header longer than this is read in reads that double
# What follows the event array (metadata, device properties) is expected within this many bytes
# of the end; a longer trailer is still read right, by a second pass (see iter_ndjson_chunks).
TAIL_BYTES = 256 << 10


@dataclass
class ScanResult:
    """What the scan found besides the events themselves."""

    #: The top-level JSON with the event array emptied: ``{"schemaVersion": 1, ..., "traceEvents": []}``.
    metadata_json: bytes = b""
    truncated: bool = False
    #: Bytes of the incomplete event or header at the point the input ended.
    truncated_tail_bytes: int = 0
    found_events_array: bool = False
    #: Chunks split by the learned line layout rather than the structural scan.
    split_by_layout: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EventRun:
    """Complete events as the file holds them (objects separated by a comma and whitespace),
    yielded instead of NDJSON for a decoder that reads that form (``raw_runs``)."""

    data: memoryview
    #: The guard of the memory map ``data`` lies in (see ``_mapped_runs``), released with the
    #: run: before its memoryview, and so before the map can be closed.
    guard: int = -1

    def __len__(self) -> int:
        return len(self.data)

    def __del__(self) -> None:
        if self.guard >= 0:
            unguard_mapping(self.guard)


class NotATrace(ValueError):
    """The input is JSON-like but has no event array."""


#: Bytes of a chunk the structural scan takes at once. Its arrays hold a position (8 bytes) per
#: quote, backslash and bracket of the block, several times over: 20 MB of escaped quotes in one
#: event, scanned whole, peaked at 700 MB. Block by block they stay below ~60 MB for any input.
SCAN_BLOCK_BYTES = 1 << 20


def _structure(
    buf: np.ndarray, depth0: int, raw: bytes | bytearray | None = None,
    max_depth: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Brackets outside strings in ``buf``: positions, the byte, and the depth after each.

    The scan assumes ``buf`` starts outside a string at nesting depth ``depth0``. ``raw``, the
    same bytes as a bytes object, lets a memchr skip the escape pass when there is no backslash.
    With ``max_depth``, only brackets whose depth after them is at most that are returned (the
    callers look at the event depth and above), so that brackets nested deep inside events, or
    millions of them, take no memory. The scan goes block by block (``SCAN_BLOCK_BYTES``),
    carrying the string, escape and depth state from one to the next.
    """
    if raw is not None and raw.find(b"\\") < 0:
        escapes = False
    else:
        escapes = True
    if buf.size <= SCAN_BLOCK_BYTES:
        return _structure_block(buf, depth0, escapes, max_depth, 0, False, False)[:3]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    depth, in_string, escaped_first = depth0, False, False
    for lo in range(0, buf.size, SCAN_BLOCK_BYTES):
        block = buf[lo : lo + SCAN_BLOCK_BYTES]
        brackets, chars, after, depth, in_string, escaped_first = _structure_block(
            block, depth, escapes, max_depth, lo, in_string, escaped_first
        )
        parts.append((brackets, chars, after))
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )


def _structure_block(
    buf: np.ndarray, depth0: int, escapes: bool, max_depth: int | None, offset: int,
    in_string: bool, escaped_first: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, bool, bool]:
    """:func:`_structure` of one block that starts ``offset`` bytes into the chunk, inside a
    string or not, with its first byte escaped or not (a backslash run across the boundary);
    also the depth, string and escape state at its end."""
    quotes, next_escaped = _quotes_block(buf, escapes, escaped_first)
    # '[' ']' '{' '}' are 0x5B 0x5D 0x7B 0x7D: with bit 5 set and 0x7B subtracted (mod 256) they
    # are exactly the bytes that give 0 or 2, so one mask costs four in-place passes, not seven.
    folded = buf | 0x20
    folded -= LBRACE
    folded &= 0xFD
    brackets = np.flatnonzero(folded == 0)
    del folded
    # A bracket is inside a string when an odd number of quotes precede it.
    outside = np.searchsorted(quotes, brackets) % 2 == int(in_string)
    brackets = brackets[outside]
    del outside
    chars = buf[brackets]
    step = np.where((chars == LBRACE) | (chars == LBRACKET), 1, -1)
    depth = depth0 + np.cumsum(step)
    end_depth = int(depth[-1]) if depth.size else depth0
    if max_depth is not None and depth.size and int(depth.max()) > max_depth:
        keep = depth <= max_depth
        brackets, chars, depth = brackets[keep], chars[keep], depth[keep]
    if offset:
        brackets = brackets + offset
    return brackets, chars, depth, end_depth, in_string != (quotes.size % 2 == 1), next_escaped


def _quotes_block(buf: np.ndarray, escapes: bool, escaped_first: bool) -> tuple[np.ndarray, bool]:
    """Positions of the quotes of ``buf`` that are not escaped, given whether its first byte is
    (a backslash run from the block before), and whether the byte after it is."""
    quotes = np.flatnonzero(buf == QUOTE)
    backslashes = np.flatnonzero(buf == BACKSLASH) if escapes else quotes[:0]
    next_escaped = False
    if backslashes.size or escaped_first:
        if escaped_first:  # a virtual backslash before the block, alone, escapes byte 0
            backslashes = np.concatenate(([-1], backslashes))
        # A run of backslashes of odd length escapes the byte after it.
        run_starts = np.flatnonzero(np.diff(backslashes, prepend=-3) != 1)
        run_ends = np.append(run_starts[1:], backslashes.size) - 1
        lengths = run_ends - run_starts + 1
        odd = lengths % 2 == 1
        escaped = backslashes[run_ends[odd]] + 1
        if escaped.size and escaped[-1] == buf.size:  # the run goes on in the next block
            next_escaped = True
            escaped = escaped[:-1]
        del run_starts, run_ends, lengths, odd, backslashes
        if escaped.size:
            quotes = quotes[~np.isin(quotes, escaped, assume_unique=True)]
    return quotes, next_escaped


def long_strings(buf: np.ndarray, longer_than: int) -> list[tuple[int, int]]:
    """(opening quote, closing quote) of each JSON string in ``buf`` (which starts outside a
    string) whose raw text is longer than ``longer_than`` bytes, block by block."""
    found: list[tuple[int, int]] = []
    open_at = -1  # the quote of a string still open at the end of the last block
    escaped_first = False
    for lo in range(0, buf.size, SCAN_BLOCK_BYTES):
        block = buf[lo : lo + SCAN_BLOCK_BYTES]
        quotes, escaped_first = _quotes_block(block, True, escaped_first)
        quotes = quotes + lo
        if open_at >= 0:
            quotes = np.concatenate(([open_at], quotes))
        pairs = quotes.size // 2 * 2
        opens, closes = quotes[:pairs:2], quotes[1:pairs:2]
        hit = np.flatnonzero(closes - opens - 1 > longer_than)
        found += zip(opens[hit].tolist(), closes[hit].tolist(), strict=True)
        open_at = int(quotes[-1]) if quotes.size % 2 else -1
    return found


def _safe_cut(data: bytes | bytearray, at: int, lo: int) -> int:
    """A position at or before ``at`` (and after ``lo``) where valid JSON string content can be
    cut: not inside a UTF-8 sequence, an escape, or between the halves of a surrogate pair."""
    while at > lo and 0x80 <= data[at] < 0xC0:  # a continuation byte: back to its lead byte
        at -= 1
    for _ in range(3):
        # An escape that the cut would split: a backslash run of odd length right before it,
        # or a ``\uXXXX`` begun in the 5 bytes before it; then a high surrogate's escape.
        run = at
        while run > lo and data[run - 1] == BACKSLASH:
            run -= 1
        if (at - run) % 2:
            at -= 1
            continue
        start = data.rfind(b"\\u", max(lo, at - 5), at)
        if start >= 0 and _escaping(data, start, lo):
            at = start
            continue
        if at - 6 >= lo and data[at - 6 : at - 3].lower() in (b"\\ud8", b"\\ud9", b"\\uda", b"\\udb") \
                and _escaping(data, at - 6, lo):
            at -= 6
            continue
        break
    return at


def _escaping(data: bytes | bytearray, backslash: int, lo: int) -> bool:
    """Whether the backslash at ``backslash`` starts an escape (an even run of them before it)."""
    run = backslash
    while run > lo and data[run - 1] == BACKSLASH:
        run -= 1
    return (backslash - run) % 2 == 0


def cut_long_strings(chunk: bytes | bytearray, keep_bytes: int) -> tuple[bytes | bytearray, int]:
    """``chunk`` (whole events, starting outside a string) with each string longer than
    ``keep_bytes`` bytes of JSON text cut to about that many, and how many were cut.

    For a decoder that materialises every string whole (Polars' NDJSON reader, the standard
    library's json): a 20 MB name of escaped quotes took them 180-230 MB. Cut where the JSON
    stays valid, so a decoder reads the same first characters the whole string has.
    """
    if len(chunk) <= keep_bytes:
        return chunk, 0
    buf = np.frombuffer(chunk, dtype=np.uint8)
    # A string is within one line (JSON strings hold no raw newline): NDJSON whose lines are all
    # shorter needs no scan of its quotes (the fallback decodes every chunk of a trace when the
    # C decoder is not built).
    newlines = np.flatnonzero(buf == NEWLINE)
    if np.diff(newlines, prepend=-1, append=buf.size).max() <= keep_bytes:
        return chunk, 0
    spans = long_strings(buf, keep_bytes)
    if not spans:
        return chunk, 0
    pieces, last = [], 0
    for start, close in spans:
        cut = _safe_cut(chunk, start + 1 + keep_bytes, start + 1)
        pieces += [chunk[last:cut]]
        last = close
    pieces.append(chunk[last:])
    return b"".join(pieces), len(spans)


def _find_events_array(header: bytes) -> tuple[int, int] | None:
    """Position of the ``[`` that opens the event array, and the array's depth, or None."""
    if header.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] == b"[":  # the JSON Array Format
        return header.index(b"["), 1
    # The structural scan runs only up to the first spelling of the key: a trace's header is
    # small, but the first read also holds a megabyte of events that a small trace waits on.
    # Past it, one scan up to the last spelling serves them all: a scan per spelling was
    # quadratic (100,000 nested "traceEvents" keys before the real array ran for minutes).
    keys = EVENTS_KEY.finditer(header)
    first = next(keys, None)
    if first is None:
        return None
    ends = [first.end()]
    brackets, _, depth = _structure(np.frombuffer(header, dtype=np.uint8, count=ends[0]), 0,
                                    max_depth=2)
    if not (brackets.size and brackets[-1] == ends[0] - 1 and depth[-1] == 2):
        ends += [key.end() for key in keys]  # just past each '['
        if len(ends) == 1:
            return None
        brackets, _, depth = _structure(np.frombuffer(header, dtype=np.uint8, count=ends[-1]),
                                        0, max_depth=2)
    # Only a key at depth 1 counts: the '[' must be outside strings and open depth 2.
    opens = np.asarray(ends) - 1
    at = np.minimum(np.searchsorted(brackets, opens), max(brackets.size - 1, 0))
    if not brackets.size:
        return None
    hit = np.flatnonzero((brackets[at] == opens) & (depth[at] == 2))
    return (int(opens[hit[0]]), 2) if hit.size else None


def _pair_events(opens: np.ndarray, closes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each event's ``{`` with the first ``}`` after it at the event depth, for a chunk whose
    brackets do not alternate (a stray ``{`` or ``}`` outside strings, from damage): unpaired
    brackets are left out instead of shifting every later pair, so events never overlap."""
    if not opens.size or not closes.size:
        return opens[:0], closes[:0]
    first_close = np.searchsorted(closes, opens)
    ok = first_close < closes.size
    opens, first_close = opens[ok], first_close[ok]
    # Of several opens before one close, the last is the event; the others never closed.
    last = np.append(first_close[1:] != first_close[:-1], True)
    return opens[last], closes[first_close[last]]


def _to_ndjson(seg: np.ndarray, starts: np.ndarray, ends: np.ndarray, cr: bool = True) -> bytes:
    """NDJSON bytes for the complete events ``seg[starts[i] : ends[i] + 1]``.

    ``seg`` is rewritten in place where it is writable (the chunk buffer, which nothing else
    reads there) and copied once otherwise.
    """
    first, last = int(starts[0]), int(ends[-1])
    # The byte after the last event is separator whitespace or a comma: it becomes the final
    # newline. When the event ends the buffer, or the array's ']' follows at once, copy instead.
    tail = last + 1 < seg.size and seg[last + 1] in (SPACE, NEWLINE, CR, ord(","), ord("\t"))
    if seg.flags.writeable and tail:
        out = seg[first : last + 2]
    else:
        out = np.empty(last + 2 - first, dtype=np.uint8)
        out[:-1] = seg[first : last + 1]
    out[np.flatnonzero(out == NEWLINE)] = SPACE
    if cr:
        out[np.flatnonzero(out == CR)] = SPACE
    # Blank the separators between events (whitespace and one comma), then end each event line.
    gap_starts = ends[:-1] + 1 - first
    gap_lengths = starts[1:] - ends[:-1] - 1
    if gap_lengths.size:
        total = int(gap_lengths.sum())
        offsets = np.arange(total) - np.repeat(np.cumsum(gap_lengths) - gap_lengths, gap_lengths)
        out[np.repeat(gap_starts, gap_lengths) + offsets] = SPACE
        out[gap_starts[gap_lengths > 0]] = NEWLINE
    out[-1] = NEWLINE
    return out.tobytes()


def _read_after(stream: BinaryIO, carry: bytes, size: int) -> bytearray:
    """``carry`` followed by up to ``size`` bytes of ``stream``, read straight into one buffer."""
    readinto = getattr(stream, "readinto", None)
    if readinto is None or isinstance(stream, io.RawIOBase) and type(stream).readinto is \
            io.RawIOBase.readinto:
        buf = bytearray(carry)
        buf += stream.read(size)
        return buf
    buf = bytearray(len(carry) + size)
    buf[: len(carry)] = carry
    have = len(carry)
    with memoryview(buf) as view:
        while have < len(buf):
            got = readinto(view[have:])
            if not got:
                break
            have += got
    del buf[have:]
    return buf


def _other_phase(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: bytes) -> np.ndarray:
    """Which events plainly have a one-letter ``ph`` not in ``keep``, by their first key.

    Only the layout profilers write (``{`` whitespace ``"ph": "f"`` first) is recognised; any
    other event is left for the decoder, so this never drops an event that would be kept.
    """
    window = starts[:, None] + 1 + np.arange(24)
    head = buf[np.minimum(window, ends[:, None])]
    blank = (head == SPACE) | (head == NEWLINE) | (head == CR) | (head == ord("\t"))
    pos = starts + 1 + np.argmin(blank, axis=1)  # first byte that is not whitespace
    return _phase_not_kept(buf, pos, ends, keep)


def _phase_not_kept(buf: np.ndarray, pos: np.ndarray, ends: np.ndarray, keep: bytes) -> np.ndarray:
    """Whether ``"ph": "<letter>"`` starts at each ``pos`` (before the event's closing brace at
    ``ends``) with a plain letter not in ``keep``."""
    hit = pos + 9 < ends
    for j, byte in enumerate(PHASE_KEY):
        hit &= buf[np.minimum(pos + j, ends)] == byte
    phase = buf[np.minimum(pos + 7, ends)]
    hit &= buf[np.minimum(pos + 8, ends)] == QUOTE
    return hit & ~np.isin(phase, np.frombuffer(keep, dtype=np.uint8)) & (phase != BACKSLASH)


def _learn_layout(buf: np.ndarray, raw: bytearray, opens: np.ndarray, n: int) -> bytes | None:
    """The line prefix (newline, indent, ``{``) every event of this chunk starts with, or None.

    A layout is accepted only when it finds exactly the events the structural scan found, and
    every event but the last is followed by ``,`` and the newline at once (pretty-printed or
    one-event-per-line traces, as Kineto and ``json.dump(indent=...)`` write them).
    """
    if n < 3:
        return None
    first = int(opens[1])
    line = raw.rfind(b"\n", 0, first)
    indent = bytes(raw[line + 1 : first])
    if line < 2 or indent.strip(b" \t") or raw[line - 2 : line] != b"},":
        return None
    prefix = b"\n" + indent + b"{"
    starts = _layout_starts(buf, prefix)
    inside = starts[(starts >= first) & (starts <= int(opens[n - 1]))]
    if inside.size != n - 1 or not np.array_equal(inside, opens[1:n]):
        return None
    return prefix


def _guess_layout(raw: bytearray) -> bytes | None:
    """The line prefix of the first event (newline, indent, ``{``) if it starts a line.

    Only for a decoder that rejects a run cut inside an event (``raw_runs``): a wrong guess then
    costs a re-read, and a small trace is spared the structural scan of its first chunk.
    """
    found = re.match(rb"\s*\n([ \t]*)\{", bytes(raw[:4096]))
    return b"\n" + found.group(1) + b"{" if found else None


def _layout_starts(buf: np.ndarray, prefix: bytes) -> np.ndarray:
    """Positions of the ``{`` that end each ``prefix`` (newline, indent, ``{``) in ``buf``.

    Found from the braces back: traces hold 5-10 times fewer braces than newlines.
    """
    k = len(prefix) - 1
    braces = np.flatnonzero(buf == LBRACE)
    braces = braces[braces >= k]
    hit = np.ones(braces.size, dtype=bool)
    for j in range(1, k + 1):
        hit &= buf[braces - j] == prefix[k - j]
    return braces[hit]


def _blank_newlines(buf: np.ndarray) -> None:
    """Every newline becomes a space, in place, by arithmetic (half the cost of a scatter)."""
    shift = (buf == NEWLINE).view(np.uint8)
    shift *= SPACE - NEWLINE
    buf += shift


def _split_by_layout(
    buf: np.ndarray, prefix: bytes, keep_phases: bytes | None = None
) -> tuple[bytes, bytes] | None:
    """NDJSON for the complete events of a chunk in the learned layout, and the bytes from the
    open event on; None when the chunk does not follow the layout (the structural scan then runs).

    Raw newlines are never inside JSON strings, so a newline followed by the event indent and
    ``{`` is a structural ``{``; the piece between two such starts is taken as one event. Should
    a piece not be exactly one JSON object (an odd layout this check cannot see), the decoder
    rejects the line and the caller reads the file again with the structural scan.
    """
    starts = _layout_starts(buf, prefix)
    if buf.size and buf[0] == LBRACE and (starts.size == 0 or starts[0] != 0):
        starts = np.concatenate(([0], starts))
    if starts.size < 2:
        return None
    separators = starts[1:] - (len(prefix) - 1)  # the newline before each later event
    lead = buf[: int(starts[0])]
    if (
        not (buf[separators - 1] == ord(",")).all()
        or not (buf[separators - 2] == RBRACE).all()
        or ((lead != SPACE) & (lead != NEWLINE) & (lead != ord(",")) & (lead != ord("\t"))).any()
    ):
        return None
    # The open event is kept as it is (its newlines may start the next chunk's first events).
    carry = buf[int(starts[-1]) :].tobytes()
    dropped = None
    if keep_phases is not None:
        dropped = _other_phase_at_offset(buf, starts[:-1], separators - 2, keep_phases)
    _blank_newlines(buf)
    buf[separators - 1] = NEWLINE  # the comma after each event ends its line
    lines = buf[int(starts[0]) : int(separators[-1])]
    if dropped is not None and dropped.any():
        # Each event's line and the indent after it, kept or not as a whole: one byte mask.
        lengths = np.diff(np.append(starts[:-1], separators[-1]))
        lines = lines[np.repeat(~dropped, lengths)]
    return lines.tobytes(), carry


def _other_phase_at_offset(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: bytes
) -> np.ndarray:
    """:func:`_other_phase` for events laid out alike: the first key is looked for at the offset
    it has in the chunk's first event, instead of in a window per event. Events laid out
    otherwise are kept (the decoder sorts them out)."""
    head = buf[int(starts[0]) + 1 : int(starts[0]) + 25].tobytes()
    offset = 1 + len(head) - len(head.lstrip(b" \t\n\r"))
    return _phase_not_kept(buf, np.minimum(starts + offset, ends), ends, keep)


def _plain_file(stream: BinaryIO) -> int | None:
    """The file descriptor of a regular file, which can be memory-mapped; None for others."""
    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (AttributeError, OSError):  # io.UnsupportedOperation is an OSError
        return None


def _run_bounds(buf: bytes | bytearray | mmap.mmap, lo: int, limit: int,
                prefix: bytes) -> tuple[int, int] | None:
    """Start and end of the run of whole events in ``buf[lo:]``: from its first ``{`` (a chunk
    that follows one ending between two events begins with their separator) to the last event
    start of the layout before ``limit``; None when there is none."""
    cut = buf.rfind(prefix, lo, limit)
    start = buf.find(b"{", lo, max(cut, lo))
    if cut <= lo or start < 0 or buf[lo:start].strip(b" \t\r\n,"):
        return None
    return start, cut


def _mapped_runs(
    fd: int, pos: int, prefix: bytes, chunk_bytes: int, result: ScanResult
) -> Generator[EventRun, None, int]:
    """:class:`EventRun` pieces of a regular file from ``pos`` on, each in a memory map of its
    own; returns the offset where they stop: TAIL_BYTES before the end, or at a window that
    holds no event start of the layout (an event longer than a chunk).

    A file cut shorter while it is mapped faults (SIGBUS) where reading would have seen an early
    end. Each window is guarded against that (:func:`.mapguard.guard_mapping`):
    past the new end it reads as zeros, which the cut here and the decoder both reject, so the
    caller reads the file again as a stream and sees where it ends now.
    """
    size = os.fstat(fd).st_size
    while True:
        # Whole chunks from the first: a mapped window is cut at once, so unlike a read there is
        # nothing to gain from a small first chunk, and a small trace's threads then start with
        # equal shares (2 + 4 + 4 MB of a 10 MB trace left the first thread idle early).
        end = min(pos + chunk_bytes, size)
        limit = end - TAIL_BYTES if end == size else end
        base = pos - pos % mmap.ALLOCATIONGRANULARITY
        if limit <= pos:
            return pos
        try:
            window = mmap.mmap(fd, end - base, offset=base, access=mmap.ACCESS_READ)
        except ValueError:  # the file is shorter now than when it was measured
            return pos
        guard = guard_mapping(window)
        bounds = _run_bounds(window, pos - base, limit - base, prefix)
        if bounds is None:
            unguard_mapping(guard)
            window.close()
            return pos
        start, cut = bounds
        result.split_by_layout += 1
        yield EventRun(memoryview(window)[start:cut], guard)
        pos = base + cut + len(prefix) - 1


def iter_ndjson_chunks(
    stream: BinaryIO,
    result: ScanResult,
    chunk_bytes: int | None = None,
    keep_phases: bytes | None = None,
    by_layout: bool = False,
    raw_runs: bool = False,
) -> Iterator[bytes | EventRun]:
    """Yield NDJSON chunks of the trace's events; fill ``result`` with metadata and truncation.

    With ``keep_phases`` (e.g. ``b"XiI"``), events whose ``ph`` is plainly another one-letter
    phase (flows, metadata, counters) are left out before anything decodes them.

    With ``by_layout``, once the structural scan has shown that events start on lines of their
    own (see :func:`_learn_layout`), chunks are split by that layout alone: a pass over the
    newlines instead of the full scan. ``result.split_by_layout`` then counts such chunks; their
    lines are unverified until a JSON decoder accepts them.

    With ``raw_runs`` as well, such chunks are not rewritten at all: each is cut before the last
    event start of the layout and yielded as an :class:`EventRun`, in place, all phases kept. A
    cut that the layout got wrong leaves an incomplete event in the run, which its decoder
    must reject (the caller then reads the file again without the layout).
    """
    chunk_bytes = chunk_bytes or DEFAULT_CHUNK_BYTES
    header = b""  # bytes before the event array, while it has not been found
    carry = b""  # bytes of the event still open at the end of the last chunk
    depth = 0  # the event array's depth
    trailer: list[bytes] = []
    in_events = False
    done_events = False
    prefix: bytes | None = None  # the events' line layout, once learned
    attempts = 0
    reads = 0
    while True:
        if not in_events or done_events:
            # A small first read: the structural scan of the first events (which teaches the
            # layout) and the first decode start sooner, which is what a small trace waits for.
            # A plain file's events are then mapped from where they start, so anything read
            # past the layout's first events is read, copied and faulted in for nothing.
            # A header that goes on past HEADER_GROWS_BYTES is read in reads that double, so
            # its scans, each over the whole header so far, add up to a few times its size,
            # not its square.
            grow = len(header) if len(header) > HEADER_GROWS_BYTES else 0
            want = (max(chunk_bytes, grow) if header or done_events
                    else min(chunk_bytes, FIRST_READ_BYTES, HEADER_READ_BYTES))
            data = stream.read(want)
            eof, last_read = not data, len(data) < want
        if done_events:
            if eof:
                break
            trailer.append(data)
            continue
        if not in_events:
            header += data
            found = _find_events_array(header)
            if found is None:
                if eof:
                    if not header.strip():
                        raise NotATrace("is empty")
                    raise NotATrace("has no traceEvents array")
                continue
            pos, depth = found
            result.found_events_array = True
            in_events = True
            raw = bytearray(header[pos + 1 :])
            header = header[: pos + 1]
            eof = False
            if by_layout and raw_runs:
                prefix = _guess_layout(raw)
            # Mapped only where a guard keeps a file cut shorter from ending the process.
            fd = _plain_file(stream) if prefix is not None and GUARD_AVAILABLE else None
            if fd is not None:
                # A plain file is cut into runs where it lies, in memory-mapped windows: no
                # read copies it, and each window is unmapped once its run is decoded.
                start = stream.tell() - len(raw)  # the file offset of raw[0]
                stop = yield from _mapped_runs(fd, start, prefix, chunk_bytes, result)
                if stop > start:  # the rest (the array's end) is read as any stream's
                    stream.seek(stop)
                    # Only what is left (one byte more, to see the end): a buffer of
                    # chunk_bytes would be zero-filled, page by page, for a few hundred KB.
                    want = max(min(chunk_bytes, os.fstat(fd).st_size - stop + 1), 1)
                    raw = _read_after(stream, b"", want)
                    eof, last_read = not raw, len(raw) < want
        else:
            # Chunks grow from 1 MB to chunk_bytes: the decoder gets work sooner and a small
            # trace is split into enough pieces to overlap scanning and decoding.
            reads += 1
            want = min(chunk_bytes, FIRST_READ_BYTES << reads)
            # An event longer than a chunk is carried and scanned again with the next read:
            # reads as long as the carry make those scans add up to a few times the event,
            # not its square over the chunk size (a 150 MB name: 37 scans of 75 MB on average).
            want = max(want, len(carry))
            raw = _read_after(stream, carry, want)
            eof, last_read = len(raw) == len(carry), len(raw) - len(carry) < want
        buf = np.frombuffer(raw, dtype=np.uint8)
        # The input's last piece holds the array's end, and objects after it at the event indent
        # (Kineto's deviceProperties) would look like event starts: there the run stops
        # TAIL_BYTES before the end, and only that tail goes through the structural scan.
        if prefix is not None and raw_runs:
            limit = max(len(raw) - TAIL_BYTES, 0) if last_read else len(raw)
            bounds = _run_bounds(raw, 0, limit, prefix)
            if bounds is not None:
                start, cut = bounds
                carry = bytes(raw[cut + len(prefix) - 1 :])
                result.split_by_layout += 1
                del buf
                yield EventRun(memoryview(raw)[start:cut])
                continue
        elif prefix is not None and raw.find(b"\r") < 0:
            split = _split_by_layout(buf, prefix, keep_phases)
            if split is not None:
                lines, carry = split
                result.split_by_layout += 1
                del buf
                yield lines
                continue  # at the end of input the carry still goes through the scan below
        brackets, chars, after = _structure(buf, depth, raw, max_depth=depth + 1)
        opens = brackets[(chars == LBRACE) & (after == depth + 1)]
        closes = brackets[(chars == RBRACE) & (after == depth)]
        array_end = brackets[(chars == RBRACKET) & (after == depth - 1)]
        if array_end.size:
            end = int(array_end[0])
            opens, closes = opens[opens < end], closes[closes < end]
            trailer.append(bytes(raw[end:]))
            done_events = True
        n = min(opens.size, closes.size)
        # Bytes of the event still open: kept before the chunk buffer is rewritten into NDJSON.
        carry = bytes(raw[int(opens[n]) :]) if opens.size > n and not done_events else b""
        starts, ends = opens[:n], closes[:n]
        if n and (np.any(starts > ends) or np.any(starts[1:] <= ends[:-1])):
            starts, ends = _pair_events(opens, closes)  # damaged: a stray bracket shifted pairs
        if by_layout and prefix is None and not done_events and attempts < 3:
            attempts += 1
            prefix = _learn_layout(buf, raw, starts, n)
        if n and keep_phases is not None:
            kept = ~_other_phase(buf, starts, ends, keep_phases)
            starts, ends = starts[kept], ends[kept]
        if starts.size:
            yield _to_ndjson(buf, starts, ends, raw.find(b"\r") >= 0)
        del buf
        if done_events:
            carry = b""
            continue
        if eof:
            break
    if not result.found_events_array:
        raise NotATrace("has no traceEvents array")
    if not done_events:
        result.truncated = True
        result.truncated_tail_bytes = len(carry)
        closing = b"]" if depth == 1 else b"]}"
        result.metadata_json = header + closing
    else:
        result.metadata_json = header + b"".join(trailer)
