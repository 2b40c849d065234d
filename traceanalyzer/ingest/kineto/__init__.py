"""Kineto / Chrome JSON traces: :func:`read_kineto` (the pipeline is described in :mod:`.reader`)."""

from traceanalyzer.ingest.kineto.reader import read_kineto

__all__ = ["read_kineto"]
