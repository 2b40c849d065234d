"""Screenshot an HTML report with headless Chromium (for READMEs and reviews).

    python tools/screenshot.py REPORT.html OUT.png [--dark] [--width 1280] [--height 0]
        [--section timeline]

``--height 0`` (the default) captures the whole page; a positive height captures the top of it.
Needs a Chromium-family browser (Debian: ``apt-get install chromium``) or
``TRACEANALYZER_CHROMIUM`` pointing at one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support.cdp

from tests.support.cdp import Browser, CDPError  # noqa: E402
from traceanalyzer.errors import TraceAnalyzerError  # noqa: E402


def screenshot(report: str | Path, out: str | Path, *, dark: bool = False, width: int = 1280,
               height: int = 0, section: str | None = None) -> None:
    """Render ``report`` and save a PNG to ``out`` (from ``section``'s top when given)."""
    with Browser(width=width, height=height or 900) as browser:
        browser.open(report, dark=dark)
        if section:
            browser.evaluate(f"(document.getElementById({json.dumps(section)}) || "
                             "document.body).scrollIntoView()")
        browser.screenshot(out, full_page=height <= 0 and not section, width=width)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/screenshot.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dark", action="store_true", help="emulate prefers-color-scheme: dark")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=0,
                        help="viewport height; 0 captures the full page")
    parser.add_argument("--section", help="scroll to this section first (e.g. timeline, "
                        "findings); captures one viewport")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(f"error: {args.report}: no such file", file=sys.stderr)
        return 2
    try:
        screenshot(args.report, args.out, dark=args.dark, width=args.width, height=args.height,
                   section=args.section)
    except (TraceAnalyzerError, CDPError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
