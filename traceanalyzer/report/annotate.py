"""``--annotate``: the original trace plus a "traceanalyzer findings" track.

For Chrome/Kineto JSON inputs the output is the original file, byte for byte, with extra events
spliced in just before the ``]`` that closes ``traceEvents``: metadata events that name a
process "traceanalyzer findings" (one thread per finding) and one complete ("X") event per
evidence row that has a time range. The input is streamed, never parsed into Python objects, so
multi-GB traces cost one pass of I/O. A ``.gz`` output name gives a gzip file.

The output name picks the format (:func:`annotate_format`): ``.json``/``.json.gz`` is Chrome
JSON, ``.pftrace``/``.perfetto-trace`` a Perfetto protobuf trace written by
:mod:`traceanalyzer.report.perfetto_writer` (from any input). Other inputs (Nsight Systems,
Perfetto) have no JSON to extend, so a JSON name for them is refused, as is any other extension.

Open the result in https://ui.perfetto.dev or chrome://tracing (see docs/report.md).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.errors import InputError, UsageError
from traceanalyzer.findings import Finding
from traceanalyzer.model import Trace
from traceanalyzer.report._common import atomic_write, impact_text, sorted_findings
from traceanalyzer.report.jsonout import clean

FINDINGS_PROCESS = "traceanalyzer findings"
#: A pid no real process has (Linux pids stay below 2**22), so the track never merges with one.
FINDINGS_PID = 2_000_000_000
CHUNK_BYTES = 16 << 20
MAX_EVENTS_PER_FINDING = 1000

QUOTE, BACKSLASH = ord('"'), ord("\\")
LBRACE, RBRACE, LBRACKET, RBRACKET = ord("{"), ord("}"), ord("["), ord("]")
_WS = b" \t\r\n"
_KEY_BEFORE = re.compile(rb'(?<!\\)"traceEvents"\s*:\s*$')


#: Output name endings and the format each names.
ANNOTATE_FORMATS = {".json": "json", ".json.gz": "json", ".pftrace": "perfetto",
                    ".perfetto-trace": "perfetto"}


def annotate_format(out_path: str | os.PathLike[str],
                    trace_path: str | os.PathLike[str] | None = None) -> str:
    """``json`` or ``perfetto``: the format the name ``out_path`` asks for. Raises
    :class:`UsageError` for another extension, or for JSON from an input that is not Chrome JSON
    (when ``trace_path`` is given)."""
    name = Path(out_path).name.lower()
    fmt = next((f for ext, f in ANNOTATE_FORMATS.items() if name.endswith(ext)), None)
    if fmt is None:
        raise UsageError(f"--annotate {out_path}: name the format by the extension: .json or "
                         ".json.gz (Chrome JSON, Kineto inputs) or .pftrace or .perfetto-trace "
                         "(Perfetto protobuf, any input)")
    if fmt == "json" and trace_path is not None:
        from traceanalyzer.ingest import sniff

        kind = sniff(trace_path)
        if kind != "kineto":
            stem = Path(out_path).name
            for ext in (".json.gz", ".json"):
                if stem.lower().endswith(ext):
                    stem = stem[: -len(ext)]
            raise UsageError(f"--annotate {out_path}: a {kind} input can be annotated as a "
                             f"Perfetto trace only; use a .pftrace name (e.g. {stem}.pftrace)")
    return fmt


check_annotate_path = annotate_format


def write_annotated(trace_path: str | os.PathLike[str], trace: Trace, result: AnalysisResult,
                    out_path: str | os.PathLike[str]) -> None:
    """Write ``trace_path`` plus a findings track to ``out_path`` (never over the input)."""
    src, out = Path(trace_path), Path(out_path)
    for original in {src, Path(trace.meta.path)}:
        if _same_file(original, out):
            raise UsageError(f"{out}: refusing to overwrite the input trace; choose another path")
    findings = sorted_findings(result.findings)
    if annotate_format(out, src) == "perfetto":
        from traceanalyzer.report.perfetto_writer import write_perfetto_stream

        # Through a temp name and a rename, so a failure leaves no half-written output; a
        # device such as /dev/null is written through, never replaced.
        atomic_write(out, lambda fh: write_perfetto_stream(trace, findings, fh))
        return
    extra = findings_events(findings)
    gz_out = out.name.endswith(".gz")

    def write(fh: IO[bytes]) -> None:
        if gz_out:
            # The header's file name marks the copy as annotated, so that a batch over its
            # folder leaves it out without inflating it (batch/inputs.py ANNOTATED_GZIP_NAME).
            with gzip.GzipFile(filename="traceanalyzer-annotated.json", fileobj=fh, mode="wb",
                               compresslevel=3, mtime=0) as gz:
                splice_events(src, gz, extra)
        else:
            splice_events(src, fh, extra)

    atomic_write(out, write)


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


# -- the findings track -------------------------------------------------------------------------


def ns_to_us(ns: int) -> str:
    """Exact microseconds text for integer ns (canonical ns = round(ts_us * 1000))."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(int(ns)), 1000)
    return f"{sign}{whole}.{frac:03d}" if frac else f"{sign}{whole}"


