"""The what-if table in every report (report/whatif_view.py): the terminal, Markdown, HTML and
JSON show the same figures, labels and order, checked on real sample traces."""

from __future__ import annotations

import html as htmllib
import json
import re

import pytest

from tests.support.paths import SAMPLES
from traceanalyzer import analyze
from traceanalyzer.findings import Finding
from traceanalyzer.report.html import render_html
from traceanalyzer.report.jsonout import dumps, to_json_dict
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.terminal import WIDTH, render_summary
from traceanalyzer.report.whatif_view import (
    ALL_LABEL,
    BY_PREDICTION,
    BY_RULE,
    COLUMNS,
    TITLE,
    differs,
    fmt_ms,
    ranked,
    whatif_view,
)

TRACES = [
    p
    for p in (
        SAMPLES / "torch" / f"{name}.json.gz"
        for name in ("gpt_step_bad", "hidden_sync_bad", "launch_bound_bad")
    )
    if p.exists()
]


def _finding(slug: str, impact: int, saving: int | None) -> Finding:
    return Finding(
        slug=slug,
        rule_id="TA999",
        severity="low",
        title=slug,
        message="m",
        fix="f",
        impact_ns=impact,
        impact_pct=1.0,
        impact_per_step_ns=impact,
        what_if={
            "step_time_ns": None if saving is None else 10 - saving,
            "saving_ns": saving,
            "assumes": "a",
        },
    )


def test_ranked_by_prediction_then_by_rule_impact() -> None:
    fs = [
        _finding("a", 100, 1),
        _finding("b", 1, 50),
        _finding("c", 500, None),
        _finding("d", 5, 7),
    ]
    assert [f.slug for f in ranked(fs)] == ["b", "d", "a", "c"]


def test_differs_by_more_than_twice_either_way() -> None:
    assert differs(1_000_000, 3_000_000) and differs(3_000_000, 1_000_000)
    assert not differs(1_000_000, 1_900_000) and not differs(0, 0)
    assert not differs(None, 5) and not differs(5, None)


def _rows_of(lines: list[str], width: int) -> list[list[str]]:
    """Table rows of a plain-text table: cells split on 2+ spaces."""
    return [re.split(r"\s{2,}", ln.strip())[:width] for ln in lines]


def _md_cell(cell: str) -> str:
    c = cell.strip()
    if c.startswith("**") and c.endswith("**"):
        c = c[2:-2]
    return c.strip("`").replace("\\*", "*")


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name.split(".")[0])
def reports(request: pytest.FixtureRequest) -> dict:
    result = analyze(request.param, use_cache=False)
    return {
        "result": result,
        "terminal": render_summary(result),
        "markdown": render_markdown(result),
        "html": htmllib.unescape(render_html(result)),
        "json": json.loads(dumps(to_json_dict(result))),
    }


