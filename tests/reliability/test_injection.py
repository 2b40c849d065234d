"""Untrusted strings end to end: a hostile trace through the real CLI into HTML, Markdown, JSON
and the terminal; hostile rule files; --annotate onto its own input.

Unit tests of the escaping helpers live with the report code (tests/report/, including a
browser test); these tests check the promise as a user meets it, from a trace file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.support.paths import REPO

SCRIPT = "<script>alert(1)</script>"
PAYLOADS = [
    SCRIPT,
    "</script><script>alert(2)</script>",
    "\"'><img src=x onerror=alert(3)>",
    "</textarea><svg onload=alert(4)>",
    "[click](javascript:alert(5))",
    "<a href=\"javascript:alert(6)\">x</a>",
    "\x1b[31mRED\x1b[0m\x1b]0;title\x07\rOVERWRITE\x1b[2J",
    "`code` **bold** | pipe | <!-- comment",
    "{{7*7}} ${7*7} %s %n",
]
# A file name may hold most of this (no '/'): escape sequences, quotes and tags included.
EVIL_NAME = "evil<script>alert(7)<!--'\"\x1b[31m\x07\r.json"


def hostile_trace() -> dict:
    """Kernels, ops, annotations, device and args carrying payloads; fires several rules (fp32
    GEMMs, idle gaps with host wait, pageable copies) so payloads reach findings and evidence."""
    events = []
    t = 0.0
    for step in range(3):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": 1, "ts": t, "dur": 3000, "args": {}})
        for i, payload in enumerate(PAYLOADS):
            corr = step * 100 + i
            start = t + 10 + 300 * i
            events.append({"ph": "X", "cat": "user_annotation", "name": "range " + payload,
                           "pid": 1, "tid": 1, "ts": start, "dur": 250, "args": {}})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm" + payload, "pid": 1,
                           "tid": 1, "ts": start + 1, "dur": 100,
                           "args": {"External id": corr, "Input Dims": f"[[8, 8], \"{payload}\"]",
                                    "Input type": json.dumps([payload]),
                                    "Call stack": f"train.py(1): {payload};x.py(2): f"}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                           "tid": 1, "ts": start + 50, "dur": 10,
                           "args": {"correlation": corr, "External id": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn" + payload,
                           "pid": 0, "tid": 7, "ts": start + 100, "dur": 120,
                           "args": {"correlation": corr, "External id": corr, "device": 0,
                                    "stream": 7, "grid": [1, 1, 1], "block": [32, 1, 1]}})
        corr = step * 100 + 99
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1,
                       "tid": 1, "ts": t + 2800, "dur": 100, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "gpu_memcpy",
                       "name": "Memcpy HtoD (Pageable -> Device)" + PAYLOADS[0], "pid": 0,
                       "tid": 7, "ts": t + 2850, "dur": 100,
                       "args": {"correlation": corr, "device": 0, "stream": 7,
                                "bytes": 1 << 20}})
        t += 3000
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "GPU " + PAYLOADS[2] + PAYLOADS[6],
                                  "numSms": 108, "computeMajor": 8, "computeMinor": 0}],
            "distributedInfo": {"backend": SCRIPT, "rank": 0, "world_size": 1},
            "traceName": SCRIPT, "traceEvents": events}


class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag


def parse_html(text: str) -> Collector:
    parser = Collector()
    parser.feed(text)
    parser.close()
    return parser


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceanalyzer", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "TRACEANALYZER_DEBUG": ""})


def no_control_chars(text: str) -> bool:
    return not re.search(r"[\x00-\x08\x0b-\x1f\x7f\x9b]", text)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("inject")
    evil = tmp / EVIL_NAME
    evil.write_text(json.dumps(hostile_trace()), encoding="utf-8")
    benign = tmp / "benign_trace.json"
    doc = hostile_trace()
    text = json.dumps(doc)
    for p in PAYLOADS:
        text = text.replace(json.dumps(p)[1:-1], "x")
    benign.write_text(text, encoding="utf-8")
    out = {}
    for name, trace in (("evil", evil), ("benign", benign)):
        proc = run("analyze", str(trace), "--no-cache", "--html", str(tmp / f"{name}.html"),
                   "--markdown", str(tmp / f"{name}.md"), "--json", str(tmp / f"{name}.json"),
                   "--annotate", str(tmp / f"{name}.annotated.json"))
        assert proc.returncode == 0, proc.stderr
        out[name] = {"proc": proc, **{ext: (tmp / f"{name}.{ext}").read_text(encoding="utf-8")
                                      for ext in ("html", "md", "json")}}
    out["dir"] = tmp
    return out


def test_payloads_reach_the_report(reports: dict) -> None:
    """The test means something only if the payloads are really in the report's data."""
    data = json.loads(reports["evil"]["json"])
    names = " ".join(k["name"] for k in data["kernels"])
    assert SCRIPT in names and "\x1b[31m" in names
    assert data["findings"], "no finding fired: payloads never reach messages/evidence"
    assert any("sgemm" in f["message"] for f in data["findings"])
    assert "alert(1)" in reports["evil"]["html"]  # present, as escaped text


