"""Tests of traceanalyzer/workloads/."""
