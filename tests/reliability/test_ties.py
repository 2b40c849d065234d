"""Traces whose keys all tie (issue 30: 400k identical kernel events ran for more than 10
minutes): every kernel and operator at one time, one correlation id or one External id, one
step number for every step. Joins on such keys must not become products: the row counts of
what the analysis builds stay linear in the events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceanalyzer import ingest
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.analysis.views import Views
from traceanalyzer.perfmodel.model import attributed_kernels

GEMM = "ampere_sgemm_128x64_nn"
A100 = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-80GB",
    "numSms": 108,
    "computeMajor": 8,
    "computeMinor": 0,
    "totalGlobalMem": 85899345920,
}


def _trace(
    tmp_path: Path,
    n: int,
    *,
    same_ts: bool = False,
    same_corr: bool = False,
    same_ext: bool = False,
    same_step: bool = False,
) -> Path:
    events = []
    for i in range(n):
        ts = 100 if same_ts else 100 + 10 * i
        corr = 1 if same_corr else i + 1
        ext = 1 if same_ext else i + 1
        events += [
            {
                "ph": "X",
                "cat": "kernel",
                "name": GEMM,
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "dur": 5,
                "args": {
                    "correlation": corr,
                    "device": 0,
                    "stream": 7,
                    "External id": ext,
                    "grid": [1, 1, 1],
                    "block": [32, 1, 1],
                },
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts - 1,
                "dur": 1,
                "args": {"correlation": corr, "External id": ext},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": ts - 2,
                "dur": 5,
                "args": {
                    "External id": ext,
                    "Input Dims": [[64, 64], [64, 64]],
                    "Input type": ["float", "float"],
                },
            },
            {
                "ph": "X",
                "cat": "user_annotation",
                "pid": 1,
                "tid": 1,
                "ts": ts - 3,
                "dur": 9,
                "name": "ProfilerStep#1" if same_step else f"ProfilerStep#{i}",
                "args": {},
            },
        ]
    path = tmp_path / f"ties-{n}.json"
    path.write_text(json.dumps({"deviceProperties": [A100], "traceEvents": events}, indent=1))
    return path


CASES = {
    "one External id": {"same_ext": True},
    "one External id, one time": {"same_ext": True, "same_ts": True},
    "one correlation id": {"same_corr": True},
    "one time": {"same_ts": True},
    "one step number": {"same_step": True, "same_ext": True},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rows_stay_linear_when_keys_tie(tmp_path: Path, case: str) -> None:
    heights = []
    for n in (500, 1500):
        trace = ingest.load(_trace(tmp_path, n, **CASES[case]), use_cache=False)
        result = analyze_trace(trace)
        kernels = attributed_kernels(Views(trace).launches, trace.cpu)
        # One row per kernel at most: operators sharing an External id made it one per
        # (kernel, operator) pair, n^2 rows (and minutes, and GB, at 400k).
        assert kernels.height <= trace.gpu.height <= n
        assert result.perf is not None and int(result.perf["kernels"].sum()) <= n
        heights.append(kernels.height)
    assert heights[1] <= 3 * max(heights[0], 1)


def test_operators_sharing_an_external_id_count_as_one_call(tmp_path: Path) -> None:
    trace = ingest.load(_trace(tmp_path, 300, same_ext=True), use_cache=False)
    kernels = attributed_kernels(Views(trace).launches, trace.cpu)
    assert kernels.height == 300
    # The one call's FLOPs (2 * 64^3), split over its 300 kernels, not counted once per operator.
    assert kernels["flops"].sum() == pytest.approx(2 * 64**3)
