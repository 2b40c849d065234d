"""Tests of the ingest layer (traceanalyzer/ingest), a folder per format."""