def test_html_has_no_injected_elements(reports: dict) -> None:
    evil, benign = parse_html(reports["evil"]["html"]), parse_html(reports["benign"]["html"])
    evil_tags = [t for t, _ in evil.tags]
    benign_tags = [t for t, _ in benign.tags]
    assert evil_tags.count("script") == benign_tags.count("script")
    assert set(evil_tags) <= set(benign_tags), set(evil_tags) - set(benign_tags)
    for tag in ("script", "img", "svg", "iframe", "object", "embed", "textarea", "form", "a",
                "style", "link", "meta", "base"):
        assert evil_tags.count(tag) == benign_tags.count(tag), tag
    for tag, attrs in evil.tags:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            if name in ("href", "src", "action", "formaction", "xlink:href"):
                assert not (value or "").strip().lower().startswith("javascript:"), (tag, value)
    html = reports["evil"]["html"]
    for raw in ("<script>alert", "</script><script>", "<img src=x", "<svg onload",
                "</textarea><", '<a href="javascript'):
        assert raw not in html, raw
    assert no_control_chars(html)


def test_html_script_blocks_hold_no_closing_tag(reports: dict) -> None:
    """Data embedded in <script> blocks must not contain '</' that could close the block."""
    html = reports["evil"]["html"]
    for block in re.findall(r"<script[^>]*>(.*?)</script>", html, flags=re.S | re.I):
        assert "</script" not in block.lower() and "<!--" not in block


def test_markdown_is_inert(reports: dict) -> None:
    md = reports["evil"]["md"]
    assert "<" not in md.replace("<!--", "") or not re.search(r"<[a-zA-Z/!]", md), md
    assert not re.search(r"(?<!\\)\]\((?i:javascript):", md)
    assert no_control_chars(md)
    # A payload cannot start a new line (headings, list items, table rows) either.
    assert all(line == line.lstrip("\r") for line in md.split("\n"))


def test_terminal_output_has_no_escape_sequences(reports: dict) -> None:
    proc = reports["evil"]["proc"]
    assert no_control_chars(proc.stdout) and no_control_chars(proc.stderr)
    assert "RED" in proc.stdout or "sgemm" in proc.stdout  # the text is there, made inert


def test_terminal_error_with_hostile_file_name(tmp_path: Path) -> None:
    bad = tmp_path / ("bad\x1b[2J\x07\r" + "<b>.json")
    bad.write_bytes(b"not a trace \x1b[31m")
    proc = run("analyze", str(bad), "--no-cache")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert no_control_chars(proc.stderr) and no_control_chars(proc.stdout)


def test_stats_and_rules_commands_escape(reports: dict) -> None:
    evil = reports["dir"] / EVIL_NAME
    proc = run("stats", str(evil), "--no-cache")
    if proc.returncode == 0:
        assert no_control_chars(proc.stdout) and no_control_chars(proc.stderr)


def test_annotated_trace_is_valid_json(reports: dict) -> None:
    annotated = reports["dir"] / "evil.annotated.json"
    doc = json.loads(annotated.read_text(encoding="utf-8"))
    names = {e.get("name") for e in doc["traceEvents"] if isinstance(e, dict)}
    assert any(isinstance(n, str) and SCRIPT in n for n in names)


# ---------------------------------------------------------------------------------------------
# --annotate never overwrites its input


@pytest.mark.parametrize("option", ["--annotate", "--json", "--html", "--markdown"])
def test_outputs_refuse_to_overwrite_the_input(option: str, tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(hostile_trace()), encoding="utf-8")
    before = trace.read_bytes()
    proc = run("analyze", str(trace), "--no-cache", option, str(trace))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "overwrite" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert trace.read_bytes() == before


