"""Issue 30, class 6: injection outside HTML. Trace text never becomes a live link, image, tag,
table break, heading or emphasis in the Markdown report (checked against the GFM rules in
tests/support/gfm.py); never reaches a terminal or a CSV cell as a control character; is inert
in the HTML's embedded JSON; and leaves the JSON report and the annotated trace valid JSON.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.gfm import inline_text, live_constructs
from tests.support.paths import REPO
from traceanalyzer.report.html import json_for_script
from traceanalyzer.report.markdown import md_escape
from traceanalyzer.report.textsafe import csv_safe, json_text_safe, one_line, visible

#: Every character a terminal or CSV must not get raw (C0, DEL, C1, bidi, separators).
HOSTILE_CHARS = (
    [chr(c) for c in range(0x20)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
    + ["\u200e", "\u200f", "\u061c", "\u2028", "\u2029"]
)
#: Those a report or the terminal must never hold raw (its own tabs and newlines aside).
RAW = re.compile(
    "[" + "".join(re.escape(c) for c in HOSTILE_CHARS if c not in "\t\n") + "\ud800-\udfff]"
)

#: Names that GitHub would render as something other than text if they were pasted raw.
LIVE_NAMES = [
    "kernel_https://evil.example/x?a=1",
    "see http://evil.example",
    "ftp://files.example/a",
    "www.evil.example",
    "WWW.EVIL.EXAMPLE/x",
    "(www.evil.example)",
    "_www.evil.example_",
    "mail a.b+c@evil.example",
    "mailto:a@evil.example",
    "xmpp:a@evil.example/r",
    "<https://evil.example>",
    "<a@evil.example>",
    "[click](https://evil.example)",
    "![img](https://evil.example/p.png)",
    "[ref]: https://evil.example",
    "@admin please",
    "owner/repo#12",
    "#1234",
    "# heading",
    "## h2",
    "1. item",
    "12) item",
    "- item",
    "+ item",
    "> quote",
    "=== ",
    "--- ",
    "| a | b |",
    "*em* **strong** _u_ __uu__ ~~s~~",
    "`code`",
    "<b>bold</b>",
    "<img src=x onerror=alert(1)>",
    "<!-- c -->",
    "&lt;script&gt;",
    "&#64;admin",
    "a\\",
    "trailing two spaces  ",
    "line\nbreak",
    "cr\rreturn",
]


@pytest.mark.parametrize("name", LIVE_NAMES)
def test_markdown_escape_leaves_no_live_construct(name: str) -> None:
    escaped = md_escape(name)
    assert live_constructs(escaped) == [], (name, escaped)
    assert "\n" not in escaped and "\r" not in escaped
    # The text a reader sees is the name: escapes and the invisible joiners aside.
    shown = inline_text(escaped).replace("\u200d", "")
    assert shown == " ".join(name.split()), (name, escaped)


def test_the_gfm_checker_sees_the_raw_names() -> None:
    """The checks mean something: each raw name is live by them (the plain ones aside)."""
    plain = {"a\\", "trailing two spaces  ", "line\nbreak", "cr\rreturn", "&lt;script&gt;"}
    for name in LIVE_NAMES:
        if name not in plain:
            assert live_constructs(name), name


_PIECES = st.sampled_from(
    [
        "http",
        "https",
        "ftp",
        "mailto",
        "xmpp",
        "www",
        "WWW",
        ":",
        "//",
        "/",
        ".",
        "@",
        "#",
        "1",
        "a",
        "b.com",
        "_",
        "*",
        "~",
        "(",
        ")",
        "[",
        "]",
        "!",
        "<",
        ">",
        "&",
        "#64;",
        "lt;",
        "\\",
        "`",
        "|",
        " ",
        "-",
        "+",
        "=",
        "\x1b",
        "\u202e",
        "\x9b",
        "\u200d",
        "é",
        "x",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_markdown_escape_property(text: str) -> None:
    escaped = md_escape(text)
    assert live_constructs(escaped) == [], (text, escaped)
    assert not RAW.search(escaped)


def test_markdown_breaks_autolinks_invisibly() -> None:
    """A zero-width joiner after the trigger: the name reads the same, no rule matches."""
    assert md_escape("https://x.example") == "https:\u200d//x.example"
    assert md_escape("www.x.example") == "www\u200d.x.example"
    assert md_escape("a@x.example") == "a@\u200dx.example"
    assert (
        md_escape("at::native::vectorized_elementwise_kernel")
        == "at::native::vectorized\\_elementwise\\_kernel"
    )  # ordinary C++ names untouched


# -- terminal and CSV ---------------------------------------------------------------------------


def test_visible_escapes_every_hostile_character() -> None:
    for ch in [*HOSTILE_CHARS, "\ud800", "\udcff"]:
        out = visible(f"a{ch}b")
        assert not RAW.search(out), repr(ch)
        assert out.startswith("a\\") and out.endswith("b"), (repr(ch), out)
    assert visible("\x1b]0;title\x07") == "\\x1b]0;title\\x07"
    assert visible("\u202eexe.txt\x9b") == "\\u202eexe.txt\\x9b"
    assert visible("a\nb\tc", keep_newlines=True) == "a\nb\\x09c"
    assert one_line("a\nb\r\nc") == "a b c"
    ordinary = "ampere_sgemm<float, 128> 名前 😀 ä \u200d ‐"
    assert visible(ordinary) == ordinary


def test_csv_safe_neutralises_formulas_and_controls() -> None:
    import polars as pl

    frame = pl.DataFrame(
        {
            "name": ['=HYPERLINK("http://x")', "\x1b]0;t\x07k", "\u202ek", "ok", "\tx"],
            "n": [1, 2, 3, 4, 5],
        }
    )
    back = pl.read_csv(csv_safe(frame).write_csv().encode())
    assert back["name"].to_list() == [
        '\'=HYPERLINK("http://x")',
        "\\x1b]0;t\\x07k",
        "\\u202ek",
        "ok",
        "'\\x09x",
    ]
    assert back["n"].to_list() == [1, 2, 3, 4, 5]


def test_json_text_safe_keeps_strings_exact() -> None:
    doc = {"name": "a\x1b\x9b\u202e\u2028\x7fz", "n": [1, 2]}
    text = json_text_safe(json.dumps(doc, ensure_ascii=False))
    assert not RAW.search(text)
    assert json.loads(text) == doc
    assert json.loads(json_text_safe(json.dumps({"s": "a\ud800b"}, ensure_ascii=False))) == {
        "s": "a\ufffdb"
    }


# -- HTML's embedded JSON -----------------------------------------------------------------------


def test_script_json_has_no_closer_and_shows_controls_as_text() -> None:
    names = [
        "k</script><script>alert(1)</script>",
        "k<!--",
        "k\u2028\u2029",
        "k\u202eevil",
        "k\x9b31m",
        "k\x1b]0;t\x07",
        "k\r\b\f",
        "k\ud800",
        "k\\u001b",
        'k"\\',
    ]
    text = json_for_script({"names": names})
    assert "</" not in text and "<!--" not in text and "<" not in text
    assert not RAW.search(text)
    shown = json.loads(text)["names"]
    assert shown[:3] == names[:3]  # U+2028/2029 kept, as escapes
    assert shown[3:8] == [
        "k\\u202eevil",
        "k\\x9b31m",
        "k\\x1b]0;t\\x07",
        "k\\x0d\\x08\\x0c",
        "k\\ud800",
    ]
    assert shown[8:] == names[8:]  # a literal backslash-u stays what it was


# -- through the real CLI -----------------------------------------------------------------------

NAMES = [
    "ampere_sgemm_128x64_tn https://evil.example/x",
    "ampere_sgemm_www.evil.example",
    "ampere_sgemm_a.b@evil.example",
    "ampere_sgemm_\x1b]0;pwned\x07\r\x1b[2J",
    "ampere_sgemm_\u202etxt.exe\x9b31m",
    '=HYPERLINK("http://evil.example")',
]


def _trace(tmp: Path) -> Path:
    events = []
    for step in range(3):
        t = step * 2000.0
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": 2000,
                "args": {},
            }
        )
        for i, name in enumerate(NAMES):
            corr = step * 100 + i
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 10 + 200 * i,
                    "dur": 10,
                    "args": {"correlation": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 50 + 200 * i,
                    "dur": 100,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                }
            )
    doc = {
        "schemaVersion": 1,
        "traceEvents": events,
        "deviceProperties": [
            {
                "id": 0,
                "name": "GPU \ud800 \u202e a@evil.example",
                "numSms": 108,
                "computeMajor": 8,
                "computeMinor": 0,
            }
        ],
    }
    path = tmp / "t.json"
    path.write_text(json.dumps(doc), encoding="utf-8")  # ASCII: "\ud800" as an escape
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceanalyzer", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        errors="strict",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("escapes")
    trace = _trace(tmp)
    proc = run(
        "analyze",
        str(trace),
        "--no-cache",
        "--markdown",
        str(tmp / "r.md"),
        "--json",
        str(tmp / "r.json"),
        "--annotate",
        str(tmp / "a.json"),
        "--html",
        str(tmp / "r.html"),
    )
    assert proc.returncode == 0, proc.stderr
    return {"trace": trace, "tmp": tmp, "proc": proc}


def test_markdown_report_has_no_live_link(analyzed: dict) -> None:
    md = (analyzed["tmp"] / "r.md").read_text(encoding="utf-8")
    assert "evil" in md  # the names are there
    for line in md.splitlines():
        live = [
            c for c in live_constructs(line, block_start=False) if not c.startswith("unescaped")
        ]  # the report's own tables and emphasis
        assert live == [], (line, live)
    assert not RAW.search(md)


def test_terminal_shows_controls_as_visible_escapes(analyzed: dict) -> None:
    out = analyzed["proc"].stdout + analyzed["proc"].stderr
    assert not RAW.search(out)
    assert "\\x1b]0;pwned\\x07" in out and "\\ud800" in out


@pytest.mark.parametrize("fmt", ["csv", "table", "json"])
def test_stats_output_is_inert(analyzed: dict, fmt: str) -> None:
    proc = run("stats", str(analyzed["trace"]), "--no-cache", "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    assert not RAW.search(proc.stdout + proc.stderr)
    if fmt == "csv":
        import polars as pl

        names = pl.read_csv(proc.stdout.encode())["name"].to_list()
        assert '\'=HYPERLINK("http://evil.example")' in names
        assert "ampere_sgemm_\\x1b]0;pwned\\x07\\x0d\\x1b[2J" in names
    if fmt == "json":  # exact names, the controls as JSON escapes
        assert {r["name"] for r in json.loads(proc.stdout)} == set(NAMES)


def test_json_report_and_annotated_trace_are_valid_json(analyzed: dict) -> None:
    for name in ("r.json", "a.json"):
        raw = (analyzed["tmp"] / name).read_bytes()
        doc = json.loads(raw.decode("utf-8"))  # strict UTF-8: no surrogate made it through
        assert doc
    report = json.loads((analyzed["tmp"] / "r.json").read_text(encoding="utf-8"))
    assert {k["name"] for k in report["kernels"]} == set(NAMES)
    text = (analyzed["tmp"] / "r.json").read_text(encoding="utf-8")
    assert not RAW.search(text) and not re.search(r"\\ud[89ab]", text, re.I)
    assert "GPU \ufffd \u202e a@evil.example" in json.dumps(report["trace"], ensure_ascii=False)


def test_html_embeds_no_raw_control(analyzed: dict) -> None:
    html = (analyzed["tmp"] / "r.html").read_text(encoding="utf-8")
    assert not RAW.search(html)
    assert "\\u202etxt.exe\\x9b31m" in html


def test_usage_error_quoting_a_hostile_value_is_inert() -> None:
    proc = run("analyze", "x.json", "--top", "\x1b]0;pwned\x07")
    assert proc.returncode == 2
    assert not RAW.search(proc.stderr.replace("\n", "")) and "\\x1b]0;pwned\\x07" in proc.stderr
