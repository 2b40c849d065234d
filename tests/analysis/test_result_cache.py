"""The analysis result cache: a re-run serves the stored result, byte for byte, and anything that
can change the result (trace, rules, parameters, selection, code) makes it compute again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceanalyzer.analysis as analysis
from tests.support.paths import SAMPLES
from traceanalyzer.analysis import result_cache
from traceanalyzer.analysis.result_cache import (
    RESULTS_DIR,
    analyze_path,
    load_result,
    result_key,
    store_result,
)
from traceanalyzer.analysis.window import Selection
from traceanalyzer.cli.main import cli
from traceanalyzer.findings import Finding

TRACE = SAMPLES / "torch" / "gpt_step_bad.json.gz"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    if not TRACE.is_file():
        pytest.skip("sample trace missing")
    dst = tmp_path / "trace.json.gz"
    dst.write_bytes(TRACE.read_bytes())
    return dst


@pytest.fixture
def count_analyses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of analyze_trace (a cache hit makes none)."""
    calls: list[int] = []
    real = analysis.analyze_trace

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis, "analyze_trace", counting)
    return calls


def analyze(trace: Path, out: Path, *extra: str, cache: Path | None = None) -> tuple[str, dict]:
    """Run ``analyze`` in-process; return stdout (without the 'wrote' lines) and the outputs."""
    out.mkdir(exist_ok=True)
    args = ["analyze", str(trace), "--json", str(out / "r.json"), "--html", str(out / "r.html"),
            "--markdown", str(out / "r.md"), *extra]
    if cache is not None:
        args += ["--cache-dir", str(cache)]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output
    text = "\n".join(line for line in res.output.splitlines() if not line.startswith("wrote "))
    return text, {name: (out / name).read_bytes() for name in ("r.json", "r.html", "r.md")}


def entries(cache: Path) -> list[Path]:
    folder = cache / RESULTS_DIR
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() \
        else []


def test_cached_rerun_is_byte_identical(tmp_path, trace, count_analyses):
    cache = tmp_path / "cache"
    first = analyze(trace, tmp_path / "a", cache=cache)
    assert len(count_analyses) == 1 and len(entries(cache)) == 1
    second = analyze(trace, tmp_path / "b", cache=cache)
    assert len(count_analyses) == 1, "the second run analyzed again instead of using the cache"
    assert second == first  # terminal summary, JSON, HTML and Markdown
    doc = json.loads(first[1]["r.json"])
    assert doc["findings"], "the sample should fire rules, so findings are exercised"
    assert '"windows"' in first[1]["r.html"].decode()  # the timeline came from the cache too


def test_no_cache_bypasses(tmp_path, trace, count_analyses):
    cache = tmp_path / "cache"
    analyze(trace, tmp_path / "a", cache=cache)
    analyze(trace, tmp_path / "b", "--no-cache", cache=cache)
    assert len(count_analyses) == 2
    assert len(entries(cache)) == 1  # --no-cache neither reads nor writes entries


def test_no_cache_draws_the_same_report(tmp_path, trace, count_analyses):
    """Without a cache entry to store it in, the timeline is not computed ahead: the HTML report
    draws it from the trace, and the reports are the same as through the cache."""
    assert analyze_path(trace, use_cache=False).timeline is None
    cached = analyze(trace, tmp_path / "a", cache=tmp_path / "cache")
    uncached = analyze(trace, tmp_path / "b", "--no-cache", cache=tmp_path / "cache")
    assert uncached == cached
    assert '"windows"' in uncached[1]["r.html"].decode()


@pytest.mark.parametrize("extra", [
    ("--set", "gpu-idle-gaps.min_gap_us=5"),
    ("--disable", "gpu-idle-gaps"),
    ("--no-rules",),
    ("--steps", "3"),
    ("--ranks", "0"),
    ("--time-window", "0:50ms"),
])
def test_options_that_change_the_result_invalidate(tmp_path, trace, count_analyses, extra):
    cache = tmp_path / "cache"
    analyze(trace, tmp_path / "a", cache=cache)
    analyze(trace, tmp_path / "b", *extra, cache=cache)
    assert len(count_analyses) == 2
    analyze(trace, tmp_path / "c", *extra, cache=cache)  # and that setting has its own entry
    assert len(count_analyses) == 2 and len(entries(cache)) == 2


def test_output_only_options_reuse_the_entry(tmp_path, trace, count_analyses):
    cache = tmp_path / "cache"
    analyze(trace, tmp_path / "a", cache=cache)
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--cache-dir", str(cache), "--top", "2",
                                   "--fail-on", "info"])
    assert res.exit_code == 1  # --fail-on is applied to the cached findings
    assert "Top 2 kernels" in res.output
    assert len(count_analyses) == 1


def test_editing_a_rule_file_invalidates(tmp_path, trace, count_analyses):
    from traceanalyzer.rules.loader import builtin_rules_dir

    rules = tmp_path / "rules"
    rules.mkdir()
    rule = rules / "fp32-matmul.yaml"  # same slug: replaces the built-in rule
    rule.write_text((builtin_rules_dir() / "fp32-matmul.yaml").read_text())
    cache = tmp_path / "cache"
    analyze(trace, tmp_path / "a", "--rules", str(rules), cache=cache)
    analyze(trace, tmp_path / "b", "--rules", str(rules), cache=cache)
    assert len(count_analyses) == 1
    text = rule.read_text()
    assert "title: Matrix multiplies" in text
    rule.write_text(text.replace("title: Matrix", "title: Edited matrix", 1))
    _, outputs = analyze(trace, tmp_path / "c", "--rules", str(rules), cache=cache)
    assert len(count_analyses) == 2
    assert b"Edited matrix" in outputs["r.json"]


