"""The HTML report in a real headless Chromium: it renders, errs nothing, fetches nothing, and
no string from a trace can run script. Screenshots land in tests/artifacts/ for a human look."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cdp import Browser, find_browser
from tests.support.paths import REPO
from tests.support.report_fixtures import (
    HOSTILE,
    hostile_trace_and_result,
    huge_trace_and_result,
    make_result,
    make_trace,
)
from traceanalyzer.report.html import write_html

pytestmark = pytest.mark.browser


ARTIFACTS = REPO / "tests" / "artifacts"
PUBLIC = REPO.parent / "shared" / "traces" / "public"
SECTIONS = ["summary", "headline", "findings", "timeline", "charts", "memory", "kernels",
            "operators", "rules", "warnings"]
EMPTY_CACHE = REPO / "sample_traces" / "programs" / "torch" / "empty_cache_bad_torch.json.gz"


@pytest.fixture(scope="module")
def browser():
    if not find_browser():
        pytest.skip("no Chromium installed (apt-get install chromium)")
    with Browser() as b:
        yield b


def problems(browser: Browser, report: Path) -> list[str]:
    """Console errors, uncaught exceptions, dialogs and any request other than the report."""
    own = report.resolve().as_uri()
    out = []
    for ev in browser.events:
        m, p = ev["method"], ev.get("params", {})
        if m == "Runtime.exceptionThrown":
            out.append(f"exception: {p['exceptionDetails'].get('text')}")
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
            out.append(f"console.{p['type']}: {p.get('args')}")
        elif m == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
            out.append(f"log: {p['entry'].get('text')}")
        elif m == "Page.javascriptDialogOpening":
            out.append(f"dialog: {p.get('message')}")
        elif m == "Network.requestWillBeSent" and p["request"]["url"] != own:
            out.append(f"request: {p['request']['url']}")
    return out


def exercise(browser: Browser) -> None:
    """Use the timeline as a person would: every window, every finding link, hover, zoom."""
    browser.evaluate("""(() => {
        const c = document.getElementById('tl-canvas');
        if (!c) return;
        const sel = document.getElementById('tl-window');
        for (let i = 0; i < sel.options.length; i++) {
            sel.value = String(i); sel.dispatchEvent(new Event('change'));
        }
        document.querySelectorAll('a.tl-link').forEach(a => a.click());
        const r = c.getBoundingClientRect();
        for (let x = 0; x < r.width; x += 7) for (let y = 2; y < r.height; y += 9)
            c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + x, clientY: r.top + y}));
        c.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: r.left + 300,
                                                 clientY: r.top + 30, cancelable: true}));
        document.getElementById('tl-in').click(); document.getElementById('tl-reset').click();
        c.dispatchEvent(new MouseEvent('dblclick'));
    })()""")
    browser.drain(0.2)


def test_report_renders_without_errors_or_requests(browser, tmp_path):
    trace = make_trace()
    report = tmp_path / "report.html"
    write_html(make_result(trace), report, trace)
    browser.open(report)
    exercise(browser)
    assert problems(browser, report) == []
    for sec in SECTIONS:
        assert browser.evaluate(f"!!document.getElementById('{sec}')"), sec
    assert browser.evaluate("document.querySelectorAll('article.finding').length") == 2
    assert browser.evaluate("document.getElementById('tl-wrap').hidden") is False
    assert browser.evaluate("document.getElementById('tl-window').options.length") >= 2
    assert browser.evaluate("document.getElementById('tl-canvas').width") > 100
    assert browser.evaluate("document.querySelectorAll('svg.chart').length") == 3
    assert "not applicable" in browser.evaluate("document.getElementById('rules').textContent")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(ARTIFACTS / "report_light.png")
    # Printable: print media renders, and evidence tables open for paper.
    browser.call("Emulation.setEmulatedMedia", media="print")
    browser.evaluate("window.dispatchEvent(new Event('beforeprint'))")
    assert browser.evaluate("[...document.querySelectorAll('details')].every(d => d.open)")
    assert browser.evaluate("getComputedStyle(document.querySelector('nav')).display") == "none"
    pdf = browser.call("Page.printToPDF")["data"]
    assert len(pdf) > 10_000
    browser.call("Emulation.setEmulatedMedia", media="")
    browser.open(report, dark=True)
    assert browser.evaluate(
        "getComputedStyle(document.documentElement).getPropertyValue('--bg').trim()") == "#14171d"
    browser.screenshot(ARTIFACTS / "report_dark.png")
    assert (ARTIFACTS / "report_dark.png").stat().st_size > 10_000


def test_memory_chart_renders(browser, tmp_path):
    """The device memory chart of a profile_memory=True recording: both lines, the steps and
    the peak, whose hover names it."""
    import traceanalyzer as ta

    result = ta.analyze(EMPTY_CACHE, use_cache=False)
    report = tmp_path / "memory.html"
    write_html(result, report)
    browser.open(report)
    assert problems(browser, report) == []
    chart = "document.getElementById('memory-chart')"
    assert browser.evaluate(f"{chart}.querySelectorAll('polyline').length") == 2
    assert browser.evaluate(f"{chart}.querySelectorAll('line.mem-step').length") == result.steps.height
    peak = browser.evaluate(f"{chart}.querySelector('circle.mem-peak title').textContent")
    assert peak.startswith("peak allocated: 1.97 GiB at") and "step" in peak
    assert browser.evaluate(f"{chart}.getBoundingClientRect().width") > 300
    assert "aten::" in browser.evaluate("document.getElementById('memory').textContent")
    browser.evaluate(f"{chart}.scrollIntoView()")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(ARTIFACTS / "report_memory.png")


def test_injection_runs_no_script(browser, tmp_path):
    trace, result = hostile_trace_and_result()
    report = tmp_path / "evil.html"
    write_html(result, report, trace)
    browser.open(report)
    exercise(browser)
    assert problems(browser, report) == []
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    # The hostile strings are shown as text, intact.
    text = browser.evaluate("document.body.innerText")
    for s in HOSTILE[:7]:
        assert s in text or s.replace("/", "_") in text, s
    # Nothing from the trace became an element, an attribute or a link.
    assert browser.evaluate("document.querySelectorAll('img, svg [onload], iframe, textarea, "
                            "a[href^=\"javascript\"], [onerror]').length") == 0
    assert browser.evaluate("document.scripts.length") == 2  # the data block and the report's own
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(ARTIFACTS / "report_injection.png")


#: Names whose characters a page must show as text (issue 30, class 6): bidi overrides and
#: isolates, a C1 CSI, an OSC title sequence, script closers and JavaScript line separators.
BIDI_C1_NAMES = ["k_\u202eexe.txt", "k_\u2066iso\u2069", "k_\x9b31m", "k_\x1b]0;t\x07",
                 "k_</script><!--", "k_\u2028\u2029"]


def test_bidi_and_c1_names_show_as_text(browser, tmp_path):
    trace = make_trace(kernel_names=BIDI_C1_NAMES)
    report = tmp_path / "bidi.html"
    write_html(make_result(trace), report, trace)
    raw = report.read_text(encoding="utf-8")
    assert not any(c in raw for c in "\u202e\u2066\u2069\x9b\x1b\x07")
    browser.open(report)
    exercise(browser)
    assert problems(browser, report) == []
    text = browser.evaluate("document.body.innerText")
    for shown in ("k_\\u202eexe.txt", "k_\\u2066iso\\u2069", "k_\\x9b31m",
                  "k_\\x1b]0;t\\x07", "k_</script><!--"):
        assert shown in text, shown
    assert not any(c in text for c in "\u202e\u2066\u2069\x9b\x1b\x07")
    # The timeline's names (from the embedded JSON) read the same once parsed by the page.
    names = browser.evaluate("JSON.parse(document.getElementById('ta-data').textContent).names")
    assert "k_\\u202eexe.txt" in names and "k_</script><!--" in names
    assert "k_\u2028\u2029" in names  # line separators kept: harmless as text
    assert browser.evaluate("document.scripts.length") == 2


def test_report_without_trace_has_no_timeline(browser, tmp_path):
    report = tmp_path / "notrace.html"
    write_html(make_result(), report)
    browser.open(report)
    assert problems(browser, report) == []
    assert browser.evaluate("!!document.getElementById('tl-canvas')") is False


TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".pftrace", ".perfetto-trace", ".pb")


def _public_traces():
    """Every public trace, and every sample trace of the reference workloads in the repo."""
    found = []
    if PUBLIC.is_dir():
        found += PUBLIC.glob("*/*")
    samples = REPO / "sample_traces"
    if samples.is_dir():
        found += [*samples.glob("torch/*"), *samples.glob("nsys/*")]
    return sorted(p for p in found if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


@pytest.mark.slow
@pytest.mark.parametrize("path", _public_traces(), ids=lambda p: p.parent.name + "/" + p.name)
def test_public_trace_reports_render(browser, tmp_path, path):
    import traceanalyzer
    from traceanalyzer.errors import InputError

    try:
        from traceanalyzer.analysis import analyze_trace

        trace = traceanalyzer.load(path, use_cache=False)
        result = analyze_trace(trace)
    except (ImportError, NotImplementedError) as exc:
        pytest.skip(f"analysis not available yet: {exc}")
    except InputError as exc:
        pytest.skip(f"trace not readable: {exc}")
    report = tmp_path / f"{path.name}.html"
    write_html(result, report, trace)
    assert report.stat().st_size < 3_000_000
    browser.open(report)
    exercise(browser)
    assert problems(browser, report) == []
    assert browser.evaluate("!!document.getElementById('findings')")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(ARTIFACTS / f"public_{path.name}.png", full_page=False)


def test_huge_report_renders(browser, tmp_path):
    trace, result = huge_trace_and_result()
    report = tmp_path / "huge.html"
    write_html(result, report, trace)
    browser.open(report)
    exercise(browser)
    assert problems(browser, report) == []
    assert browser.evaluate("document.getElementById('tl-window').options.length") >= 3


def test_diff_report_renders(browser, tmp_path):
    from traceanalyzer.report.diff import diff_results
    from traceanalyzer.report.diff import write_html as write_diff_html

    trace, evil = hostile_trace_and_result()
    report = tmp_path / "diff.html"
    write_diff_html(diff_results(make_result(make_trace()), evil), report)
    browser.open(report)
    assert problems(browser, report) == []
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    assert browser.evaluate("document.scripts.length") == 0
    for sec in ("metrics", "findings", "categories", "kernels"):
        assert browser.evaluate(f"!!document.getElementById('{sec}')"), sec
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(ARTIFACTS / "diff.png")


def test_job_page_renders_the_critical_path_across_ranks(browser, tmp_path):
    """The job page of the rank_imbalance pair (torch.profiler, 2 ranks): the section on the
    critical path across ranks shows a row a job step and the two linked what-ifs, and the
    page's one script (the table sorter) runs without error or request."""
    from traceanalyzer.analysis.job_reduce import analyze_summaries, reduce_trace
    from traceanalyzer.analysis.window import choose_window
    from traceanalyzer.batch.index import render_job_page
    from traceanalyzer.ingest import load

    ranks = [
        REPO / "sample_traces" / "torch" / f"rank_imbalance_bad_rank{r}.json.gz" for r in (0, 1)
    ]
    if not all(p.is_file() for p in ranks):
        pytest.skip("sample traces missing")
    job = analyze_summaries([reduce_trace(choose_window(load(p), "steps")) for p in ranks])
    report = tmp_path / "job.html"
    report.write_text(render_job_page(job), encoding="utf-8")
    browser.open(report)
    browser.evaluate("document.querySelector('table.sortable th').click()")
    browser.drain(0.2)
    assert problems(browser, report) == []
    rows = "document.querySelectorAll('#job-critical-steps tr').length"
    assert browser.evaluate(rows) == 1 + job.critical.steps.height
    assert browser.evaluate("document.querySelectorAll('#job-critical-whatif tr').length") == 3
    assert "set by" in browser.evaluate("document.getElementById('job-critical-steps').textContent")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(ARTIFACTS / "job.png")


