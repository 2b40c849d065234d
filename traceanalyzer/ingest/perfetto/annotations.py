"""Debug annotations: which ones the reader keeps, and how a chunk of them is decoded at once.

A TrackEvent carries its debug annotations as nested messages: a name (or an interned name id)
and one value. rocprofv3 writes about a dozen per slice, so the packet loop keeps them as raw
bytes and :class:`AnnotationDecoding` decodes a whole chunk of them with NumPy
(:mod:`traceanalyzer.ingest.perfetto.wire`), resolving interned names per sequence generation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceanalyzer.ingest.perfetto import wire
from traceanalyzer.ingest.perfetto.light import light_classes

#: Placeholder for an interned id that the sequence never defined.
UNKNOWN_NAME = "<unknown>"

#: Debug annotation names we read, mapped to the column they feed. Producers spell the same thing
#: differently: rocprofv3 writes ``corr_id``/``queue``/``copy_bytes``, Kineto-style producers write
#: ``correlation``/``External id``/``stream``; our own writer writes canonical column names.
ANNOTATION_KEYS: dict[str, str] = {
    "correlation": "correlation",
    "corr_id": "correlation",
    "correlation_id": "correlation",
    "External id": "external_id",
    "external_id": "external_id",
    "device": "device",
    "device_id": "device",
    "agent": "agent",
    "stream": "stream",
    "stream_id": "stream",
    "queue": "queue",
    "grid": "grid",
    "block": "block",
    "grid_x": "grid_x",
    "grid_y": "grid_y",
    "grid_z": "grid_z",
    "block_x": "block_x",
    "block_y": "block_y",
    "block_z": "block_z",
    "registers per thread": "registers",
    "registers": "registers",
    "shared memory": "shared_mem",
    "shared_mem": "shared_mem",
    "bytes": "bytes",
    "copy_bytes": "bytes",
    "copy_kind": "copy_kind",
    "src_kind": "src_kind",
    "dst_kind": "dst_kind",
    "graph_launched": "graph_launched",
    "Input Dims": "input_dims",
    "input_dims": "input_dims",
    "Input type": "input_types",
    "input_types": "input_types",
    "call_stack": "call_stack",
    "parent_op": "parent_op",
    "Concrete Inputs": "concrete_inputs",
    "concrete_inputs": "concrete_inputs",
    "flops": "flops",
    "cuda_sync_kind": "sync_type",
    "sync_type": "sync_type",
    "group_segment_size": "shared_mem",
    "rank": "rank",
    "world_size": "world_size",
    "kind": "kind_arg",
    "domain": "domain",
}

#: Annotation columns read as integers (the rest stay text).
INT_KEYS = (
    "correlation",
    "external_id",
    "device",
    "stream",
    "queue",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers",
    "shared_mem",
    "bytes",
    "flops",
    "graph_launched",
    "rank",
    "world_size",
    "_dur",  # a legacy complete event's duration, not an annotation
)
STR_KEYS = (
    "agent",
    "grid",
    "block",
    "copy_kind",
    "src_kind",
    "dst_kind",
    "input_dims",
    "input_types",
    "call_stack",
    "parent_op",
    "concrete_inputs",
    "sync_type",
    "kind_arg",
    "domain",
)

#: DebugAnnotation value fields: bool, uint, int, double, string, pointer, legacy JSON, string iid.
_VALUE_FIELDS = (2, 3, 4, 5, 6, 7, 9, 17)
#: Columns annotations feed, numbered for the vectorised name look-up.
KEY_NAMES = sorted(set(ANNOTATION_KEYS.values()))
KEY_CODES = {name: code for code, name in enumerate(KEY_NAMES)}
#: Raw annotation name -> code of the column it feeds.
RAW_CODES = {raw: KEY_CODES[key] for raw, key in ANNOTATION_KEYS.items()}
#: What each code's column holds, for the walker to type the values itself: "i" int, "s" text.
KEY_KINDS = "".join("i" if name in INT_KEYS else "s" for name in KEY_NAMES)


class AnnotationDecoding:
    """Mixin for the packet decoder: the per-chunk annotation buffers and their decoding.

    The host class provides ``_annotation(idx, key, int_value, str_value)`` for rows built in
    Python and the state initialised by :meth:`_init_annotations`.
    """

    def _init_annotations(self, annotation_cls: Any = None) -> None:
        # the DebugAnnotation class for the rare annotations decoded one by one; looked up when
        # the first one comes if not given (building the light classes is slow: bench/NOTES.md)
        self._annotation_cls = annotation_cls
        # raw debug annotations of the current chunk, and which event and sequence state own them
        self.blobs: list[bytes] = []
        self.blob_event: list[int] = []
        self.blob_gen: list[int] = []
        self.blob_count: list[int] = []
        # interned annotation names and string values, by (generation, iid)
        self.ann_names: dict[int, dict[int, str]] = {}
        self.ann_strings: dict[int, dict[int, str]] = {}
        self.an_parts: list[pl.DataFrame] = []
        self.unknown_iids = 0

    def _annotation(self, idx: int, key: str, int_value: int | None, str_value: str | None) -> None:
        raise NotImplementedError

    # -- debug annotations, a chunk at a time ------------------------------------------------

    def flush_annotations(self) -> None:
        if not self.blobs:
            return
        counts = np.asarray(self.blob_count, dtype=np.int64)
        owner = np.repeat(np.asarray(self.blob_event, dtype=np.int64), counts)
        gen = np.repeat(np.asarray(self.blob_gen, dtype=np.int64), counts)
        blobs = self.blobs
        self.blobs, self.blob_event, self.blob_gen, self.blob_count = [], [], [], []
        self.decode_annotations(*wire.concat(blobs), owner, gen)

    def decode_annotations(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                           owner: np.ndarray, gen: np.ndarray) -> None:
        """Decode the annotations ``buf[starts[i]:ends[i]]`` (``buf`` padded as
        :func:`wire.concat` pads it) of events ``owner`` in sequence generations ``gen``."""
        n = starts.size
        if n == 0:
            return
        # Most annotations start with their interned name id (field 1, varint: tag 0x08). Look
        # that up first and skip the annotations nobody reads before decoding anything else.
        first = (buf[starts] == 0x08) & (ends > starts)
        first_iid = np.zeros(n, dtype=np.uint64)
        at = np.nonzero(first)[0]
        iid_value, iid_len = wire.varints(buf, starts[at] + 1)
        first[at[iid_len < 0]] = False
        first_iid[at] = np.where(iid_len > 0, iid_value, 0)
        code, unknown = self._key_codes(gen, first_iid)
        self.unknown_iids += int((unknown & first).sum())
        sub = np.nonzero(~(first & (code < 0)))[0]
        fields, sub_bad = wire.scan(buf, starts[sub], ends[sub], max_fields=8)
        msg, fno, value = sub[fields["msg"]], fields["field"], fields["value"]
        bad = np.zeros(n, dtype=bool)
        bad[sub] = sub_bad
        # Arrays, dicts and nested values are rare: decode those annotations one by one.
        slow = bad.copy()
        slow[msg[np.isin(fno, (8, 11, 12))]] = True
        for i in np.nonzero(slow)[0]:
            self._slow_annotation(buf[starts[i]:ends[i]].tobytes(), int(owner[i]), int(gen[i]))

        # Name of each annotation: an interned id (field 1) or a string (field 10).
        rows = np.arange(msg.size)
        iid = np.zeros(n, dtype=np.uint64)
        sel = fno == 1
        iid[msg[sel]] = value[sel]
        text_row = np.full(n, -1, dtype=np.int64)
        sel = fno == 10
        text_row[msg[sel]] = rows[sel]
        # First value field of each annotation (assigning in reverse makes the first one win).
        value_row = np.full(n, -1, dtype=np.int64)
        sel = np.nonzero(np.isin(fno, _VALUE_FIELDS))[0][::-1]
        value_row[msg[sel]] = sel

        key_code, unknown = self._key_codes(gen, iid)
        self.unknown_iids += int((unknown & ~slow & ~first).sum())
        named = np.nonzero(text_row >= 0)[0]
        if named.size:
            texts = wire.strings(buf, fields["dstart"][text_row[named]],
                                 fields["dlen"][text_row[named]])
            codes = texts.replace_strict(RAW_CODES, default=-1, return_dtype=pl.Int64)
            key_code[named] = np.where(iid[named] == 0, codes.to_numpy(), key_code[named])
        use = np.nonzero((key_code >= 0) & (value_row >= 0) & ~slow)[0]
        if use.size == 0:
            return
        vrow = value_row[use]
        frame = pl.DataFrame(
            {
                "idx": owner[use].astype(np.uint32),
                "key": pl.Series(KEY_NAMES).gather(key_code[use]),
                "gen": gen[use],
                "field": fno[vrow],
                "value": value[vrow],
                "double": value[vrow].view(np.float64),
                "dstart": fields["dstart"][vrow],
                "dlen": fields["dlen"][vrow],
            }
        )
        self.an_parts.append(self._typed_values(frame, buf))

    def _key_codes(self, gen: np.ndarray, iid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Code (index in KEY_NAMES, -1 if not read) of each interned annotation name, and
        which ids the sequence never defined."""
        combos = [
            (g << 32 | i, RAW_CODES.get(name, -1))
            for g, names in self.ann_names.items()
            for i, name in names.items()
        ]
        key_code = np.full(gen.size, -1, dtype=np.int64)
        unknown = iid != 0
        if combos:
            combos.sort()
            known = np.array([c[0] for c in combos], dtype=np.int64)
            codes = np.array([c[1] for c in combos], dtype=np.int64)
            wanted = (gen << 32) | iid.astype(np.int64)
            pos = np.clip(np.searchsorted(known, wanted), 0, known.size - 1)
            found = (known[pos] == wanted) & (iid != 0)
            key_code = np.where(found, codes[pos], -1)
            unknown &= ~found
        return key_code, unknown

    def _typed_values(self, values: pl.DataFrame, buf: np.ndarray) -> pl.DataFrame:
        text_rows = values.with_row_index("row").filter(pl.col("field").is_in((6, 9)))
        texts = text_rows.select("row").with_columns(
            text=wire.strings(buf, text_rows["dstart"].to_numpy(), text_rows["dlen"].to_numpy())
        )
        values = values.with_row_index("row").join(texts, on="row", how="left",
                                                    maintain_order="left")
        if (values["field"] == 17).any():
            string_rows = [(g, i, s) for g, d in self.ann_strings.items() for i, s in d.items()]
            interned = pl.DataFrame(
                string_rows,
                schema={"gen": pl.Int64, "value": pl.UInt64, "interned": pl.String},
                orient="row",
            )
            values = values.join(interned, on=["gen", "value"], how="left", maintain_order="left")
            self.unknown_iids += values.filter(
                (pl.col("field") == 17) & pl.col("interned").is_null()
            ).height
        else:
            values = values.with_columns(interned=pl.lit(None, pl.String))
        field_no = pl.col("field")
        signed = pl.col("value").reinterpret(signed=True)
        double = pl.col("double")
        whole = double.is_finite() & (double.round() == double) & (double.abs() < 2.0**63)
        return values.select(
            idx=pl.col("idx").cast(pl.UInt32),
            key=pl.col("key"),
            int_value=pl.when(field_no.is_in((2, 4, 7)))
            .then(signed)
            .when((field_no == 3) & (pl.col("value") < 2**63))
            .then(signed)
            .when((field_no == 5) & whole)
            .then(double.cast(pl.Int64, strict=False)),
            str_value=pl.when(field_no.is_in((6, 9)))
            .then(pl.col("text"))
            .when(field_no == 17)
            .then(pl.col("interned").fill_null(UNKNOWN_NAME))
            .when(field_no == 3)
            .then(pl.when(pl.col("value") >= 2**63).then(pl.col("value").cast(pl.String)))
            .when(field_no == 5)
            .then(double.cast(pl.String)),
        )

    def _slow_annotation(self, blob: bytes, idx: int, gen: int) -> None:
        if self._annotation_cls is None:
            self._annotation_cls = light_classes()[1]
        try:
            ann = self._annotation_cls.FromString(blob)
        except Exception:  # noqa: BLE001 - one corrupt annotation is skipped, not fatal
            return
        iid = ann.name_iid
        if iid:
            raw = self.ann_names.get(gen, {}).get(iid)
            if raw is None:
                self.unknown_iids += 1
                return
        else:
            raw = ann.name
        key = ANNOTATION_KEYS.get(raw)
        if key is None:
            return
        which = ann.WhichOneof("value")
        if which in ("int_value", "uint_value", "bool_value", "pointer_value"):
            self._annotation(idx, key, int(getattr(ann, which)) & ((1 << 63) - 1), None)
        elif which == "double_value":
            value = ann.double_value
            self._annotation(idx, key, int(value) if value.is_integer() else None, repr(value))
        elif which == "string_value":
            self._annotation(idx, key, None, ann.string_value)
        elif which == "legacy_json_value":
            self._annotation(idx, key, None, ann.legacy_json_value)
        elif which == "string_value_iid":
            text = self.ann_strings.get(gen, {}).get(ann.string_value_iid)
            if text is None:
                self.unknown_iids += 1
                text = UNKNOWN_NAME
            self._annotation(idx, key, None, text)
        elif ann.array_values:
            ints = [a.int_value or a.uint_value for a in ann.array_values]
            self._annotation(idx, key, None, "[" + ", ".join(map(str, ints)) + "]")
