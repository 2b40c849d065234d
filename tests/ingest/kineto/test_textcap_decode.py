"""The text cap applied while decoding (issue 30, class 3): the C decoder keeps one character
more than the cap of each text field, the Polars fallback gets strings cut where JSON stays
valid, and after ``cap_text`` both give exactly what the whole text would have given."""

from __future__ import annotations

import io
import json

import polars as pl
import pytest

from traceanalyzer.ingest.kineto import decode
from traceanalyzer.ingest.kineto.jsonscan import cut_long_strings
from traceanalyzer.ingest.kineto.reader import FALLBACK_STRING_BYTES
from traceanalyzer.ingest.kineto.schema import EVENT_SCHEMA
from traceanalyzer.ingest.textcap import MARKER, MAX_TEXT_CHARS

N = MAX_TEXT_CHARS + 3000
#: Long names of every kind of JSON text: plain, escaped quotes, multi-byte UTF-8, escapes of
#: the BMP and surrogate pairs, a mix that puts an escape right at the cut, control escapes.
NAMES = {
    "plain": "k" * N,
    "quotes": '"' * N,
    "utf8": "é漢" * (N // 2),
    "bmp": "\u2028" * N,
    "pairs": "\U0001f600" * N,
    "mixed": ('a"\\é\U0001f600\n' * N)[:N],
    "short": "fine",
}


def _line(name: str, ascii_only: bool) -> bytes:
    event = {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": 1,
        "dur": 2,
        "args": {"Input Dims": name, "Call stack": [1] * (N // 2)},
    }
    return json.dumps(event, ensure_ascii=ascii_only).encode()


def _capped(column: pl.Series) -> list[str]:
    return [v if len(v) <= MAX_TEXT_CHARS else v[:MAX_TEXT_CHARS] + MARKER for v in column]


@pytest.mark.parametrize("ascii_only", [True, False])
@pytest.mark.parametrize("kind", sorted(NAMES))
def test_c_decoder_keeps_one_character_more_than_the_cap(kind: str, ascii_only: bool) -> None:
    name = NAMES[kind]
    frame = decode.decode(_line(name, ascii_only) + b"\n", EVENT_SCHEMA)
    assert frame is not None
    got = frame["name"][0]
    assert got == name[: MAX_TEXT_CHARS + 1]
    assert frame["args"].struct.field("Input Dims")[0] == name[: MAX_TEXT_CHARS + 1]
    stack = frame["args"].struct.field("Call stack")[0]  # a list as JSON text, cut the same way
    assert len(stack) == MAX_TEXT_CHARS + 1 and stack.startswith("[1, 1")
    assert _capped(frame["name"]) == [
        name if len(name) <= MAX_TEXT_CHARS else name[:MAX_TEXT_CHARS] + MARKER
    ]


@pytest.mark.parametrize("ascii_only", [True, False])
@pytest.mark.parametrize("kind", sorted(NAMES))
def test_fallback_reads_cut_strings_as_the_whole_ones(kind: str, ascii_only: bool) -> None:
    name = NAMES[kind]
    chunk = _line(name, ascii_only) + b"\n" + _line("after", ascii_only) + b"\n"
    cut, n = cut_long_strings(chunk, FALLBACK_STRING_BYTES)
    assert len(cut) <= len(chunk)
    raw = len(json.dumps(name, ensure_ascii=ascii_only).encode()) - 2
    assert n == (2 if raw > FALLBACK_STRING_BYTES else 0)  # the name and its Input Dims
    whole = pl.read_ndjson(io.BytesIO(chunk), schema=EVENT_SCHEMA, ignore_errors=True)
    part = pl.read_ndjson(io.BytesIO(cut), schema=EVENT_SCHEMA, ignore_errors=True)
    assert part.height == whole.height == 2
    assert _capped(part["name"]) == _capped(whole["name"])
    dims = [f.struct.field("Input Dims") for f in (part["args"], whole["args"])]
    assert _capped(dims[0]) == _capped(dims[1])
    assert part[1:].equals(whole[1:])  # the next event is untouched
    assert part["ts"].to_list() == whole["ts"].to_list()


def test_cut_is_only_for_long_strings() -> None:
    chunk = b"".join(_line(n, True) + b"\n" for n in ("a", 'b\\"c', "\\u00e9"))
    assert cut_long_strings(chunk, 100) == (chunk, 0)
    chunk = _line("x" * 5000, True) + b"\n"
    cut, n = cut_long_strings(chunk, 100)
    assert n == 2 and json.loads(cut)["name"] == "x" * 100  # the name and its Input Dims
