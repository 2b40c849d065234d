import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import REPO
from tests.support.report_fixtures import make_result, make_trace
from traceanalyzer.errors import InputError, UsageError
from traceanalyzer.report import annotate
from traceanalyzer.report.annotate import (
    FINDINGS_PID,
    FINDINGS_PROCESS,
    findings_events,
    ns_to_us,
    write_annotated,
)

PUBLIC = REPO.parent / "shared" / "traces" / "public"

EV = ('{"name": "k\\"]}[{", "ph": "X", "pid": 0, "tid": 7, "ts": 1700000000001000.5, '
      '"dur": 100, "args": {"s": "traceEvents\\": [", "b": "\\\\"}}')


def _docs():
    ev = json.loads(EV)
    return {
        "object": '{"schemaVersion": 1, "deviceProperties": [{"id": 0}], "x": "\\"traceEvents\\": [",'
                  ' "traceEvents": [\n' + EV + ',\n' + EV + '\n],\n "traceName": "a]b",'
                  ' "displayTimeUnit": "ms", "other": [1, [2]]}\n',
        "first": '{"traceEvents":[' + EV + "]}",
        "array": "[" + EV + ", " + EV + "]",
        "array_unclosed": "[" + EV + ", " + EV + ",\n",
        "empty": '{"traceEvents": [  ], "z": 1}',
        "truncated": '{"traceEvents": [' + EV + ", " + EV[:40],
    }, ev


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("kind", ["object", "first", "array", "array_unclosed", "empty",
                                  "truncated"])
def test_splice_is_valid_json_with_original_events(tmp_path, monkeypatch, chunk, kind):
    monkeypatch.setattr(annotate, "CHUNK_BYTES", chunk)
    docs, ev = _docs()
    src = tmp_path / "t.json"
    src.write_text(docs[kind])
    trace = make_trace(path=str(src))
    result = make_result(trace)
    out = tmp_path / "out.json"
    write_annotated(src, trace, result, out)
    doc = json.loads(out.read_text())
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    ours = [e for e in events if e.get("pid") == FINDINGS_PID]
    theirs = [e for e in events if e.get("pid") != FINDINGS_PID]
    expected = {"object": 2, "first": 1, "array": 2, "array_unclosed": 2, "empty": 0,
                "truncated": 1}[kind]
    assert theirs == [ev] * expected
    assert any(e["ph"] == "M" and e["args"].get("name") == FINDINGS_PROCESS for e in ours)
    assert sum(e["ph"] == "X" for e in ours) == 3  # evidence rows with times in the fixture
    if kind == "object":
        assert doc["traceName"] == "a]b" and doc["other"] == [1, [2]]
        # Everything before the splice point is the original, byte for byte.
        text = out.read_text()
        assert text.startswith(docs[kind].split("\n],")[0])
        assert text.endswith('],\n "traceName": "a]b", "displayTimeUnit": "ms", '
                             '"other": [1, [2]]}\n')


def test_finding_times_convert_back_exactly(tmp_path):
    trace = make_trace()
    result = make_result(trace)
    f = max(result.findings, key=lambda f: f.impact_ns)
    row = f.evidence[0]
    events = [json.loads(e) for e in findings_events(result.findings)]
    x = [e for e in events if e["ph"] == "X" and e["args"]["evidence"] == row][0]
    text = [e for e in findings_events(result.findings) if b'"ph": "X"' in e][0].decode()
    assert f'"ts": {ns_to_us(row["start_ns"])}' in text
    assert round(x["ts"] * 1000) == row["start_ns"]
    assert x["name"].startswith(f.rule_id)
    assert ns_to_us(1_700_000_000_001_234) == "1700000000001.234"
    assert ns_to_us(5000) == "5" and ns_to_us(-1500) == "-1.500"


def test_overlapping_evidence_goes_to_separate_lanes():
    from traceanalyzer.findings import Finding

    f = Finding("s", "TA9", "low", "t", "m", "fix", 1, 0.1,
                evidence=[{"start_ns": 0, "end_ns": 100}, {"start_ns": 50, "end_ns": 150},
                          {"start_ns": 100, "end_ns": 120}])
    xs = [json.loads(e) for e in findings_events([f])]
    tids = {(e["ts"], e["tid"]) for e in xs if e["ph"] == "X"}
    assert len({t for _, t in tids}) == 2
    names = [e["args"]["name"] for e in xs if e["name"] == "thread_name"]
    assert names == ["TA9 s", "TA9 s (2)"]


def test_gzip_in_and_out(tmp_path):
    docs, ev = _docs()
    src = tmp_path / "t.json.gz"
    src.write_bytes(gzip.compress(docs["object"].encode()))
    trace = make_trace(path=str(src))
    out = tmp_path / "annotated.json.gz"
    write_annotated(src, trace, make_result(trace), out)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert sum(e.get("pid") == FINDINGS_PID for e in doc["traceEvents"]) > 3


