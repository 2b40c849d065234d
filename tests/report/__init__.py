"""Tests of traceanalyzer/report/."""
