"""Tests of traceanalyzer/ingest/nsys."""
