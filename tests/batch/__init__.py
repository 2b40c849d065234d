"""Tests of traceanalyzer/batch/."""
