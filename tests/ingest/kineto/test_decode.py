"""The compiled event decoder gives Polars' frame for a chunk, or None; never another frame."""

from __future__ import annotations

import gc
import io
import json

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tests.support.kineto_reference import chunks_of
from tests.support.paths import REPO, public_kineto
from traceanalyzer.ingest.kineto import decode, read_kineto
from traceanalyzer.ingest.kineto.schema import ARG_FIELDS, EVENT_SCHEMA, KEPT_PHASES

pytestmark = pytest.mark.skipif(
    not decode.AVAILABLE, reason="the C event decoder is not built (no compiler at install)"
)


def polars_frame(chunk: bytes) -> pl.DataFrame | None:
    try:
        return pl.read_ndjson(io.BytesIO(chunk), schema=EVENT_SCHEMA, ignore_errors=True)
    except pl.exceptions.PolarsError:
        return None


def assert_same_or_declined(chunk: bytes) -> pl.DataFrame | None:
    fast = decode.decode(chunk, EVENT_SCHEMA)
    kept = decode.decode(chunk, EVENT_SCHEMA, keep=("ph", KEPT_PHASES))
    reference = polars_frame(chunk)
    if reference is None:
        assert fast is None and kept is None, "the decoder accepted a chunk Polars rejects"
    elif fast is not None:
        assert_frame_equal(fast, reference, check_exact=True)
        # Events left out while decoding are those a filter on the phase leaves out.
        assert_frame_equal(kept, reference.filter(pl.col("ph").is_in(KEPT_PHASES)),
                           check_exact=True)
        # Columns grown in an arena: one that holds them all, one they outgrow at once, and
        # one they outgrow midway.
        for arena_bytes in (4 * len(chunk) + 4096, 64, len(chunk) // 2 + 1):
            in_arena = decode.decode(chunk, EVENT_SCHEMA, arena_bytes=arena_bytes)
            assert in_arena is not None
            assert_frame_equal(in_arena, reference, check_exact=True)
    return fast


SAMPLES = sorted((REPO / "sample_traces" / "torch").glob("*.json.gz"))


@pytest.mark.slow
@pytest.mark.parametrize("path", public_kineto() + SAMPLES[:4], ids=lambda p: p.name)
def test_real_traces_decode_exactly_as_polars_and_never_fall_back(path):
    for chunk in chunks_of(path):
        # Real traces must take the fast path: a chunk left to Polars here would be a
        # regression in speed, not in results.
        assert assert_same_or_declined(chunk) is not None


def test_read_kineto_is_the_same_without_the_decoder(monkeypatch, tmp_path):
    path = SAMPLES[0]
    fast = read_kineto(path)
    monkeypatch.setattr(decode, "_eventdecode", None)
    slow = read_kineto(path)
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name


EVENT = {"ph": "X", "cat": "kernel", "name": "k", "pid": 7, "tid": 8, "ts": 10, "dur": 2.5}


@pytest.mark.parametrize(
    "line, expected",
    [
        # Text fields take other JSON values as text, the way Polars writes them.
        ({**EVENT, "pid": "Spans", "tid": True}, {"pid": "Spans", "tid": "true"}),
        ({**EVENT, "args": {"Input Dims": [[1, 2], [], [3]]}}, {"Input Dims": "[[1, 2], [], [3]]"}),
        ({**EVENT, "args": {"Input type": ["float", "c10::Half", ""]}},
         {"Input type": '["float", "c10::Half", ""]'}),
        ({**EVENT, "name": "caf\u00e9 \"q\" \\ \u4e2d \U0001f600"}, {"name": "caf\u00e9 \"q\" \\ \u4e2d \U0001f600"}),
        ({**EVENT, "ts": 1661203462598509, "dur": -0.0}, {"ts": 1661203462598509.0, "dur": -0.0}),
        ({**EVENT, "args": None}, {}),
        ({**EVENT, "args": 5}, {}),
        # Number fields holding anything else are null, as with Polars' ignore_errors.
        ({**EVENT, "ts": "12", "args": {"stream": "0x0", "device": 7.0, "correlation": [1]}},
         {"ts": None, "stream": None, "device": None, "correlation": None}),
        ({**EVENT, "ts": 12345678901234567, "args": {"bytes": 2**63}},
         {"ts": 12345678901234567.0, "bytes": None}),
        ({**EVENT, "args": {}}, {}),
        ({**EVENT, "args": {"External id": -9223372036854775808, "unknown": {"a": [1.5, None]}}},
         {"External id": -9223372036854775808}),
    ],
)
def test_values_read_like_polars(line, expected):
    for dumps in (json.dumps, lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))):
        frame = assert_same_or_declined(dumps(line).encode() + b"\n")
        assert frame is not None
        row = frame.unnest("args").row(0, named=True)
        for key, value in expected.items():
            assert row[key] == value


