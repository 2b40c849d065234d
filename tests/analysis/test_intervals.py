"""Interval unions: ``merge`` against a plain Python sweep, on random frames."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from traceanalyzer.analysis import intervals


def _sweep(rows: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """(key, start, end) unions per key, touching intervals merged, backwards ones dropped."""
    out: list[tuple[int, int, int]] = []
    for key, start, end in sorted(r for r in rows if r[2] >= r[1]):
        if out and out[-1][0] == key and start <= out[-1][2]:
            out[-1] = (key, out[-1][1], max(out[-1][2], end))
        else:
            out.append((key, start, end))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_merge_is_the_union_of_each_keys_intervals(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    start = rng.integers(0, 200, n)
    frame = pl.DataFrame({"device": rng.integers(0, 3, n), "start_ns": start,
                          "end_ns": start + rng.integers(-3, 25, n)})
    rows = list(zip(*(frame[c].to_list() for c in frame.columns), strict=True))
    by_key = intervals.merge(frame, by=["device"])
    assert list(by_key.iter_rows()) == _sweep(rows)
    assert by_key.columns == ["device", "start_ns", "end_ns"]
    alone = intervals.merge(frame)
    assert list(alone.iter_rows()) == [(s, e) for _, s, e in _sweep([(0, s, e) for _, s, e in rows])]


def test_merge_of_only_backwards_intervals_is_empty():
    frame = pl.DataFrame({"start_ns": [5, 9], "end_ns": [1, 2]})
    assert intervals.merge(frame).is_empty()
