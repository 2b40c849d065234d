"""Decode a Perfetto ``TracePacket`` stream into raw column tables, one pass, bounded memory.

A Perfetto trace file is the protobuf ``Trace`` message: a concatenation of ``packet`` fields
(field 1, length-delimited). Any run of complete packet records is itself a valid ``Trace``, so we
read the file in chunks, find the last complete packet in each chunk by walking the length
prefixes, and hand that prefix to a decoder in one call, never holding more than one chunk of
decoded messages.

Two decoders produce the same tables (:mod:`.tables`). The compiled packet walker
(:mod:`.walker`) reads the packets into column buffers with no Python object per packet; the
Python decoder (:mod:`.packets`, per packet through the protobuf classes) is the reference it must
equal, and reads every stream the walker declines (see :func:`decode_stream`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from traceanalyzer.ingest.perfetto.annotations import ANNOTATION_KEYS, UNKNOWN_NAME
from traceanalyzer.ingest.perfetto.packets import PacketDecoder
from traceanalyzer.ingest.perfetto.tables import DecodeError, RawTables
from traceanalyzer.ingest.perfetto.walker import WALKER_AVAILABLE, WalkDecoder

__all__ = ["ANNOTATION_KEYS", "UNKNOWN_NAME", "WALKER_AVAILABLE", "DecodeError", "RawTables",
           "decode_stream"]

#: Bytes read from the file per step; a packet larger than this grows the buffer. Smaller chunks
#: were both faster and lighter than 8 MiB ones (bench/NOTES.md, Perfetto ingest).
CHUNK_BYTES = 2 << 20


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode a varint at ``pos``; return (value, next position) or (-1, pos) if cut short."""
    result = 0
    shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")
    return -1, pos


def _complete_prefix(buf: bytes, start: int, limit: int = -1) -> tuple[int, int]:
    """Walk packet records from ``start``; return (end of the last complete record, records)."""
    end = len(buf)
    pos = start
    count = 0
    while pos < end and count != limit:
        tag = buf[pos]
        if tag == 0x0A:  # field 1 (packet), length-delimited: by far the common case
            length, body = _varint(buf, pos + 1, end)
            if length < 0 or body + length > end:
                break
            pos = body + length
        else:
            key, after = _varint(buf, pos, end)
            if key < 0:
                break
            wire = key & 7
            if key >> 3 == 0 or wire in (3, 4, 6, 7):
                raise DecodeError(f"byte {pos} is not a protobuf field (tag {tag:#04x})")
            if wire == 0:
                _, nxt = _varint(buf, after, end)
                if nxt == after or buf[nxt - 1] & 0x80:
                    break
            elif wire == 1:
                nxt = after + 8
            elif wire == 5:
                nxt = after + 4
            else:
                length, body = _varint(buf, after, end)
                if length < 0:
                    break
                nxt = body + length
            if nxt > end:
                break
            pos = nxt
        count += 1
    return pos, count


def _chunks(fh: IO[bytes], chunk_bytes: int, warnings: list[str]) -> Iterator[bytes]:
    # Read in pieces of at most 1 MiB so that a cut-off gzip member loses only its last piece.
    piece = min(chunk_bytes, 1 << 20)
    read = getattr(fh, "read1", fh.read)  # read1: one decompression step at a time for gzip
    while True:
        parts: list[bytes] = []
        size = 0
        try:
            while size < chunk_bytes:
                data = read(piece)
                if not data:
                    break
                parts.append(data)
                size += len(data)
        except EOFError:
            warnings.append("the gzip stream ends early (the file is truncated)")
            if parts:
                yield b"".join(parts)
            return
        if not parts:
            return
        yield b"".join(parts) if len(parts) > 1 else parts[0]


def _feed_each(decoder: PacketDecoder, buf: bytes) -> int:
    """Decode ``buf`` record by record, skipping records that fail; return how many failed."""
    bad = 0
    pos = 0
    end = len(buf)
    while pos < end:
        nxt, _ = _complete_prefix_one(buf, pos)
        try:
            decoder.feed(buf[pos:nxt])
        except Exception:  # noqa: BLE001 - one corrupt packet must not stop the read
            bad += 1
        pos = nxt
    return bad


def _complete_prefix_one(buf: bytes, pos: int) -> tuple[int, int]:
    return _complete_prefix(buf, pos, limit=1)


def decode_stream(fh: IO[bytes], chunk_bytes: int | None = None,
                  walker: bool | None = None) -> RawTables:
    """Decode every complete packet of ``fh``. A cut-off tail becomes a warning.

    The compiled walker reads the stream when it is built (``walker=None``) and the stream can
    be read again; a stream it declines is read again from the start by the Python decoder.
    ``walker=False`` uses only the Python decoder (the reference), ``walker=True`` only the
    walker (None where it declines; tests use this).

    Raises :class:`DecodeError` if the stream does not start as a packet stream.
    """
    if walker is not False and WALKER_AVAILABLE and (walker or fh.seekable()):
        start = fh.tell() if walker is None else 0
        tables = _walk_stream(fh, chunk_bytes or CHUNK_BYTES)
        if tables is not None or walker:
            return tables  # type: ignore[return-value]
        fh.seek(start)
    return _decode_reference(fh, chunk_bytes)


def _walk_stream(fh: IO[bytes], chunk_bytes: int) -> RawTables | None:
    """The walker's tables, or None where it declines (or reads no packet: the reference then
    tells why)."""
    decoder = WalkDecoder()
    pending = b""
    total = 0
    warnings: list[str] = []
    for data in _chunks(fh, chunk_bytes, warnings):
        total += len(data)
        buf = pending + data if pending else data
        try:
            end = decoder.feed(buf)
        except Exception:  # noqa: BLE001 - e.g. an annotation's text that is not UTF-8
            return None  # the reference skips the packets at fault and says so
        if end < 0:
            return None
        pending = buf[end:]
    if decoder.walker.packets == 0:
        return None
    if pending:
        warnings.append(_truncated(pending))
    tables = decoder.tables()
    tables.warnings = warnings + tables.warnings
    tables.bytes_read = total
    tables.decoder = "walker"
    return tables


def _truncated(pending: bytes) -> str:
    return (f"the trace is truncated: the last {len(pending)} bytes are an incomplete packet "
            "(complete packets before it were kept)")


def _decode_reference(fh: IO[bytes], chunk_bytes: int | None = None) -> RawTables:
    decoder = PacketDecoder()
    pending = b""
    total = 0
    warnings: list[str] = []
    for data in _chunks(fh, chunk_bytes or CHUNK_BYTES, warnings):
        total += len(data)
        buf = pending + data if pending else data
        try:
            end, count = _complete_prefix(buf, 0)
        except DecodeError as exc:
            if decoder.packets == 0 and not pending:
                raise
            warnings.append(f"stopped at undecodable bytes after {total - len(buf)} bytes: {exc}")
            pending = b""
            break
        if end:
            try:
                decoder.feed(buf[:end])
            except Exception:  # protobuf's DecodeError; its class differs by backend
                # Keep the good packets of this chunk: decode its records one by one.
                bad = _feed_each(decoder, buf[:end])
                if decoder.packets == 0:
                    raise DecodeError("not a Perfetto packet stream") from None
                warnings.append(f"skipped {bad} corrupt packet(s)")
        pending = buf[end:]
    if pending:
        warnings.append(_truncated(pending))
    tables = decoder.tables()
    tables.warnings = warnings + tables.warnings
    tables.bytes_read = total
    return tables
