"""Tests of the bench/ scripts."""
