"""Tests of the rules: one module per built-in rule (test_<slug>.py), the engine, and the rules
on real traces (the reference workloads, the held-out programs, public traces)."""
