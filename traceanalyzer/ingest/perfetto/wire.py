"""Vectorised protobuf wire decoding with NumPy, for the small messages a trace has millions of.

A TrackEvent carries its debug annotations as nested ``DebugAnnotation`` messages: a name (or an
interned name id) and one value. rocprofv3 writes about a dozen per slice, so decoding them one
Python object at a time dominated reading time. Instead, the packet decoder keeps each annotation
as raw bytes and this module decodes all of a chunk's annotations at once: one pass per field
position, each pass a handful of array operations over every message that still has bytes left.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

_PAD = 16  # zero bytes after the data so that a 10-byte varint read never runs off the end


def concat(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Join ``blobs`` into one padded byte array; return (buffer, starts, ends)."""
    lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf = np.frombuffer(b"".join(blobs) + bytes(_PAD), dtype=np.uint8)
    return buf, starts, ends


def varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode the varint at each position: (values as uint64, byte lengths; -1 when malformed)."""
    n = pos.size
    value = np.zeros(n, dtype=np.uint64)
    length = np.full(n, -1, dtype=np.int64)
    todo = np.arange(n)
    limit = buf.size - _PAD
    for k in range(10):
        at = pos[todo] + k
        inside = at < limit
        if not inside.all():
            todo = todo[inside]
            at = at[inside]
        byte = buf[at].astype(np.uint64)
        value[todo] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
        last = byte < 0x80
        length[todo[last]] = k + 1
        todo = todo[~last]
        if todo.size == 0:
            break
    return value, length


def _fixed(buf: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    value = np.zeros(pos.size, dtype=np.uint64)
    for k in range(size):
        value |= buf[pos + k].astype(np.uint64) << np.uint64(8 * k)
    return value


def scan(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, max_fields: int = 64
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """List the fields of every message ``buf[starts[i]:ends[i]]``.

    Returns (fields, bad): ``fields`` has arrays ``msg`` (message index), ``field`` (number),
    ``wire`` (type), ``value`` (varint or fixed value, uint64), ``dstart``/``dlen`` (payload of
    length-delimited fields); ``bad`` flags messages that are malformed or have more fields than
    ``max_fields`` (their fields read so far are still listed).
    """
    bad = np.zeros(starts.size, dtype=bool)
    cur = starts.astype(np.int64).copy()
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("msg", "field", "wire", "value",
                                                       "dstart", "dlen")}
    active = np.nonzero(cur < ends)[0]
    for _ in range(max_fields):
        if active.size == 0:
            break
        pos = cur[active]
        end = ends[active]
        key, klen = varints(buf, pos)
        broken = klen < 0
        pos = pos + np.maximum(klen, 0)
        wire = (key & np.uint64(7)).astype(np.int8)
        field = (key >> np.uint64(3)).astype(np.int64)
        value = np.zeros(active.size, dtype=np.uint64)
        dstart = np.zeros(active.size, dtype=np.int64)
        dlen = np.zeros(active.size, dtype=np.int64)
        nxt = np.full(active.size, -1, dtype=np.int64)
        for wtype in (0, 2):
            sel = np.nonzero((wire == wtype) & ~broken)[0]
            if sel.size:
                val, vlen = varints(buf, pos[sel])
                ok = vlen >= 0
                if wtype == 0:
                    value[sel] = val
                    nxt[sel] = np.where(ok, pos[sel] + vlen, -1)
                else:
                    body = pos[sel] + np.maximum(vlen, 0)
                    dstart[sel] = body
                    dlen[sel] = val.astype(np.int64)
                    nxt[sel] = np.where(ok & (val < np.uint64(1 << 40)), body + dlen[sel], -1)
        for wtype, size in ((1, 8), (5, 4)):
            sel = np.nonzero((wire == wtype) & ~broken)[0]
            if sel.size:
                fits = pos[sel] + size <= end[sel]
                safe = np.where(fits, pos[sel], 0)
                value[sel] = np.where(fits, _fixed(buf, safe, size), 0)
                nxt[sel] = np.where(fits, pos[sel] + size, -1)
        broken |= (nxt < 0) | (nxt > end) | (field == 0)
        good = ~broken
        out["msg"].append(active[good])
        out["field"].append(field[good])
        out["wire"].append(wire[good])
        out["value"].append(value[good])
        out["dstart"].append(dstart[good])
        out["dlen"].append(dlen[good])
        bad[active[broken]] = True
        cur[active] = np.where(broken, end, nxt)
        active = active[cur[active] < end]
    bad[active] = True  # still had fields after max_fields passes
    fields = {
        k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in out.items()
    }
    return fields, bad


def strings(buf: np.ndarray, dstart: np.ndarray, dlen: np.ndarray) -> pl.Series:
    """The byte ranges as a String series, gathered without a Python object per string.

    Invalid UTF-8 becomes null rather than an error: trace strings are untrusted.
    """
    n = dstart.size
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(dlen, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        # index of every byte to gather: each range's start, repeated, plus a running offset
        idx = np.repeat(dstart - offsets[:-1], dlen) + np.arange(total, dtype=np.int64)
        data = buf[idx].tobytes()
    else:
        data = b""
    arr = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    series = pl.Series(pl.from_arrow(arr))
    return series.cast(pl.String, strict=False) if series.dtype != pl.String else series
