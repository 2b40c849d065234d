"""Tests of traceanalyzer/ingest/perfetto."""
