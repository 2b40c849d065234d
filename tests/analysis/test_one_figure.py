"""One figure, one number (issue 37, item 7): on real two-rank traces the exposed transfer is the
same number in the headline's metrics, the rule nccl-not-overlapped, the job view and
``batch --job``; the headline's whole-collective "exposed" is a different figure, labelled so.

The figures are defined in docs/metrics.md and computed once (analysis.comm.exposed_by_rank,
through Views.exposed_comm)."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer import analyze
from traceanalyzer.analysis.job import analyze_job, load_job
from traceanalyzer.analysis.window import choose_window, parse_window
from traceanalyzer.batch.run import run_batch
from traceanalyzer.report.terminal import render_job
from traceanalyzer.rules.loader import RuleConfig

NSYS_2GPU = PUBLIC / "nsys" / "nsysai_2gpu_sendrecv_before.sqlite"  # one export, two ranks
DDP = [SAMPLES / "holdout" / "torch" / f"ddp_gpt_train_rank{r}.json.gz" for r in (0, 1)]
HTA_V100 = PUBLIC / "kineto" / "hta_v100_rank_of2_test.json.gz"  # rank 1 of 2, alone

#: The rule fires at any exposure, so that its figure can be read.
ALWAYS = RuleConfig(overrides={"nccl-not-overlapped": {"min_exposed_pct": 0}})


def _rule_exposed_ns(result) -> int | None:
    for f in result.findings:
        if f.slug == "nccl-not-overlapped":
            return f.impact_ns
    return None


def _job(paths):
    """The job as ``traceanalyzer job`` sees it: over the default window, as analyze."""
    trace = choose_window(load_job(paths, use_cache=False), parse_window("steps"))
    return analyze_job(trace, rules=False)


def _batch_job_ranks(paths, out) -> dict[int, dict]:
    run_batch([str(p) for p in paths], out, workers=1, use_cache=False, rules=False, job=True)
    doc = json.loads((out / "job.json").read_text())
    return {r["rank"]: r for r in doc["ranks"]}


@pytest.mark.skipif(not NSYS_2GPU.exists(), reason="public traces absent")
def test_a_file_of_both_ranks_gives_one_exposed_transfer_everywhere(tmp_path):
    result = analyze(NSYS_2GPU, rule_config=ALWAYS, use_cache=False)
    m = result.metrics
    assert m.exposed_transfer_basis == "ranks"
    assert m.exposed_transfer_ns is not None and 0 < m.exposed_transfer_ns < m.exposed_communication_ns
    assert _rule_exposed_ns(result) == m.exposed_transfer_ns
    job = _job([NSYS_2GPU])
    ranks = {r["rank"]: r for r in job.ranks.to_dicts()}
    assert ranks[m.rank]["exposed_comm_ns"] == m.exposed_transfer_ns
    assert ranks[m.rank]["comm_wait_ns"] == m.comm_wait_ns
    # The headline's whole-collective figure is the job's exposed_communication_ns too.
    assert ranks[m.rank]["exposed_communication_ns"] == m.exposed_communication_ns
    batch = _batch_job_ranks([NSYS_2GPU], tmp_path / "out")
    assert batch[m.rank]["exposed_comm_ns"] == m.exposed_transfer_ns
    assert batch[m.rank]["exposed_communication_ns"] == m.exposed_communication_ns
    # The job's table names the figure as the headline does, and not "exposed comm".
    text = render_job(job)
    assert "exposed transfer" in text and "exposed comm " not in text
    assert "the trace marks no steps" not in text  # its steps are inferred, not absent


@pytest.mark.skipif(not all(p.exists() for p in DDP), reason="holdout traces absent")
def test_per_rank_files_agree_between_job_and_batch_and_analyze_says_its_basis(tmp_path):
    job = _job(DDP)
    ranks = {r["rank"]: r for r in job.ranks.to_dicts()}
    batch = _batch_job_ranks(DDP, tmp_path / "out")
    for rank, row in ranks.items():
        assert batch[rank]["exposed_comm_ns"] == row["exposed_comm_ns"]
        assert batch[rank]["comm_wait_ns"] == row["comm_wait_ns"]
        assert batch[rank]["exposed_communication_ns"] == row["exposed_communication_ns"]
    alone = analyze(DDP[0], rule_config=ALWAYS, use_cache=False)
    m = alone.metrics
    # Alone, the rank's wait is estimated from its own steps: a labelled variant of the job's.
    assert m.exposed_transfer_basis == "steps"
    assert _rule_exposed_ns(alone) == m.exposed_transfer_ns
    assert m.exposed_communication_ns == ranks[0]["exposed_communication_ns"]
    assert m.exposed_transfer_ns >= ranks[0]["exposed_comm_ns"]  # other ranks bound it lower


@pytest.mark.skipif(not HTA_V100.exists(), reason="public traces absent")
def test_the_rule_and_the_headline_print_the_same_exposed_transfer():
    from traceanalyzer.report.terminal import render_summary

    result = analyze(HTA_V100, use_cache=False)
    m = result.metrics
    finding = next(f for f in result.findings if f.slug == "nccl-not-overlapped")
    assert finding.impact_ns == m.exposed_transfer_ns
    shown = f"{m.exposed_transfer_ns / 1e6:.1f} ms"
    assert finding.message.split(": ", 1)[1].startswith(shown + " of collective transfers")
    text = render_summary(result)
    line = next(ln for ln in text.splitlines() if ln.lstrip().startswith("exposed transfer"))
    from traceanalyzer.report._common import fmt_ns

    assert fmt_ns(m.exposed_transfer_ns) in line  # the one duration formatter of the reports
    # collective-wait did not fire here: the message does not send the reader to it.
    assert not any(f.slug == "collective-wait" for f in result.findings)
    assert "see collective-wait" not in finding.message
