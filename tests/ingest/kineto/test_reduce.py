"""The compiled reduction gives the Polars reduction's frames for a decoded chunk, or None."""

from __future__ import annotations

import gc
import json
import weakref

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tests.support.kineto_reference import chunks_of
from tests.support.paths import REPO, public_kineto
from traceanalyzer.ingest.kineto import decode, read_kineto, reader, reduce
from traceanalyzer.ingest.kineto.reduce import Parts, compiled_parts, reduce_frame
from traceanalyzer.ingest.kineto.schema import (
    CPU_CATEGORIES,
    EVENT_SCHEMA,
    GPU_CATEGORIES,
    KEPT_PHASES,
)

pytestmark = pytest.mark.skipif(
    not (decode.AVAILABLE and reduce.AVAILABLE),
    reason="the C event decoder or reduction is not built (no compiler at install)",
)


def reduced_both_ways(chunk: bytes) -> Parts | None:
    """The compiled reduction's parts of a chunk, checked against the reference's; None if it
    declined (or the decoder did)."""
    raw = decode.decode_raw(chunk, EVENT_SCHEMA, keep=("ph", KEPT_PHASES))
    if raw is None:
        return None
    reduced = reduce.reduce_raw(raw)
    if reduced is None:
        return None
    fast = compiled_parts(*reduced)
    reference = reduce_frame(decode.to_frame(raw, EVENT_SCHEMA))
    assert (fast.untimed, fast.negative) == (reference.untimed, reference.negative)
    for name in Parts.TABLES:
        assert_frame_equal(getattr(fast, name), getattr(reference, name), check_exact=True)
    return fast


def ndjson(batch: list[dict]) -> bytes:
    return "\n".join(json.dumps(e, ensure_ascii=False) for e in batch).encode()


SAMPLES = sorted((REPO / "sample_traces" / "torch").glob("*.json.gz"))


@pytest.mark.slow
@pytest.mark.parametrize("path", public_kineto() + SAMPLES, ids=lambda p: p.name)
def test_real_traces_reduce_exactly_as_polars_and_never_fall_back(path):
    for chunk in chunks_of(path):  # NDJSON chunks, as bytes
        assert reduced_both_ways(chunk) is not None


NAMES = ["ProfilerStep#3", "ProfilerStep#007", "ProfilerStep#", "ProfilerStep#12x",
         "ProfilerStep#99999999999999999999", "profilerstep#4", "[memory]", "[Memory]",
         "cudaStreamWaitEvent", "Stream Sync", "Event Sync", "cudaDeviceSynchronize", "WAIT",
         "_sync 1", " sync", "", "x" * 13, "aten::mm", "Memcpy HtoD (Pageable -> Device)"]
CATS = [*CPU_CATEGORIES, *GPU_CATEGORIES, "user_annotation", "gpu_user_annotation", "cuda_sync",
        "Kernel", "CUDA_RUNTIME", "Gpu_User_Annotation", "cpu_op ", "trace", ""]
NUMBER_TEXTS = ["7", "+7", "-0", " 7", "7 ", "0x1f", "1e3", "", "-", "Spans",
                "9223372036854775807", "9223372036854775808", "-9223372036854775808"]
DIMS = ["[64, 1, 1]", "[ 2 ,3 ,4 ]", "[1,,2]", "[-5, 2147483648, 3]", "[7]", "[x]", "64",
        "[99999999999999999999, 1]", "[\t1,\n2]", "[-, 1]"]
ts_values = (st.floats(allow_nan=False, allow_infinity=False, width=64)
             | st.floats(-1e3, 1e13) | st.integers(-(2**53), 2**53)
             | st.sampled_from([0.5, 1.5, 2.0005, 1.0005, 9.3e15, 9.2233720368547e15, 2.0**63,
                                -(2.0**63), 1e16, 1.7e15 + 0.123]) | st.none() | st.text(max_size=3))
