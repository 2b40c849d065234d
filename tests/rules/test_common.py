"""The detectors' shared lookups give what the joins they replace gave."""

from __future__ import annotations

import polars as pl
import pytest

from tests.support.paths import SAMPLES
from traceanalyzer.analysis.views import Views
from traceanalyzer.ingest import read_any
from traceanalyzer.rules.detectors._common import kernels_of, op_inputs, with_inputs


@pytest.mark.parametrize("trace", ["torch/gpt_step_bad.json.gz", "nsys/gpt_step_bad.sqlite"])
def test_with_inputs_is_the_left_join_on_rank_and_external_id(trace):
    views = Views(read_any(SAMPLES / trace))
    kernels = kernels_of(views)
    assert kernels_of(views) is kernels  # computed once per views
    columns = {"_numel": "numel", "_dims": "input_dims"}
    got = with_inputs(views, kernels, columns)
    right = op_inputs(views).select("rank", "external_id", _numel="numel", _dims="input_dims")
    want = kernels.join(right, on=["rank", "external_id"], how="left", maintain_order="left")
    assert got.equals(want)
    if trace.startswith("torch"):
        assert got["_numel"].null_count() < got.height  # shapes were found


def test_with_inputs_on_another_key_and_with_no_match():
    views = Views(read_any(SAMPLES / "torch/gpt_step_bad.json.gz"))
    ids = op_inputs(views)["external_id"]
    frame = pl.DataFrame({"rank": pl.Series([0, 0, 0], dtype=pl.Int32),
                          "_ext": [int(ids[0]), None, -7]})
    got = with_inputs(views, frame, {"ndim": "ndim"}, on="_ext")
    assert got["ndim"][0] == op_inputs(views)["ndim"][0]
    assert got["ndim"][1:].to_list() == [None, None]