def findings_events(findings: list[Finding]) -> list[bytes]:
    """Chrome trace events (each one JSON object, as bytes) for the findings track."""
    meta: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": FINDINGS_PID, "tid": 0,
         "args": {"name": FINDINGS_PROCESS}},
        {"name": "process_sort_index", "ph": "M", "pid": FINDINGS_PID, "tid": 0,
         "args": {"sort_index": -1}},
    ]
    slices: list[str] = []
    for i, f in enumerate(findings):
        rows = []
        for row in f.evidence[:MAX_EVENTS_PER_FINDING]:
            s, e = row.get("start_ns"), row.get("end_ns")
            if isinstance(s, bool) or not isinstance(s, int):
                continue
            if isinstance(e, bool) or not isinstance(e, int) or e < s:
                e = s
            rows.append((s, e, row))
        if not rows:
            continue
        # Slices on one thread must nest; overlapping rows go to extra lanes of the finding.
        lane_end: list[int] = []
        for s, e, row in sorted(rows, key=lambda r: (r[0], r[1])):
            lane = next((j for j, end in enumerate(lane_end) if end <= s), None)
            if lane is None:
                lane = len(lane_end)
                lane_end.append(e)
                tid = 1 + i * 100 + lane
                label = f"{f.rule_id} {f.slug}" + (f" ({lane + 1})" if lane else "")
                meta.append({"name": "thread_name", "ph": "M", "pid": FINDINGS_PID, "tid": tid,
                             "args": {"name": label}})
                meta.append({"name": "thread_sort_index", "ph": "M", "pid": FINDINGS_PID,
                             "tid": tid, "args": {"sort_index": tid}})
            lane_end[lane] = e
            args = {"severity": f.severity, "message": f.message,
                    "impact": impact_text(f),
                    "fix": f.fix, "evidence": clean(dict(row))}
            # ts/dur are written as exact decimal text, not floats, to keep ns precision.
            slices.append(
                '{"name": ' + json.dumps(f"{f.rule_id} {f.title}") + ', "cat": "traceanalyzer", '
                f'"ph": "X", "pid": {FINDINGS_PID}, "tid": {1 + i * 100 + lane}, '
                f'"ts": {ns_to_us(s)}, "dur": {ns_to_us(e - s)}, "args": '
                + json.dumps(args, sort_keys=True) + "}")
    return [json.dumps(m).encode() for m in meta] + [s.encode() for s in slices]


# -- splicing -----------------------------------------------------------------------------------


def _open_input(path: Path) -> IO[bytes]:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _chunks(fh: IO[bytes]) -> Iterator[bytes]:
    try:
        while True:
            chunk = fh.read(CHUNK_BYTES)
            if not chunk:
                return
            yield chunk
    except (EOFError, OSError, gzip.BadGzipFile):
        return  # a cut gzip stream: keep what was read, the splice closes the array