@pytest.mark.parametrize("how", ["symlink", "hardlink", "relative"])
def test_annotate_refuses_its_input_by_another_name(how: str, tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(hostile_trace()), encoding="utf-8")
    before = trace.read_bytes()
    if how == "symlink":
        other = tmp_path / "link.json"
        other.symlink_to(trace)
        target = str(other)
    elif how == "hardlink":
        other = tmp_path / "hard.json"
        os.link(trace, other)
        target = str(other)
    else:
        target = "./t.json"
    proc = run("analyze", str(trace), "--no-cache", "--annotate", target, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert trace.read_bytes() == before


# ---------------------------------------------------------------------------------------------
# Rule files: safe YAML, no evaluation


def _user_rule(tmp: Path, **fields: str) -> Path:
    src = (REPO / "rules" / "gpu-idle-gaps.yaml").read_text(encoding="utf-8")
    import yaml

    data = yaml.safe_load(src)
    data.update(slug="user-rule", id="TA901")
    data.pop("examples", None)
    data.update(fields)
    folder = tmp / "rules"
    folder.mkdir(exist_ok=True)
    path = folder / "user-rule.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _trace(tmp: Path) -> Path:
    trace = tmp / "t.json"
    trace.write_text(json.dumps(hostile_trace()), encoding="utf-8")
    return trace


def test_rule_file_python_tag_rejected(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    rule = tmp_path / "evil.yaml"
    rule.write_text(f"slug: !!python/object/apply:os.system ['touch {marker}']\n"
                    "id: TA999\n", encoding="utf-8")
    proc = run("analyze", str(_trace(tmp_path)), "--no-cache", "--rules", str(rule))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert str(rule) in proc.stderr or "evil.yaml" in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("loader", ["SafeLoader", "CSafeLoader"])
def test_both_safe_loaders_read_the_rules_alike_and_refuse_python_tags(loader: str) -> None:
    """Rules are read with libyaml's loader when PyYAML has it, else the Python one: both give the
    same documents for every built-in rule, and neither constructs Python objects."""
    import yaml

    from traceanalyzer.rules import schema

    if not hasattr(yaml, loader):
        pytest.skip(f"PyYAML built without {loader}")
    cls = getattr(yaml, loader)
    for path in sorted((REPO / "rules").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert yaml.load(text, Loader=cls) == schema.safe_load(text), path.name
    with pytest.raises(yaml.YAMLError):
        yaml.load("slug: !!python/object/apply:os.system ['true']\n", Loader=cls)


def test_project_config_python_tag_rejected(tmp_path: Path) -> None:
    marker = tmp_path / "pwned2"
    config = tmp_path / "traceanalyzer.yaml"
    config.write_text(f"disable: !!python/object/apply:os.system ['touch {marker}']\n",
                      encoding="utf-8")
    proc = run("analyze", str(_trace(tmp_path)), "--no-cache", "--config", str(config))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("template", [
    "{window_ms.__class__}", "{window_ms.__class__.__init__.__globals__}", "{step_count[0]}",
    "{window_ms!r}", "{window_ms:{step_count}}", "{__import__}",
])
def test_rule_template_rejected(template: str, tmp_path: Path) -> None:
    rule = _user_rule(tmp_path, message=template)
    proc = run("analyze", str(_trace(tmp_path)), "--no-cache", "--rules", str(rule))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "class" not in proc.stdout


def test_rule_values_from_trace_are_not_templates(tmp_path: Path) -> None:
    """A kernel named like a template field is printed as is, never formatted again."""
    doc = hostile_trace()
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            e["name"] = "ampere_sgemm_{window_ms.__class__}{0}"
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc), encoding="utf-8")
    proc = run("analyze", str(trace), "--no-cache", "--json", str(tmp_path / "o.json"))
    assert proc.returncode == 0, proc.stderr
    assert "<class" not in proc.stdout
    data = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))
    assert any("{window_ms.__class__}" in f["message"] for f in data["findings"])



def test_summary_csv_cells_are_not_formulas(tmp_path: Path) -> None:
    """OWASP CSV injection: a device name ``=HYPERLINK(...)`` is text in summary.csv."""
    import polars as pl

    from traceanalyzer.batch.summary import write_summary

    frame = pl.DataFrame({"device": ['=HYPERLINK("http://x")', "+1", "-1", "@a", "\tx", "\rx",
                                     "ok"], "n": [1, -2, 3, 4, 5, 6, 7]})
    _, csv = write_summary(frame, tmp_path)
    back = pl.read_csv(csv)
    # Formulas get a leading "'"; a tab or CR is then shown as a visible escape (textsafe).
    assert back["device"].to_list()[:6] == ["'" + v.replace("\t", "\\x09").replace("\r", "\\x0d")
                                            for v in frame["device"].to_list()[:6]]
    assert back["device"][6] == "ok" and back["n"].to_list() == frame["n"].to_list()


def test_terminal_safe_covers_c0_c1_del_and_bidi() -> None:
    from traceanalyzer.report.terminal import safe

    hostile = "a\x1b]0;t\x07\r\x7f\x9b\x85\u202e\u2066\u200fb"
    assert safe(hostile) == "a\\x1b]0;t\\x07\\x0d\\x7f\\x9b\\x85\\u202e\\u2066\\u200fb"
