import json

import pytest

from tests.support.paths import REPO
from tests.support.report_fixtures import HOSTILE, hostile_trace_and_result, make_result
from traceanalyzer.report import jsonout


def test_json_validates_against_schema():
    doc = jsonout.to_json_dict(make_result())
    assert jsonout.validate(doc) == []
    assert doc["schema_version"] == jsonout.SCHEMA_VERSION
    f = doc["findings"][0]
    assert {"slug", "id", "severity", "message", "impact", "evidence"} <= set(f)
    assert f["slug"] == "gpu-idle-gaps" and f["impact"]["pct"] == 30.0
    assert [o["status"] for o in doc["rule_outcomes"]].count("not_applicable") == 1
    assert doc["metrics"]["idle_pct"] == pytest.approx(30.0, abs=0.01)
    assert doc["kernels"][0]["total_ns"] >= doc["kernels"][-1]["total_ns"]


def test_validator_reports_problems():
    doc = jsonout.to_json_dict(make_result())
    del doc["findings"][0]["slug"]
    doc["metrics"]["busy_ns"] = "a lot"
    doc["schema_version"] = 99
    problems = jsonout.validate(doc)
    assert any("missing 'slug'" in p for p in problems)
    assert any("metrics.busy_ns" in p for p in problems)
    assert any("schema_version" in p for p in problems)


def test_json_is_deterministic(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    jsonout.write_json(make_result(), a)
    jsonout.write_json(make_result(), b)
    assert a.read_bytes() == b.read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))


def test_json_floats_rounded_and_nan_is_null():
    r = make_result()
    r.metrics.launch_delay_mean_ns = float("nan")
    r.metrics.comm_overlap_pct = 1 / 3
    doc = jsonout.to_json_dict(r)
    assert doc["metrics"]["launch_delay_mean_ns"] is None
    assert doc["metrics"]["comm_overlap_pct"] == 0.333
    json.loads(jsonout.dumps(doc))  # strict JSON: no NaN tokens


def test_hostile_strings_survive_round_trip(tmp_path):
    _, result = hostile_trace_and_result()
    out = tmp_path / "r.json"
    jsonout.write_json(result, out)
    doc = json.loads(out.read_text(encoding="utf-8"))
    names = {k["name"] for k in doc["kernels"]}
    assert set(HOSTILE[:6]) <= names
    assert jsonout.validate(doc) == []


def test_schema_doc_mentions_every_top_level_and_metric_field():

    doc = (REPO / "docs" / "json-schema.md").read_text()
    for key in jsonout.JSON_SCHEMA["properties"]:
        assert f"`{key}`" in doc, key
    for key in jsonout.JSON_SCHEMA["properties"]["metrics"]["properties"]:
        assert f"`{key}`" in doc, key



PUBLIC = REPO.parent / "shared" / "traces" / "public"


@pytest.mark.slow
@pytest.mark.parametrize("rel", ["kineto/hta_a100_rank3of8_control.json.gz",
                                 "kineto/hta_cpu_only.json.gz",
                                 "nsys/nsysai_2gpu_sendrecv_before.sqlite"])
def test_real_trace_json_matches_schema(tmp_path, rel):
    import traceanalyzer
    from traceanalyzer.analysis import analyze_trace

    path = PUBLIC / rel
    if not path.exists():
        pytest.skip("public traces not present")
    result = analyze_trace(traceanalyzer.load(path, use_cache=False))
    out = tmp_path / "r.json"
    jsonout.write_json(result, out)
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert jsonout.validate(doc) == []
    assert doc["trace"]["format"] in ("kineto", "nsys")
    jsonout.write_json(result, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == out.read_bytes()
    try:  # cross-check with the reference implementation when it is installed
        import jsonschema
    except ImportError:
        return
    jsonschema.Draft202012Validator.check_schema(jsonout.JSON_SCHEMA)
    jsonschema.validate(doc, jsonout.JSON_SCHEMA)


@pytest.mark.parametrize("rel", ["torch/empty_cache_bad_torch.json.gz",
                                 "nsys/empty_cache_good_range.sqlite"])
def test_memory_in_json(rel):
    """The device memory figures of a profile_memory=True / --cuda-memory-usage=true recording:
    the metrics, a row per device and the holders, valid against the schema."""
    import traceanalyzer

    path = REPO / "sample_traces" / "programs" / rel
    record = json.loads((path.parent.parent / "records" / (
        path.name.replace(".json.gz", "").replace(".sqlite", "") + ".record.json")).read_text())
    doc = jsonout.to_json_dict(traceanalyzer.analyze(path, use_cache=False))
    assert jsonout.validate(doc) == []
    metrics, (device,) = doc["metrics"], doc["memory"]
    assert device["peak_reserved_bytes"] == metrics["peak_memory_reserved_bytes"]
    if rel.startswith("torch"):
        assert metrics["peak_memory_allocated_bytes"] == record["max_memory_allocated"]
        assert device["source"] == "allocator" and device["peak_allocated_step"] is not None
        assert sum(h["bytes"] for h in doc["memory_holders"]) == device["peak_allocated_bytes"]
    else:
        assert metrics["peak_memory_allocated_bytes"] is None and doc["memory_holders"] == []
        assert device["source"] == "driver"