@pytest.mark.parametrize(
    "text",
    [
        b'{"ph": "X", "ph": "i"}',  # a duplicate key
        b'{"ph": "X", "args": {"stream": 7, "stream": 8}}',
        b'{"ph": "X", "ts": 99999999999999999999}',
        b'{"ph": "X", "pid": 1.5}',  # a float in a text field: Polars' own formatting
        b'{"ph": "X", "pid": -0}',
        b'{"ph": "X", "args": {"Input Dims": {"a": 1}}}',
        b'{"ph": "X", "args": {"Input type": ["a\\"b"]}}',
        b'{"p\\u0068": "X"}',  # an escaped key
        b'["X"]',
        b'{"ph": "X", "ts": NaN}',
        b'{"ph": "X", "ts": 1e999}',
        b'{"ph": "X", "ts": 01}',
        b'{"ph": "X", "name": "\xff"}',
        b'{"ph": "X", "name": "\xed\xa0\x80"}',  # an encoded surrogate
        b'{"ph": "X", "name": "a\tb"}',  # a raw control character
        b'{"ph": "X", "name": "\\ud800"}',  # a lone surrogate escape
        b'{"ph": "X", "name": "k"',  # cut short
    ],
)
def test_declines_what_it_cannot_read_exactly(text):
    assert decode.decode(text + b"\n", EVENT_SCHEMA) is None
    assert_same_or_declined(text + b"\n")


def test_columns_in_an_arena_outlive_each_other_and_the_decoder():
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
    chunk = "\n".join(json.dumps({"ph": "X", "cat": "kernel", "name": f"{long}{i}", "ts": i,
                                   "args": {"correlation": i}}) for i in range(5000)).encode()
    raw = decode.decode_raw(chunk, EVENT_SCHEMA, arena_bytes=2 * len(chunk))
    assert raw is not None
    frame = decode.to_frame(raw, EVENT_SCHEMA)
    names = frame.get_column("name")
    del raw, frame
    gc.collect()
    assert names.to_list() == [f"{long}{i}" for i in range(5000)]


def test_blank_lines_are_no_rows():
    line = json.dumps(EVENT).encode()
    frame = assert_same_or_declined(b"\n  \t\n" + line + b"\n\r\n" + line + b"  ")
    assert frame is not None and frame.height == 2


def test_events_as_the_array_holds_them():
    """Pretty-printed, comma-separated events decode as the same events one per line."""
    batch = [EVENT, {**EVENT, "args": {"Input Dims": [[1, 2]], "External id": 3}}, {"ph": "i"}]
    as_array = ",\n".join(json.dumps(e, indent=2) for e in batch).encode() + b",\n  "
    one_per_line = "\n".join(json.dumps(e) for e in batch).encode()
    assert_frame_equal(decode.decode(as_array, EVENT_SCHEMA), polars_frame(one_per_line))
    for broken in (b"," + as_array, as_array + b",", as_array[:-40], b"[" + as_array):
        assert decode.decode(broken, EVENT_SCHEMA) is None


