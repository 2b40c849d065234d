"""The Nsight Compute kernel pairs: importable without torch, and the kernels of the committed
reports."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from traceanalyzer.ingest.ncu import read_kernel_metrics
from traceanalyzer.workloads import ncu_kernels

REPO = Path(__file__).resolve().parents[2]
NCU = REPO / "sample_traces" / "ncu"


def test_importing_it_imports_no_torch() -> None:
    code = ("import sys; import traceanalyzer.workloads.ncu_kernels as k; "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules; print(len(k.CUDA))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=False, env={"PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 1000


def test_every_kernel_of_the_source_is_in_the_committed_reports() -> None:
    defined = set(re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(ta_\w+)\(",
                             ncu_kernels.CUDA))
    assert len(defined) == 9
    profiled = set()
    for page in ("kernels_a_raw.csv.gz", "kernels_b_raw.csv.gz", "kernels_c_raw.csv.gz"):
        profiled |= set(read_kernel_metrics(NCU / page).metrics["function"])
    assert defined <= profiled
    for bad, good in ncu_kernels.PAIRS.values():
        assert {bad, good} <= defined


def test_each_pair_names_a_kernel_rule() -> None:
    rules = {p.stem for p in (REPO / "rules").glob("*.yaml")}
    assert set(ncu_kernels.PAIRS) <= rules
