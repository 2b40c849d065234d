"""A batch's output folder: report names and ``manifest.json`` (what was analyzed, with which key).

The manifest records per trace its report key (trace content hash + tool version + rule
configuration hash), report name, status, format and error; a re-run skips the traces whose key
matches.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from traceanalyzer import __version__

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
REPORTS = "reports"


def report_name(path: str) -> str:
    """A file-system-safe, stable, unique report name for the trace at ``path``."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(path).name).strip("._")[:80] or "trace"
    digest = hashlib.blake2b(path.encode("utf-8", "surrogateescape"), digest_size=4).hexdigest()
    return f"{base}-{digest}"


def read_manifest(out_dir: Path) -> dict[str, dict[str, Any]]:
    """The manifest's entries by trace path; empty when it is missing, unreadable or older."""
    try:
        data = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        return {}
    traces = data.get("traces")
    return traces if isinstance(traces, dict) else {}


def write_manifest(out_dir: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Write ``entries`` (by trace path) as the folder's manifest, atomically."""
    from traceanalyzer.report._common import write_text_atomic

    doc = {"version": MANIFEST_VERSION, "tool": {"name": "traceanalyzer", "version": __version__},
           "traces": {p: entries[p] for p in sorted(entries)}}
    write_text_atomic(out_dir / MANIFEST, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")