def test_screenshot_tool(tmp_path):
    """tools/screenshot.py, run as a script the way docs/report.md says."""
    if not find_browser():
        pytest.skip("no Chromium installed (apt-get install chromium)")
    report = tmp_path / "r.html"
    trace = make_trace()
    write_html(make_result(trace), report, trace)
    out = tmp_path / "r.png"

    def tool(*args: str) -> int:
        return subprocess.run([sys.executable, str(REPO / "tools" / "screenshot.py"), *args],
                              capture_output=True, timeout=120).returncode

    assert tool(str(report), str(out), "--dark", "--section", "timeline", "--height", "700") == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tool(str(tmp_path / "missing.html"), str(out)) == 2


def test_missing_browser_is_a_usage_error(monkeypatch):
    from traceanalyzer.errors import UsageError

    monkeypatch.setenv("TRACEANALYZER_CHROMIUM", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError):
        Browser()


def test_detectors_catch_script_requests_and_errors(browser, tmp_path):
    """Negative control: the checks above would notice a script run, a fetch or an error."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><script>window.__pwned = 1;"
                    "console.error('boom')</script><img src='http://127.0.0.1:9/x.png'>"
                    "</body></html>")
    browser.open(page)
    assert browser.evaluate("window.__pwned") == 1
    found = problems(browser, page)
    assert any(p.startswith("request: http://127.0.0.1:9/") for p in found)
    assert any("console.error" in p for p in found)


def test_roofline_renders(browser, tmp_path):
    """The roofline of a real H200 recording: the chart with its ridge and points, the table."""
    path = REPO / "sample_traces" / "programs" / "torch" / "gpt_bf16_torch.json.gz"
    if not path.is_file():
        pytest.skip("the program recordings are not in this checkout")
    import traceanalyzer
    from traceanalyzer.analysis import analyze_trace
    from traceanalyzer.analysis.window import choose_window, parse_window

    trace = choose_window(traceanalyzer.load(path, use_cache=False), parse_window("steps"))
    result = analyze_trace(trace, rules=False)
    report = tmp_path / "roofline.html"
    write_html(result, report, trace)
    browser.open(report)
    assert problems(browser, report) == []
    assert browser.evaluate("document.querySelectorAll('svg.roofline circle.rl-point').length") > 10
    assert "ridge" in browser.evaluate("document.querySelector('svg.roofline g.ridge').textContent")
    assert browser.evaluate("document.querySelectorAll('table.roofline-table tbody tr').length") > 5
    assert browser.evaluate("document.querySelector('svg.roofline').getBoundingClientRect().width") > 300
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.evaluate("document.getElementById('roofline').scrollIntoView()")
    browser.screenshot(ARTIFACTS / "report_roofline.png", full_page=False)
