"""``diff`` on the reference workloads' bad/good pairs (real H200 traces, both profilers)."""

from __future__ import annotations

import pytest
import yaml

from tests.support.paths import REPO
from traceanalyzer.report import diff as rd
from traceanalyzer.report.jsonout import validate

SAMPLES = REPO / "sample_traces"


def _pairs():
    manifest = SAMPLES / "manifest.yaml"
    if not manifest.exists():
        return []
    traces = yaml.safe_load(manifest.read_text())["traces"]
    by = {(t["workload"], t["profiler"], t["variant"]): t for t in traces}
    return [(by[(w, p, "bad")], by[(w, p, "good")]) for (w, p, v) in sorted(by)
            if v == "bad" and (w, p, "good") in by]


@pytest.mark.slow
@pytest.mark.parametrize("bad,good", _pairs(),
                         ids=lambda t: f"{t['workload']}-{t['profiler']}" if isinstance(t, dict)
                         and t["variant"] == "bad" else "")
def test_diff_bad_good_pair(tmp_path, bad, good):
    import traceanalyzer
    from traceanalyzer.analysis import analyze_trace

    before = analyze_trace(traceanalyzer.load(SAMPLES / bad["path"], use_cache=False))
    after = analyze_trace(traceanalyzer.load(SAMPLES / good["path"], use_cache=False))
    d = rd.diff_results(before, after)
    fired_before = {f.slug for f in before.findings}
    fired_after = {f.slug for f in after.findings}
    assert {x.slug for x in d.resolved} == fired_before - fired_after
    assert {x.slug for x in d.new} == fired_after - fired_before
    assert {x.slug for x in d.unchanged} == fired_before & fired_after
    # A problem the fix removes (must fire on bad, must not on good) shows up as resolved
    # whenever the rules saw it on both sides as the manifest says.
    fixed = set(bad["must_fire"]) & set(good["must_not_fire"])
    for slug in fixed & fired_before - fired_after:
        assert slug in {x.slug for x in d.resolved}
    assert d.basis == "per step"  # every workload trace marks its steps
    k = d.kernels
    assert not k.is_empty()
    assert (k["after_ns"] - k["before_ns"] - k["delta_ns"]).abs().max() < 1e-6
    doc = rd.to_json_dict(d)
    assert validate(doc["before"], {"type": "object", "required": ["path", "format"]}) == []
    rd.write_html(d, tmp_path / "d.html")
    rd.write_markdown(d, tmp_path / "d.md")
    assert "Resolved findings" in rd.render_terminal(d)
