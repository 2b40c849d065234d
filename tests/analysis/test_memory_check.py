"""The analysis stops before it runs out of memory: a one-line message and exit code 2, with the
ingest's override (issue 28). Available memory is patched; nothing big is allocated."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.synth import Synth, busy_loop
from traceanalyzer.analysis import analyze_trace, memory_check
from traceanalyzer.cli.main import main
from traceanalyzer.errors import EXIT_BAD_INPUT, InputError
from traceanalyzer.ingest import NO_MEMORY_CHECK_ENV

SAMPLE = REPO / "sample_traces" / "torch" / "unfused_attention_bad.json.gz"


def _trace():
    s = Synth()
    busy_loop(s, n=50)
    return s.trace()


def test_need_grows_with_the_frames() -> None:
    small, big = Synth(), Synth()
    busy_loop(small, n=10)
    busy_loop(big, n=1000)
    need_small = memory_check.analysis_memory(small.trace())
    need_big = memory_check.analysis_memory(big.trace())
    assert memory_check.ANALYSIS_BASE_MEMORY < need_small < need_big
    size = memory_check.frames_size(big.trace())
    assert need_big == memory_check.ANALYSIS_BASE_MEMORY + int(
        size * memory_check.ANALYSIS_MEMORY_PER_BYTE)


def test_shared_texts_are_counted_once() -> None:
    """A text column whose rows share a few long texts (kernel names) holds 16-byte views and
    one copy of each text: that is what the check counts, not each row's text."""
    import polars as pl

    from traceanalyzer.model import Trace, TraceMeta, empty_frame

    names = pl.Series("name", ["void gemm_kernel<" + "x" * 200 + f">{i}" for i in range(4)])
    rows = 200_000
    column = names.gather(pl.Series([i % 4 for i in range(rows)], dtype=pl.UInt32))
    gpu = pl.DataFrame({"name": column})
    trace = Trace(meta=TraceMeta(path="x", source_format="kineto"), gpu=gpu, cpu=empty_frame("cpu"),
                  annotations=empty_frame("annotations"), syncs=empty_frame("syncs"),
                  counters=empty_frame("counters"), memory=empty_frame("memory"))
    held = memory_check.frames_size(trace)
    assert 16 * rows <= held < 20 * rows + 4096
    assert gpu["name"].estimated_size() > 100 * rows  # what Polars's estimate would count
    # An all-null text column has no views yet: it holds nothing.
    assert memory_check.frames_size(Trace(
        meta=TraceMeta(path="x", source_format="kineto"), gpu=pl.DataFrame({"name": pl.Series([None] * rows,
                                                                      dtype=pl.String)}),
        cpu=empty_frame("cpu"), annotations=empty_frame("annotations"),
        syncs=empty_frame("syncs"), counters=empty_frame("counters"),
        memory=empty_frame("memory"))) == 0


def test_too_little_memory_stops_before_the_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace()
    need = memory_check.analysis_memory(trace)
    monkeypatch.delenv(NO_MEMORY_CHECK_ENV, raising=False)
    monkeypatch.setattr(memory_check, "available_memory", lambda: need - 1)
    with pytest.raises(InputError) as exc:
        analyze_trace(trace)
    message = str(exc.value)
    assert "\n" not in message and message.startswith("synthetic: ")
    assert "GiB" in message and "--steps" in message and NO_MEMORY_CHECK_ENV in message
    monkeypatch.setattr(memory_check, "available_memory", lambda: need)
    assert analyze_trace(trace).findings is not None


def test_override_and_unknown_memory_let_it_run(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace()
    monkeypatch.setattr(memory_check, "available_memory", lambda: 1)
    monkeypatch.setenv(NO_MEMORY_CHECK_ENV, "1")
    memory_check.check_analysis_memory(trace)
    monkeypatch.delenv(NO_MEMORY_CHECK_ENV)
    monkeypatch.setattr(memory_check, "available_memory", lambda: None)  # no /proc/meminfo
    memory_check.check_analysis_memory(trace)


def test_cli_says_it_in_one_line_and_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(NO_MEMORY_CHECK_ENV, raising=False)
    # the ingest's own check still sees the real figure; only the analysis's sees too little
    monkeypatch.setattr(memory_check, "available_memory", lambda: 64 << 20)
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(SAMPLE), "--no-cache", "--json", str(out)])
    assert exc.value.code == EXIT_BAD_INPUT
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(SAMPLE) in line and "memory to analyze" in line and NO_MEMORY_CHECK_ENV in line
    assert not out.exists()


def test_the_window_of_the_whole_trace_is_checked_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default window builds views of the whole trace: too little memory for them stops the
    run before they are built; a selection (the message's way out) is applied first."""
    from traceanalyzer.analysis import result_cache, window
    from traceanalyzer.analysis.window import Selection

    def no_window(*args: object, **kwargs: object) -> None:
        raise AssertionError("the window was computed before the memory check")

    monkeypatch.delenv(NO_MEMORY_CHECK_ENV, raising=False)
    monkeypatch.setattr(memory_check, "available_memory", lambda: 1)
    monkeypatch.setattr(window, "choose_window", no_window)
    with pytest.raises(InputError):
        result_cache.analyze_path(SAMPLE, use_cache=False)
    with pytest.raises(AssertionError):  # a selection goes to the window first
        result_cache.analyze_path(SAMPLE, use_cache=False, selection=Selection(ranks=frozenset({0})))