ints = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([2**31, -(2**31) - 1, 0]) | st.none()
texts = st.text(max_size=14) | st.sampled_from(NAMES)
args = st.fixed_dictionaries({}, optional={
    "External id": ints, "correlation": ints, "device": ints | st.text(max_size=2),
    "stream": ints, "registers per thread": ints, "shared memory": ints, "bytes": ints,
    "grid": st.sampled_from(DIMS) | st.lists(st.integers(-(2**40), 2**40), max_size=4),
    "block": st.sampled_from(DIMS) | st.lists(st.integers(-5, 2**33), max_size=4),
    "Input Dims": st.lists(st.lists(st.integers(0, 9), max_size=2), max_size=2) | texts,
    "Input type": st.lists(st.sampled_from(["float", ""]), max_size=2),
    "Call stack": st.sampled_from(["", "a.py(1): f;b.py(2): g"]) | st.none(),
    "Total Allocated": ints, "Total Reserved": ints, "Device Id": ints, "Bytes": ints,
    "Addr": ints,
})
anything = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(["X", "X", "X", "i", "I", "x"]),
    "cat": st.sampled_from(CATS) | st.text(max_size=6) | st.none(),
    "name": texts | st.none(),
    "pid": st.integers(-5, 2**40) | st.sampled_from(NUMBER_TEXTS) | st.none(),
    "tid": st.integers(-5, 2**40) | st.sampled_from(NUMBER_TEXTS),
    "ts": ts_values,
    "dur": ts_values,
    "args": args | st.none() | st.integers(),
})
# Mostly events that reach the tables: a timed X event of a known category.
kineto_like = st.fixed_dictionaries({
    "ph": st.just("X"), "cat": st.sampled_from(CATS), "name": texts,
    "pid": st.integers(0, 2**31) | st.sampled_from(NUMBER_TEXTS), "tid": st.integers(0, 9),
    "ts": st.floats(0, 1e13) | st.integers(0, 2**40) | ts_values, "dur": st.floats(-10, 1e6),
    "args": args,
})
events = kineto_like | kineto_like | anything


def declined_for_unicode(batch: list[dict]) -> bool:
    """The reasons the compiled reduction may decline: text Unicode lowercasing could change."""
    def non_ascii(value: object) -> bool:
        return isinstance(value, str) and not value.isascii()
    return any(non_ascii(e.get("cat")) or non_ascii(e.get("name")) for e in batch)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, min_size=1, max_size=12))
def test_random_events_reduce_as_polars_or_are_declined_for_unicode(batch):
    chunk = ndjson(batch) + b"\n"
    raw = decode.decode_raw(chunk, EVENT_SCHEMA, keep=("ph", KEPT_PHASES))
    if raw is None:
        return  # the decoder left the chunk to Polars: nothing for the reduction to do
    if reduced_both_ways(chunk) is None:
        assert declined_for_unicode(batch)


def event(**fields: object) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 10.5, "dur": 2,
            "args": {"correlation": 3}, **fields}


@pytest.mark.parametrize("batch", [
    [event(cat="\u212aernel")],  # KELVIN SIGN: Unicode lowercases it to an ASCII "k"
    [event(cat="cuda_sync", name="Stream \u0130 Wait")],  # a sync name with Unicode
])
def test_declines_what_unicode_lowercasing_could_change(batch):
    chunk = ndjson(batch)
    raw = decode.decode_raw(chunk, EVENT_SCHEMA, keep=("ph", KEPT_PHASES))
    assert raw is not None and reduce.reduce_raw(raw) is None


def test_unicode_outside_categories_and_sync_names_is_reduced():
    batch = [event(name="núcleo"), event(cat="cpu_op", name="ümlaut::op"),
             event(cat="user_annotation", name="日本語")]
    chunk = ndjson(batch)
    parts = reduced_both_ways(chunk)
    assert parts is not None
    assert parts.annotations["name"].to_list() == ["日本語"]


