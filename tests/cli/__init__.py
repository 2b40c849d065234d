"""Tests of traceanalyzer/cli/."""
