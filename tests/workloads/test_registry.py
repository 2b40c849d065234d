"""Workload registry, the torch-free import contract, and the `workload` CLI (no GPU needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.paths import REPO
from traceanalyzer.cli.main import cli
from traceanalyzer.rules import builtin_slugs
from traceanalyzer.workloads import WORKLOADS, get, load_module

RUN_PY = REPO / "traceanalyzer" / "workloads" / "run.py"


def test_registry_entries_are_consistent() -> None:
    assert len(WORKLOADS) >= 10
    for name, info in WORKLOADS.items():
        assert info.name == name
        assert info.variants[:2] == ("bad", "good"), name
        assert info.rules and set(info.rules) <= set(builtin_slugs()), name
        assert set(info.torch_only_rules) <= set(info.rules), name
        assert info.min_gpus >= 1


def test_every_issue_pair_is_registered() -> None:
    expected = {"hidden_sync", "dataloader_stall", "unfused_elementwise", "launch_bound",
                "small_grid", "unfused_attention", "fp32_matmul", "odd_matmul_shape",
                "unfused_optimizer", "nccl_overlap", "gpt_step"}
    assert expected <= set(WORKLOADS)
    assert WORKLOADS["nccl_overlap"].min_gpus >= 2
    assert WORKLOADS["rank_imbalance"].min_gpus >= 2
    assert "compile" in WORKLOADS["unfused_elementwise"].variants


def test_get_unknown_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="hidden_sync"):
        get("no_such_workload")


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_module_builds_and_rejects_unknown_variant_before_touching_torch(name: str) -> None:
    mod = load_module(name)
    assert callable(mod.build)
    with pytest.raises(ValueError, match="unknown variant"):
        mod.build("no-such-variant")


def _run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_importing_the_workloads_never_imports_torch() -> None:
    res = _run_isolated(
        "import sys, traceanalyzer.workloads as w\n"
        "for n in w.WORKLOADS: w.load_module(n)\n"
        "import traceanalyzer.workloads.run, traceanalyzer.workloads.manifest\n"
        "import traceanalyzer.workloads.check\n"
        "import traceanalyzer.cli.workload\n"
        "bad = [m for m in ('torch', 'triton') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    assert res.returncode == 0, res.stderr


def test_runner_by_path_needs_nothing_of_traceanalyzer() -> None:
    """The GPU machine has torch but no polars: run.py by path must not import the package."""
    res = _run_isolated(
        "import runpy, sys\n"
        f"sys.argv = [{str(RUN_PY)!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_path({str(RUN_PY)!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "bad = [m for m in ('traceanalyzer', 'polars', 'torch') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "assert 'workloads.hidden_sync' not in sys.modules\n"
    )
    assert res.returncode == 0, res.stderr
    assert "--profiler" in res.stdout


def test_cli_workload_list_shows_every_workload_and_rule() -> None:
    res = CliRunner().invoke(cli, ["workload", "list"])
    assert res.exit_code == 0, res.output
    for name, info in WORKLOADS.items():
        assert name in res.output
        for rule in info.rules:
            assert rule in res.output
    assert "2+ GPUs" in res.output


def test_cli_workload_run_rejects_unknown_name_and_variant() -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["workload", "run", "nope"])
    assert res.exit_code == 2 and "hidden_sync" in res.output
    res = runner.invoke(cli, ["workload", "run", "hidden_sync", "--variant", "compile"])
    assert res.exit_code == 2 and "bad, good" in res.output


def test_cli_workload_run_without_gpu_is_one_clean_error(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: this checks the no-GPU message")
    res = CliRunner().invoke(cli, ["workload", "run", "hidden_sync", "--out", str(tmp_path)])
    assert res.exit_code != 0
    assert "GPU" in res.output and "Traceback" not in res.output