def test_text_columns_share_the_decoders_buffers_and_outlive_them():
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
    chunk = ndjson([event(name=long, ts=i) for i in range(100)])
    parts = reduced_both_ways(chunk)
    assert parts is not None
    names = parts.gpu["name"]
    del parts
    assert names.to_list() == [long] * 100


def test_bad_buffers_are_an_error_not_a_crash():
    raw = decode.decode_raw(json.dumps(event()).encode(), EVENT_SCHEMA)
    assert raw is not None
    call = reduce._eventreduce.reduce
    with pytest.raises(ValueError):
        call(raw.rows + 1, raw.struct_valid, raw.top, raw.inner)
    with pytest.raises(ValueError):
        call(raw.rows, raw.struct_valid, raw.top[:-1], raw.inner)
    views, data, valid = raw.top[2]
    forged = bytearray(views)
    forged[0:4] = (1000).to_bytes(4, "little")  # a long text past the end of its data
    top = (*raw.top[:2], (bytes(forged), data, valid), *raw.top[3:])
    with pytest.raises(ValueError):
        call(raw.rows, raw.struct_valid, top, raw.inner)


def mixed_trace(tmp_path, n: int = 3000):
    """Events of every kind, with one chunk's worth the compiled reduction declines."""
    kinds = [event(), event(cat="gpu_memcpy", name="Memcpy HtoD (Pinned -> Device)"),
             event(cat="cpu_op", name="aten::add", args={"External id": 4, "Input Dims": [[2]]}),
             event(cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": 3,
                                                                        "External id": 4}),
             event(cat="user_annotation", name="ProfilerStep#2"),
             event(cat="cuda_sync", name="Stream Sync", args={"stream": 7}),
             event(ph="i", cat="cpu_instant_event", name="[memory]",
                   args={"Total Allocated": 5, "Total Reserved": 9, "Device Id": 0,
                         "Bytes": -512, "Addr": 140201892511744}),
             {"ph": "f", "id": 1, "ts": 1}]
    events = [{**kinds[i % len(kinds)], "ts": i} for i in range(n)]
    events[n // 2]["cat"] = "\u212aernel"  # this chunk goes to Polars
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=1, ensure_ascii=False))
    return path


@pytest.mark.parametrize("group_bytes", [None, 40 << 10])
def test_whole_reads_are_the_same_without_the_compiled_reduction(monkeypatch, tmp_path,
                                                                group_bytes):
    path = mixed_trace(tmp_path)
    monkeypatch.setattr("traceanalyzer.ingest.kineto.jsonscan.DEFAULT_CHUNK_BYTES", 16 << 10)
    if group_bytes:  # several groups: reduced chunks are joined as categories
        monkeypatch.setattr(reader, "GROUP_BYTES", group_bytes)
        monkeypatch.setattr(reader, "FIRST_GROUP_BYTES", group_bytes)
    outcomes = []
    compiled = reduce.reduce_raw

    def spy(raw):
        reduced = compiled(raw)
        outcomes.append(reduced is not None)
        return reduced

    monkeypatch.setattr(reduce, "reduce_raw", spy)
    fast = read_kineto(path)
    assert outcomes.count(False) == 1 and outcomes.count(True) > 4  # one chunk went to Polars
    monkeypatch.setattr(reduce, "_eventreduce", None)
    reference = read_kineto(path)
    for name in ("cpu", "gpu", "annotations", "syncs", "counters", "memory"):
        assert_frame_equal(getattr(fast, name), getattr(reference, name), check_exact=True)
    assert fast.meta.warnings == reference.meta.warnings
    assert fast.gpu.height and fast.syncs.height and fast.counters.height
    assert fast.memory["bytes"].unique().to_list() == [-512]
    assert fast.memory["address"].unique().to_list() == [140201892511744]
    assert fast.annotations["kind"].to_list().count("step")


