"""Batch mode: analyze many traces in parallel, one report each, plus an index and a summary.

:func:`run_batch` is the library entry point behind ``traceanalyzer batch``. Work runs on a local
process pool (:mod:`.pool`) or a Dask cluster (:mod:`.dask_runner`); both call the same
:func:`.task.analyze_one` and hand back report text, which :mod:`.run` writes. Output folder::

    DIR/index.html            links to every report; failed traces with their error
    DIR/summary.parquet/.csv  one row per trace (see :mod:`.summary`)
    DIR/manifest.json         per trace: report key, report name, status, error
    DIR/reports/NAME.json     the same document as ``analyze --json``
    DIR/reports/NAME.html     the same page as ``analyze --html``

A report is up to date when its key (trace content hash + tool version + rule configuration
hash) matches the manifest's; re-runs skip those traces unless ``force``.

The work is split by stage: :mod:`.inputs` (which files), :mod:`.task` (one trace, in a worker),
:mod:`.run` (:func:`run_batch`), :mod:`.manifest` (report names and keys), :mod:`.summary`,
:mod:`.index` and :mod:`.progress`. This module re-exports the public names.
"""

from __future__ import annotations

from traceanalyzer.batch.inputs import TRACE_SUFFIXES, expand_inputs
from traceanalyzer.batch.manifest import (
    MANIFEST,
    MANIFEST_VERSION,
    REPORTS,
    read_manifest,
    report_name,
    write_manifest,
)
from traceanalyzer.batch.progress import Progress
from traceanalyzer.batch.run import BatchResult, build_summary, run_batch

__all__ = [
    "MANIFEST",
    "MANIFEST_VERSION",
    "REPORTS",
    "TRACE_SUFFIXES",
    "BatchResult",
    "Progress",
    "build_summary",
    "expand_inputs",
    "read_manifest",
    "report_name",
    "run_batch",
    "write_manifest",
]