@pytest.mark.parametrize("keep", [None, ("ph", KEPT_PHASES)])
def test_buffers_grown_from_a_projection_hold_every_row(keep):
    """Buffers grow to what the chunk will need at the rate seen so far. Chunks whose events
    change halfway (fields that first appear late, names ten times longer, a long run of
    dropped phases) make that projection wrong both ways; the rows must still be exact."""
    small = [{**EVENT, "name": f"k{i}", "args": {}} for i in range(3000)]
    dropped = [{"ph": "f", "name": "flow", "id": i} for i in range(2000)]
    big = [{**EVENT, "name": "n" * (40 + i % 300), "args": {"Call stack": "f;" * (i % 50),
                                                            "Input Dims": [[i, 2]], "bytes": i}}
           for i in range(3000)]
    for batch in (small + big, big + small, small + dropped + big, dropped + big + small):
        chunk = "\n".join(json.dumps(e) for e in batch).encode()
        assert len(chunk) > 1 << 17  # past the 64 KB the decoder projects from
        fast = decode.decode(chunk, EVENT_SCHEMA, keep=keep)
        reference = polars_frame(chunk)
        if keep is not None:
            reference = reference.filter(pl.col("ph").is_in(KEPT_PHASES))
        assert_frame_equal(fast, reference, check_exact=True)


KEYS = [*EVENT_SCHEMA, *ARG_FIELDS, "cbid", "Trace name"]
scalars = (
    st.none() | st.booleans() | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8)
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), inner, max_size=3),
                      max_leaves=8)
events = st.dictionaries(
    st.sampled_from(KEYS), values | st.dictionaries(st.sampled_from(KEYS), values, max_size=6),
    max_size=8,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, min_size=1, max_size=5), st.sampled_from([None, (",", ":"), (" , ", " : ")]),
       st.booleans())
def test_random_events_match_polars_or_are_declined(batch, separators, ascii_only):
    lines = [json.dumps(e, separators=separators, ensure_ascii=ascii_only) for e in batch]
    chunk = "\n".join(lines).encode("utf-8", "surrogatepass") + b"\n"
    assert_same_or_declined(chunk)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries(
    {"ph": st.sampled_from("XiIfsM"), "name": st.text(max_size=12), "ts": st.integers(0, 2**53),
     "dur": st.floats(0, 1e6), "pid": st.integers(0, 2**31) | st.sampled_from(["Spans", ""]),
     "args": st.fixed_dictionaries({"External id": st.integers(0, 2**40),
                                    "Input Dims": st.lists(st.lists(st.integers(0, 4096), max_size=3), max_size=4),
                                    "Input type": st.lists(st.sampled_from(["float", "c10::BFloat16", "", "Scalar"]), max_size=4)})}),
    min_size=1, max_size=20))
def test_kineto_shaped_events_take_the_fast_path(batch):
    chunk = "\n".join(json.dumps(e, ensure_ascii=False) for e in batch).encode() + b"\n"
    assert assert_same_or_declined(chunk) is not None


@pytest.mark.parametrize("path", sorted((REPO / "sample_traces" / "torch").glob("*.json.gz")),
                         ids=lambda p: p.name)
def test_sample_traces_are_read_once(path):
    # A layout cut the decoder rejects costs a second read of the whole file: correct, but a
    # regression in speed the public traces are checked for too (tests/ingest/kineto/test_reader.py).
    assert "read_twice" not in read_kineto(path).meta.extra


def test_a_sigbus_sent_by_kill_still_ends_the_process(tmp_path):
    """The guard of memory-mapped files handles faults past a file's end only: a SIGBUS sent by
    another process ends this one, as it would without the guard, and zeroes no window."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    code = f"""
import mmap, os, signal
from traceanalyzer.ingest.kineto import mapguard
with open({str(path)!r}, "rb") as fh:
    window = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
assert mapguard.guard_mapping(window) >= 0
os.kill(os.getpid(), signal.SIGBUS)
print("survived")
"""
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert b"survived" not in child.stdout
    # killed by SIGBUS, or under AddressSanitizer (the handler before ours) its report and exit
    assert child.returncode == -signal.SIGBUS or (
        child.returncode and b"AddressSanitizer" in child.stderr), child.stderr
