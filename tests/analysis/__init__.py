"""Tests of traceanalyzer/analysis/."""