def test_changed_trace_invalidates(tmp_path, trace, count_analyses):
    from tests.support.kineto_builder import KinetoBuilder

    cache = tmp_path / "cache"
    analyze(trace, tmp_path / "a", cache=cache)
    other = KinetoBuilder()
    other.launch("k", 0, 5, 10, 20)
    trace.unlink()
    other.write(trace)
    analyze(trace, tmp_path / "b", cache=cache)
    assert len(count_analyses) == 2


def test_key_covers_code_and_selection(monkeypatch):
    base = result_key("c", rules=False, rule_config=None)
    assert result_key("c", rules=False, rule_config=None) == base
    assert result_key("d", rules=False, rule_config=None) != base
    assert result_key("c", rules=False, rule_config=None, selection=Selection()) == base
    assert result_key("c", rules=False, rule_config=None,
                      selection=Selection(steps=(1, 2))) != base
    assert result_key("c", rules=False, rule_config=None,
                      selection=Selection(ranks=frozenset({1}))) != base
    monkeypatch.setattr(result_cache, "code_hash", lambda: "edited detector")
    assert result_key("c", rules=False, rule_config=None) != base


def test_code_hash_reads_the_package_source():
    from traceanalyzer.analysis import result_cache as rc

    rc.code_hash.cache_clear()
    first = rc.code_hash()
    assert first == rc.code_hash() and len(first) == 32
    # The hashed tree is the package folder itself, so an edited detector changes the key.
    package = Path(rc.__file__).resolve().parents[1]
    assert (package / "rules" / "detectors" / "small_grid.py").is_file()


@pytest.mark.parametrize("damage", ["truncate-json", "garbage-json", "truncate-frame",
                                    "delete-frame", "wrong-types"])
def test_damaged_entry_is_recomputed(tmp_path, trace, count_analyses, damage):
    cache = tmp_path / "cache"
    first = analyze(trace, tmp_path / "a", cache=cache)
    (entry,) = entries(cache)
    doc = entry / "result.json"
    if damage == "truncate-json":
        doc.write_bytes(doc.read_bytes()[:100])
    elif damage == "garbage-json":
        doc.write_bytes(b"\x00\xff not json")
    elif damage == "truncate-frame":
        frame = entry / "kernels.arrow"
        frame.write_bytes(frame.read_bytes()[:50])
    elif damage == "delete-frame":
        (entry / "steps.arrow").unlink()
    else:
        data = json.loads(doc.read_text())
        data["metrics"] = {"no_such_field": 1}
        doc.write_text(json.dumps(data))
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--cache-dir", str(cache), "--json",
                                   str(tmp_path / "again.json")])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    assert len(count_analyses) == 2  # computed again
    assert (tmp_path / "again.json").read_bytes() == first[1]["r.json"]
    assert len(entries(cache)) == 1  # and stored again, whole
    analyze(trace, tmp_path / "b", cache=cache)
    assert len(count_analyses) == 2


def test_damaged_entry_subprocess_one_clean_run(tmp_path, trace):
    """As a user runs it: no traceback, same report."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    cmd = [sys.executable, "-m", "traceanalyzer", "analyze", str(trace), "--cache-dir", str(cache),
           "--json"]
    subprocess.run([*cmd, str(tmp_path / "1.json")], check=True, capture_output=True)
    (entry,) = entries(cache)
    (entry / "result.json").write_text("{")
    out = subprocess.run([*cmd, str(tmp_path / "2.json")], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert (tmp_path / "1.json").read_bytes() == (tmp_path / "2.json").read_bytes()


def test_result_that_does_not_round_trip_is_not_stored(tmp_path, trace):
    done = analyze_path(trace, use_cache=False)
    result = done.result
    result.findings = [Finding("s", "TA999", "low", "t", "m", "f", 1, 0.1,
                               evidence=[{"shape": (1, 2)}])]  # a tuple comes back as a list
    entry = tmp_path / "entry"
    assert not store_result(entry, result, done.timeline, trace)
    assert not entry.exists()
    result.findings = []
    assert store_result(entry, result, done.timeline, trace)
    loaded, timeline = load_result(entry, trace)
    assert timeline == done.timeline
    assert loaded.metrics == result.metrics
    assert loaded.kernels.equals(result.kernels)


def test_same_content_under_another_name(tmp_path, trace, count_analyses):
    cache = tmp_path / "cache"
    analyze(trace, tmp_path / "a", cache=cache)
    copy = tmp_path / "copy.json.gz"
    copy.write_bytes(trace.read_bytes())
    _, outputs = analyze(copy, tmp_path / "b", cache=cache)
    assert len(count_analyses) == 1
    assert json.loads(outputs["r.json"])["trace"]["path"] == str(copy)


def test_unwritable_cache_still_analyzes(tmp_path, trace, count_analyses):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder of the cache path should be")
    cache = blocker / "cache"
    text, outputs = analyze(trace, tmp_path / "a", cache=cache)
    assert json.loads(outputs["r.json"])["findings"]


def test_annotate_on_a_cached_run(tmp_path, trace, count_analyses):
    """--annotate needs the trace's events: a cache hit still loads them (from Parquet)."""
    cache = tmp_path / "cache"
    outs = []
    for i in range(2):
        out = tmp_path / f"annotated{i}.json"
        res = CliRunner().invoke(cli, ["analyze", str(trace), "--cache-dir", str(cache),
                                       "--annotate", str(out)], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        outs.append(out.read_bytes())
    assert len(count_analyses) == 1
    assert outs[0] == outs[1] and len(outs[0]) > 1000