@pytest.mark.skipif(not TRACES, reason="sample traces absent")
def test_every_report_shows_the_same_what_if(reports: dict) -> None:
    result, doc = reports["result"], reports["json"]
    view = whatif_view(result)
    assert view is not None and view.rows
    ranking = doc["what_if"]["ranking"]
    # The JSON's ranking is the view's order, with its figures.
    assert [r["slug"] for r in ranking] == [r.label for r in view.rows]
    assert len(ranking) == len(result.findings)
    expected = []
    for entry in ranking:
        finding = next(f for f in doc["findings"] if f["slug"] == entry["slug"])
        assert entry["saving_ns"] == finding["what_if"]["saving_ns"]
        assert entry["step_time_ns"] == finding["what_if"]["step_time_ns"]
        assert entry["rule_impact_per_step_ns"] == round(finding["impact"]["per_step_ns"])
        assert entry["ranked_by"] == (BY_RULE if entry["saving_ns"] is None else BY_PREDICTION)
        rule = fmt_ms(entry["rule_impact_per_step_ns"]) + (" *" if entry["differs"] else "")
        expected.append(
            [
                entry["slug"],
                fmt_ms(entry["step_time_ns"]),
                fmt_ms(entry["saving_ns"]),
                rule,
                entry["ranked_by"],
            ]
        )
    everything = doc["what_if"]["all"]
    total = [ALL_LABEL, fmt_ms(everything["step_time_ns"]), fmt_ms(everything["saving_ns"])]
    savings = [e["saving_ns"] for e in ranking if e["saving_ns"] is not None]
    assert savings == sorted(savings, reverse=True)

    # Terminal: the table's rows under its header, in order, with the same cells.
    term = reports["terminal"].splitlines()
    at = term.index(f"{TITLE}:")
    head = next(i for i in range(at, len(term)) if term[i].strip().startswith(COLUMNS[0]))
    body = term[head + 2 : head + 2 + len(expected) + 1]
    assert _rows_of(body[:-1], 5) == expected
    assert _rows_of(body[-1:], 3) == [total]
    assert max(len(ln) for ln in term[at:]) <= WIDTH

    # Markdown: one table row per finding, same cells (code spans and \\* undone).
    md = [ln for ln in reports["markdown"].splitlines() if ln.startswith("| ")]
    hdr = next(i for i, ln in enumerate(md) if ln.startswith(f"| {COLUMNS[0]} | {COLUMNS[1]}"))
    cells = [
        [_md_cell(c) for c in ln.strip("| ").split(" | ")]
        for ln in md[hdr + 1 : hdr + 2 + len(expected)]
    ]
    assert [c[:5] for c in cells[:-1]] == expected
    assert cells[-1][:3] == total

    # HTML: the what-if table's rows, same cells.
    page = reports["html"]
    table = page[page.index(f"<h3>{TITLE}</h3>") :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table)
    html_cells = [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", r)] for r in rows
    ]
    html_cells = [c for c in html_cells if c]
    assert [c[:5] for c in html_cells[:-1]] == expected
    assert html_cells[-1][:3] == total
    assert [th for th in re.findall(r"<th>(.*?)</th>", table)][:5] == list(COLUMNS)

    # Every report says what each prediction assumed.
    for f in doc["findings"]:
        assumes = f["what_if"]["assumes"]
        assert assumes in page and assumes[:40] in reports["markdown"]
        assert " ".join(assumes.split()[:4]) in " ".join(reports["terminal"].split())


@pytest.mark.skipif(not TRACES, reason="sample traces absent")
def test_terminal_fits_its_width_and_fix_texts_end_at_words(reports: dict) -> None:
    term = reports["terminal"].splitlines()
    result = reports["result"]
    # Lines wider than WIDTH hold one word that is itself too long (a kernel name).
    for line in term:
        if len(line) > WIDTH:
            words = line.split()
            assert any(len(w) > WIDTH // 2 for w in words) or "─" in line, line
    text = " ".join(reports["terminal"].split())
    for f in result.findings:
        fix = " ".join(f.fix.split())
        shown = text.split(f"fix: {fix[:20]}", 1)
        assert len(shown) == 2, f.slug
        rest = fix[:20] + shown[1]
        # Either the whole first sentence, or a cut at a word with "…".
        cut = rest.split(" …", 1)[0] if " …" in rest[: len(fix) + 2] else None
        if cut is not None:
            assert fix.startswith(cut) and fix[len(cut)] in " ,;:("


def test_findings_of_several_ranks_get_a_rank_column() -> None:
    from types import SimpleNamespace

    a, b = _finding("a", 5, 3), _finding("b", 9, None)
    a.rank, b.rank = 0, 1
    b.what_if = None  # another rank's finding: the what-if is the headline's
    result = SimpleNamespace(
        findings=[a, b],
        what_if={"rank": 0, "step_time_ns": 10, "all": None},
        metrics=SimpleNamespace(rank=0),
    )
    view = whatif_view(result)  # type: ignore[arg-type]
    assert view is not None and view.multi_rank and view.columns[0] == "rank"
    assert [r.cells(True)[:2] for r in view.rows] == [["0", "a"], ["1", "b"]]
    assert view.rows[1].ranked_by == BY_RULE and "rank" in view.rows[1].assumes
    assert view.totals == []
