"""The terminal output (traceanalyzer/report/terminal.py) as the command line prints it."""

from __future__ import annotations

from tests.support.cli import run_cli
from tests.support.kineto_builder import KinetoBuilder


def test_terminal_escapes_hostile_names(tmp_path):
    b = KinetoBuilder()
    b.launch("evil\x1b[31mred\x07kernel", 1, 1, 2, 1)
    out = run_cli("analyze", str(b.write(tmp_path / "t.json")), "--no-cache")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout


def test_a_file_of_several_ranks_lists_them_all(public_dir):
    from traceanalyzer.analysis import analyze_trace
    from traceanalyzer.analysis.window import choose_window
    from traceanalyzer.ingest import read_any
    from traceanalyzer.report.markdown import render_markdown
    from traceanalyzer.report.terminal import render_summary

    path = public_dir / "nsys" / "nsysai_2gpu_sendrecv_before.sqlite"
    result = analyze_trace(choose_window(read_any(path)), rules=False)
    text = render_summary(result)
    assert "Ranks in this file (2;" in text and "0 *" in text
    assert "**Ranks in this file** (2;" in render_markdown(result)


def test_memory_section(tmp_path):
    """A profile_memory=True recording: the device's peaks and who held them, one line."""
    from tests.support.paths import REPO

    trace = REPO / "sample_traces" / "programs" / "torch" / "empty_cache_good_torch.json.gz"
    out = run_cli("analyze", str(trace), "--no-cache").stdout
    line = out.split("Device memory:\n", 1)[1].splitlines()[0]
    assert line.startswith("  GPU 0: peak allocated 1.97 GiB, 1.4% of the GPU, step ")
    assert "peak reserved 2.13 GiB" in line and "held at the peak by aten::" in line
