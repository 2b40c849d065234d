"""The rules judge every rank of a file that holds several (an Nsight Systems export of several
processes), not only the headline rank: real H200 and public two-process exports."""

from __future__ import annotations

import pytest

from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.analysis.views import Views
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import read_any
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.terminal import render_summary

#: Two processes on one H200 in one capture (scripts/recordings/two_processes.py): rank 0 trains
#: an FP32 MLP, rank 1 mostly copies 128 MiB batches from pageable host memory.
TWO_PROCESSES = SAMPLES / "programs" / "nsys" / "two_processes_copy_rank.sqlite.gz"
SENDRECV = PUBLIC / "nsys" / "nsysai_2gpu_sendrecv_before.sqlite"


@pytest.fixture(scope="module")
def two_processes():
    return analyze_trace(choose_window(read_any(TWO_PROCESSES)))


def fired(result, slug):
    return {f.rank for f in result.findings if f.slug == slug}


def test_a_rule_that_fires_only_on_the_second_rank_is_reported(two_processes):
    r = two_processes
    assert r.metrics.rank == 0
    # The copy-bound process is rank 1: before the rules judged every rank, nothing said so.
    assert fired(r, "memcpy-bound") == {1}
    assert fired(r, "pageable-memcpy") == {1}
    assert fired(r, "fp32-matmul") == {0}
    # The start-up the window measured is the headline rank's: told once, not per rank.
    assert fired(r, "startup-time") == {0}
    memcpy = next(f for f in r.findings if f.slug == "memcpy-bound")
    assert memcpy.severity == "critical" and memcpy.impact_pct > 80
    # Its share is of rank 1's own GPU span, not the headline's.
    assert memcpy.impact_ns <= r.ranks.filter(r.ranks["rank"] == 1)["span_ns"][0]
    outcome = next(o for o in r.rule_outcomes if o.slug == "memcpy-bound")
    assert outcome.status == "fired" and outcome.reason.startswith("rank 1: ")


def test_reports_name_each_findings_rank(two_processes):
    text = render_summary(two_processes)
    assert "memcpy-bound (rank 1):" in text and "fp32-matmul (rank 0):" in text
    assert "the rules judge each rank" in text
    md = render_markdown(two_processes)
    assert "(rank 1)" in md and "the rules judge each rank" in md


def test_the_window_sentence_says_which_time_is_the_other_ranks(two_processes):
    # The two processes ran at different times; the window holds both, and the part before
    # the headline rank's first step is the other rank's, not a warm-up step's GPU work.
    text = two_processes.meta.extra["window"]["description"]
    assert "before this rank's first step, from the other ranks' first steps" in text
    assert "whose GPU work (left out) still ran" not in text


def test_other_ranks_share_the_views_of_every_rank(two_processes):
    views = Views(choose_window(read_any(TWO_PROCESSES)))
    launches = views.launches
    other = views.for_rank(1)
    assert other.launches is launches  # not rebuilt
    assert other.metrics.rank == 1 and views.metrics.rank == 0


@pytest.mark.skipif(not SENDRECV.exists(), reason="public traces not available")
def test_a_rule_on_both_ranks_is_listed_once_with_the_other_rank():
    r = analyze_trace(choose_window(read_any(SENDRECV)))
    assert fired(r, "unfused-elementwise-chain") == {0, 1}
    text = render_summary(r)
    assert text.count("] unfused-elementwise-chain") == 1
    assert "also on rank 1: " in text


def test_a_file_of_hundreds_of_ranks_has_the_busiest_judged_and_says_so(monkeypatch):
    # An export of many processes (a server's workers): the rules judge a bounded number of
    # ranks, the headline and the busiest, and the report says how many were left out.
    from tests.support.synth import Synth, busy_loop
    from traceanalyzer.rules import engine

    monkeypatch.setattr(engine, "MAX_JUDGED_RANKS", 4)
    s = Synth()
    busy_loop(s, n=60)
    for i, row in enumerate(s.gpu):
        row["rank"] = i % 6
    for rank in (3, 4, 5):  # one long kernel each: the three busiest ranks
        s.kernel("gemm_bf16", 100_000 * rank, 5000, launch=100_000 * rank - 10)
        s.gpu[-1]["rank"] = rank
    trace = s.trace()
    assert engine.judged_ranks(Views(trace)) == [0, 3, 4, 5]  # headline 0 + the 3 busiest
    result = analyze_trace(trace)
    assert {f.rank for f in result.findings} <= {0, 3, 4, 5}
    assert any("the rules judged 4 of the file's 6 ranks" in w for w in result.meta.warnings)
    assert not any("the rules judged" in w for w in trace.meta.warnings)  # the input untouched
