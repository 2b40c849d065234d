"""Reference routes through Kineto ingest that the fast paths are held to.

- :func:`reference_read`: the standard library's json, then the same frame building;
- :func:`chunks_of`: a trace's chunks as the scanner cuts them (NDJSON, by the learned layout).
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import polars as pl

from traceanalyzer.ingest.kineto.assemble import build_trace
from traceanalyzer.ingest.kineto.jsonscan import ScanResult, iter_ndjson_chunks
from traceanalyzer.ingest.kineto.metadata import read_metadata
from traceanalyzer.ingest.kineto.schema import EVENT_SCHEMA, KEPT_PHASES
from traceanalyzer.model import Trace


def reference_read(path: Path) -> Trace:
    """The slow reference parser: the standard library's json, then the same frame building."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    ndjson = "\n".join(json.dumps(e) for e in events).encode()
    frame = pl.read_ndjson(io.BytesIO(ndjson), schema=EVENT_SCHEMA, ignore_errors=True)
    scan = ScanResult(metadata_json=json.dumps({k: v for k, v in doc.items() if k != "traceEvents"}
                                               if isinstance(doc, dict) else []).encode())
    return build_trace(frame, read_metadata(path, scan))


def chunks_of(path: Path) -> list[bytes]:
    """The NDJSON chunks of ``path`` (1 MB), flows and metadata dropped, split by the layout."""
    with gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb") as fh:
        return list(iter_ndjson_chunks(fh, ScanResult(), chunk_bytes=1 << 20,
                                       keep_phases="".join(KEPT_PHASES).encode(), by_layout=True))