def test_annotation_names_do_not_keep_the_chunks_names_alive():
    # Annotations are a few rows in every chunk and live to the end of the read: sharing the
    # chunk's buffer of names (all its events') would keep every chunk's names in memory.
    ops = [event(cat="cpu_op", name=f"aten::a_long_operator_name_{i}", ts=i) for i in range(2000)]
    step = event(cat="user_annotation", name="ProfilerStep#1 of a long run", ts=5)
    chunk = ndjson([*ops, step])
    parts = reduced_both_ways(chunk)
    assert parts is not None and parts.annotations.height == 1
    assert parts.annotations["name"].to_arrow().get_total_buffer_size() < 200
    assert parts.cpu["name"].to_arrow().get_total_buffer_size() > 50_000  # shared, not copied


def text_column(texts: list[str | None]) -> tuple[bytes, bytes, bytes | None]:
    """(views, bitmap, data) of Arrow string views, as the reduction writes them."""
    views, bitmap, data = bytearray(), bytearray((len(texts) + 7) // 8), bytearray()
    for i, text in enumerate(texts):
        raw = (text or "").encode()
        view = bytearray(16)
        view[0:4] = len(raw).to_bytes(4, "little")
        if len(raw) <= 12:
            view[4:4 + len(raw)] = raw
        else:
            view[4:8] = raw[:4]
            view[12:16] = len(data).to_bytes(4, "little")
            data += raw
        views += view
        if text is not None:
            bitmap[i // 8] |= 1 << (i % 8)
    return bytes(views), bytes(bitmap), bytes(data) if data else None


def int_column(values: list[int | None], width: int = 8) -> tuple[bytes, bytes]:
    bitmap = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            bitmap[i // 8] |= 1 << (i % 8)
    return b"".join((v or 0).to_bytes(width, "little", signed=True) for v in values), bytes(bitmap)


def test_batches_become_one_frame_with_a_chunk_per_batch():
    long = "a text longer than twelve bytes"
    batches = [
        (3, (text_column(["short", None, long]), int_column([1, None, -3]), None,
             int_column([7, 8, None], width=4))),
        (0, (text_column([]), int_column([]), None, int_column([], width=4))),
        (2, (text_column(["x", "y"]), int_column([2**62, 0]), None, int_column([-1, 5], width=4))),
    ]
    frame = reduce.batches_frame("tlti", ("s", "n", "empty", "i"), batches)
    assert frame.schema == {"s": pl.String, "n": pl.Int64, "empty": pl.String, "i": pl.Int32}
    assert frame.rows() == [("short", 1, None, 7), (None, None, None, 8), (long, -3, None, None),
                            ("x", 2**62, None, -1), ("y", 0, None, 5)]
    assert frame["s"].null_count() == 1 and frame["empty"].null_count() == 5
    assert frame.n_chunks("all")[0] >= 2  # the batches' buffers, not one copy


def test_batches_buffers_outlive_every_python_reference():
    long = "a text longer than twelve bytes, shared with the frame"
    views, bitmap, data = text_column([long] * 50)
    frame = reduce.batches_frame("t", ("s",), [(50, ((views, bitmap, data),))])
    del views, bitmap, data
    gc.collect()
    assert frame["s"].to_list() == [long] * 50


@pytest.mark.parametrize("bad", [
    ("tl", ("a",), []),  # a name per letter
    ("x", ("a",), []),  # an unknown letter
    ("l", ("a",), [(2, (int_column([1]),))]),  # fewer values than rows
    ("l", ("a",), [(1, (int_column([1]), "extra"))]),  # a column too many
    ("t", ("a",), [(1, ((b"\x00" * 16, b"\x01"),))]),  # a text column without data
    ("t", ("a",), [(-1, (text_column([]),))]),
    ("l", ("a",), [(2**62, (int_column([1]),))]),  # a row count whose byte size overflows
])
def test_batches_reject_what_they_cannot_export(bad):
    with pytest.raises((ValueError, TypeError)):
        reduce._eventreduce.Batches(bad[0].encode(), *bad[1:])


def test_batches_reject_a_view_past_its_data():
    views, bitmap, data = text_column(["a text longer than twelve bytes"])
    with pytest.raises(ValueError):
        reduce.batches_frame("t", ("s",), [(1, ((views, bitmap, data[:10]),))])
    with pytest.raises(ValueError):
        reduce.batches_frame("t", ("s",), [(1, ((views, bitmap, None),))])


def test_text_in_several_data_buffers_by_the_views_buffer_index():
    # The assembly's columns gather rows of several chunks: a view names its chunk's buffer.
    first, second = "the first chunk's long text", "the second chunk's long text"
    views, bitmap, data = text_column([first, second, None, "short"])
    forged = bytearray(views)
    forged[16 + 8:16 + 12] = (1).to_bytes(4, "little")  # row 1 in buffer 1, at offset 0
    forged[16 + 12:16 + 16] = (0).to_bytes(4, "little")
    buffers = (data, second.encode())
    frame = reduce.batches_frame("t", ("s",), [(4, ((bytes(forged), bitmap, buffers),))])
    assert frame["s"].to_list() == [first, second, None, "short"]
    forged[16 + 8:16 + 12] = (2).to_bytes(4, "little")  # a buffer that is not there
    with pytest.raises(ValueError):
        reduce.batches_frame("t", ("s",), [(4, ((bytes(forged), bitmap, buffers),))])


def test_booleans_are_a_bitmap_of_values():
    values, valid = bytes([0b0101]), bytes([0b0111])
    frame = reduce.batches_frame("b", ("flag",), [(4, ((values, valid),))])
    assert frame.schema["flag"] == pl.Boolean
    assert frame["flag"].to_list() == [True, False, True, None]
    assert reduce.batches_frame("b", ("flag",), [(3, (None,))])["flag"].to_list() == [None] * 3
    with pytest.raises(ValueError):  # a bitmap too short for 9 rows
        reduce.batches_frame("b", ("flag",), [(9, ((values, bytes(2)),))])


def test_an_unread_stream_releases_its_batches():
    batches = reduce._eventreduce.Batches(b"l", ("a",), [(1, (int_column([1]),))])
    with pytest.raises(ValueError):  # a stream is one column's
        batches.__arrow_c_stream__()
    capsule = batches.column(0).__arrow_c_stream__()
    del capsule  # never taken by a consumer: its release runs with the capsule
    assert pl.Series(values=batches.column(0)).to_list() == [1]
    with pytest.raises(IndexError):
        batches.column(1)


def test_each_column_frees_its_buffers_when_dropped():
    # A struct stream would keep a batch whole in Polars until its last column is dropped.
    class Owned(bytearray):  # a buffer that a weak reference can watch
        pass

    views, bitmap, data = text_column(["a text longer than twelve bytes"] * 10)
    data = Owned(data)
    watch = weakref.ref(data)
    frame = reduce.batches_frame("tl", ("s", "n"), [(10, ((views, bitmap, data),
                                                       int_column(list(range(10)))))])
    del views, bitmap, data
    frame = frame.drop("s")
    gc.collect()
    assert watch() is None and frame["n"].to_list() == list(range(10))


def test_a_buffer_changed_after_the_checks_is_an_error_not_a_read_past_it():
    views, bitmap, data = text_column(["a text longer than twelve bytes"] * 4)
    data = bytearray(data)
    batches = reduce._eventreduce.Batches(b"t", ("s",), [(4, ((views, bitmap, data),))])
    del data[10:]  # not exported yet, so it may shrink: the export checks again
    with pytest.raises(pl.exceptions.ComputeError, match="no longer hold"):
        pl.Series(values=batches.column(0))