def test_refuses_to_overwrite_input(tmp_path):
    docs, _ = _docs()
    src = tmp_path / "t.json"
    src.write_text(docs["object"])
    trace = make_trace(path=str(src))
    with pytest.raises(UsageError):
        write_annotated(src, trace, make_result(trace), tmp_path / "." / "t.json")
    assert src.read_text() == docs["object"]


def test_no_event_array_is_input_error_and_leaves_nothing(tmp_path):
    src = tmp_path / "t.json"
    src.write_text('{"schemaVersion": 1, "events": []}')
    trace = make_trace(path=str(src))
    out = tmp_path / "o.json"
    with pytest.raises(InputError):
        write_annotated(src, trace, make_result(trace), out)
    assert not out.exists() and not list(tmp_path.glob(".*tmp"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hta_ns_resolution.json.gz", "tracelens_h100_qwen_0p5b.json.gz",
                                  "tracelens_torch_compile_triton.json.gz"])
def test_real_kineto_annotate_round_trip(tmp_path, name):
    import traceanalyzer
    from traceanalyzer.analysis import analyze_trace

    src = PUBLIC / "kineto" / name
    if not src.exists():
        pytest.skip("public traces not present")
    trace = traceanalyzer.load(src, use_cache=False)
    result = analyze_trace(trace)
    out = tmp_path / "annotated.json"
    write_annotated(src, trace, result, out)
    original = json.loads(gzip.decompress(src.read_bytes()))
    doc = json.loads(out.read_bytes())
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == \
        {k: v for k, v in original.items() if k != "traceEvents"}
    ours = [e for e in doc["traceEvents"] if e.get("pid") == FINDINGS_PID]
    assert doc["traceEvents"][: len(original["traceEvents"])] == original["traceEvents"]
    assert len(doc["traceEvents"]) == len(original["traceEvents"]) + len(ours)
    # The annotated file reads back as the same trace.
    again = traceanalyzer.load(out, use_cache=False)
    assert again.gpu.height == trace.gpu.height
    timed = sum(1 for f in result.findings for r in f.evidence if "start_ns" in r)
    assert sum(e["ph"] == "X" for e in ours) == min(timed, sum(
        min(len([r for r in f.evidence if "start_ns" in r]), 1000) for f in result.findings))


@pytest.mark.slow
def test_nsys_annotate_writes_perfetto(tmp_path):
    import traceanalyzer
    from traceanalyzer.analysis import analyze_trace

    src = PUBLIC / "nsys" / "nsysai_rtx3080_small.sqlite"
    if not src.exists():
        pytest.skip("public traces not present")
    try:
        trace = traceanalyzer.load(src, use_cache=False)
    except ImportError as exc:
        pytest.skip(f"nsys ingest not available: {exc}")
    result = analyze_trace(trace)
    out = tmp_path / "annotated.pftrace"
    write_annotated(src, trace, result, out)
    assert out.stat().st_size > 1000
    from traceanalyzer.ingest import sniff

    assert sniff(out) == "perfetto"


# json.dumps turns '"' and '\\' into escape sequences, runs of backslashes included.
_text = st.text(alphabet=st.sampled_from(list('ab"\\[]{},: \n\u00e9\u2028')), max_size=12)
_events = st.lists(st.fixed_dictionaries({"name": _text, "ph": st.just("X"),
                                          "args": st.dictionaries(_text, _text, max_size=2)}),
                   max_size=5)


@settings(max_examples=150, deadline=None)
@given(events=_events, before=st.dictionaries(_text, _text, max_size=2),
       after=st.dictionaries(_text, _text, max_size=2), chunk=st.integers(1, 40),
       indent=st.sampled_from([None, 1]), ascii_only=st.booleans())
def test_splice_property(events, before, after, chunk, indent, ascii_only):
    import io

    doc = {**{k: v for k, v in before.items() if k != "traceEvents"}, "traceEvents": events,
           **{k: v for k, v in after.items() if k != "traceEvents"}}
    raw = json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    extra = [b'{"ph": "M", "pid": 1, "name": "x"}']
    out = io.BytesIO()
    old = annotate.CHUNK_BYTES
    annotate.CHUNK_BYTES = chunk
    try:
        annotate._splice(io.BytesIO(raw), out, extra, Path("t.json"))
    finally:
        annotate.CHUNK_BYTES = old
    got = json.loads(out.getvalue())
    assert got["traceEvents"] == events + [json.loads(extra[0])]
    assert {k: v for k, v in got.items() if k != "traceEvents"} == \
        {k: v for k, v in doc.items() if k != "traceEvents"}