def _structure(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Positions and bytes of the brackets outside strings in ``buf``, which starts outside any
    string (cuts are only ever made right after a structural bracket)."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    quotes = np.flatnonzero(arr == QUOTE)
    if quotes.size:
        # A quote preceded by an odd run of backslashes is escaped. Such quotes are rare, so
        # the run is measured in Python only for quotes right after a backslash.
        prev = quotes[quotes > 0]
        maybe = prev[arr[prev - 1] == BACKSLASH]
        if maybe.size:
            escaped = []
            for q in maybe.tolist():
                run, k = 0, q - 1
                while k >= 0 and buf[k] == BACKSLASH:
                    run, k = run + 1, k - 1
                if run % 2:
                    escaped.append(q)
            if escaped:
                quotes = np.setdiff1d(quotes, np.asarray(escaped, dtype=quotes.dtype))
    brackets = np.flatnonzero((arr == LBRACE) | (arr == RBRACE) | (arr == LBRACKET)
                              | (arr == RBRACKET))
    # Inside a string exactly when an odd number of unescaped quotes precede the bracket.
    brackets = brackets[np.searchsorted(quotes, brackets) % 2 == 0]
    return brackets, arr[brackets]


def splice_events(src: Path, out: IO[bytes], events: list[bytes]) -> None:
    """Copy ``src`` to ``out`` with ``events`` appended to its trace event array."""
    with _open_input(src) as fh:
        _splice(fh, out, events, src)


def _splice(fh: IO[bytes], out: IO[bytes], events: list[bytes], src: Path) -> None:
    # ``pending`` holds bytes read but not written yet. Its start is always a safe point: outside
    # any string, at a known depth (0 before the array is found; array depth + 1 after, i.e.
    # right after the "[" or after a complete event). Each chunk rescans ``pending`` from there.
    pending = b""
    depth = 0
    array_depth: int | None = None  # depth just outside the event array, once found
    top_is_array: bool | None = None
    has_events = False
    chunks = _chunks(fh)
    for chunk in chunks:
        pending += chunk
        if top_is_array is None:
            lead = pending.lstrip(_WS + b"\xef\xbb\xbf")
            if not lead:
                continue
            top_is_array = lead[:1] == b"["
        pos, byte, after = _scan(pending, depth)
        if array_depth is None:
            # The array: the top-level array itself, or the one keyed "traceEvents".
            want = 0 if top_is_array else 1
            start = None
            for k in np.flatnonzero((byte == LBRACKET) & (after == want + 1)).tolist():
                p = int(pos[k])
                if top_is_array or _KEY_BEFORE.search(pending[max(0, p - 256):p]):
                    start = k
                    break
            if start is None:
                continue  # still in the header (small): rescan it with the next chunk
            array_depth = want
            cut = int(pos[start]) + 1
            out.write(pending[:cut])
            pending, depth = pending[cut:], array_depth + 1
            pos, byte, after = _scan(pending, depth)
        close = np.flatnonzero((byte == RBRACKET) & (after == array_depth))
        if close.size:
            p = int(pos[close[0]])
            body = pending[:p]
            has_events = has_events or bool(body.strip(_WS))
            out.write(body.rstrip(_WS))
            _write_events(out, events, has_events)
            out.write(b"\n" + pending[p:])
            for rest in chunks:
                out.write(rest)
            return
        ends = np.flatnonzero(after == array_depth + 1)
        if ends.size:  # write through the last complete event; rescan the rest next time
            cut = int(pos[ends[-1]]) + 1
            has_events = True
            out.write(pending[:cut])
            pending = pending[cut:]
    if array_depth is None:
        raise InputError(src, "has no traceEvents array to add the findings track to")
    # The array never closed (a trace cut short): drop the incomplete event and close it.
    _write_events(out, events, has_events)
    out.write(b"\n]" + (b"" if top_is_array else b"}") + b"\n")


def _scan(buf: bytes, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Structural brackets of ``buf`` (which starts outside a string at ``depth``): positions,
    bytes, and the depth after each."""
    pos, byte = _structure(buf)
    delta = np.where((byte == LBRACE) | (byte == LBRACKET), 1, -1)
    return pos, byte, depth + np.cumsum(delta)


def _write_events(out: IO[bytes], events: list[bytes], has_events: bool) -> None:
    if not events:
        return
    out.write((b",\n" if has_events else b"\n") + b",\n".join(events))
