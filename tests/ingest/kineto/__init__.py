"""Tests of traceanalyzer/ingest/kineto."""
