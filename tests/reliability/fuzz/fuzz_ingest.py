"""Long fuzzing session outside CI: the properties of tests/reliability/fuzz/props.py on as many
generated Chrome traces and nsys exports as fit in the time given.

    python tests/reliability/fuzz/fuzz_ingest.py --minutes 10 [--target chrome|nsys|both]
        [--save DIR]

Every failing input is saved under ``--save`` (default /tmp/traceanalyzer-fuzz) with the first
line of its error; distinct failures (by exception type and the innermost traceanalyzer frame)
are printed at the end with the count of examples run. Copy a saved input into
tests/reliability/corpus/ (keep it tiny) once the bug is fixed: tests/reliability/test_corpus.py
runs every file there.
Exit code 1 when anything failed.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: tests.*

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.reliability.fuzz.props import check_file, chrome_trace_bytes, nsys_db  # noqa: E402


class Session:
    def __init__(self, save: Path) -> None:
        self.save = save
        self.examples = {"chrome": 0, "nsys": 0}
        self.outcomes: dict[str, int] = {}
        self.failures: dict[str, tuple[int, Path]] = {}
        self.reasons: dict[str, int] = {}

    def run_one(self, kind: str, path: Path) -> None:
        self.examples[kind] += 1
        try:
            outcome = check_file(path)
            if outcome == "rejected":  # why, in short: a fuzzer that only makes garbage tests little
                self.reasons[_reason(path)] = self.reasons.get(_reason(path), 0) + 1
        except Exception as exc:  # noqa: BLE001 - every failure is recorded, fuzzing goes on
            outcome = "FAILED"
            key = _signature(exc)
            data = path.read_bytes()
            digest = hashlib.sha1(data).hexdigest()[:12]
            saved = self.save / f"{kind}-{digest}{''.join(path.suffixes)}"
            self.save.mkdir(parents=True, exist_ok=True)
            saved.write_bytes(data)
            count, first = self.failures.get(key, (0, saved))
            self.failures[key] = (count + 1, first)
            if count == 0:
                print(f"FAILURE {key}\n  input: {first}", flush=True)
        self.outcomes[f"{kind}:{outcome}"] = self.outcomes.get(f"{kind}:{outcome}", 0) + 1


def _reason(path: Path) -> str:
    from traceanalyzer.errors import TraceAnalyzerError
    from traceanalyzer.ingest import load

    try:
        load(path, use_cache=False)
    except TraceAnalyzerError as exc:
        return re.sub(r"\d+", "N", str(exc).replace(str(path), "").lstrip(": "))[:70]
    return "rejected by the analysis"


def _signature(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "traceanalyzer" in f.filename
              or "props.py" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    first = (str(exc).splitlines() or [""])[0][:160]
    return f"{type(exc).__name__} at {where}: {first}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--target", choices=["chrome", "nsys", "both"], default="both")
    parser.add_argument("--save", type=Path, default=Path(tempfile.gettempdir()) / "traceanalyzer-fuzz")
    parser.add_argument("--round", type=int, default=200, help="examples per Hypothesis round")
    args = parser.parse_args()
    session = Session(args.save)
    deadline = time.monotonic() + args.minutes * 60
    fuzz = settings(max_examples=args.round, deadline=None, database=None,
                    phases=[Phase.generate], suppress_health_check=list(HealthCheck))

    @fuzz
    @given(chrome_trace_bytes())
    def chrome(case: tuple[bytes, str]) -> None:
        data, name = case
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_bytes(data)
            session.run_one("chrome", path)

    @fuzz
    @given(st.data())
    def nsys(data: st.DataObject) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            session.run_one("nsys", data.draw(nsys_db(Path(tmp) / "export.sqlite")))

    targets = {"chrome": [chrome], "nsys": [nsys], "both": [chrome, nsys]}[args.target]
    started = time.monotonic()
    rounds = 0
    while time.monotonic() < deadline:
        targets[rounds % len(targets)]()
        rounds += 1
        print(f"[{time.monotonic() - started:6.0f} s] examples {session.examples} "
              f"failures {sum(c for c, _ in session.failures.values())}", flush=True)
    print(f"\nexamples run: {session.examples} in {time.monotonic() - started:.0f} s")
    print(f"outcomes: {dict(sorted(session.outcomes.items()))}")
    print("rejected because:")
    for reason, count in sorted(session.reasons.items(), key=lambda kv: -kv[1]):
        print(f"  {count:6d}  {reason}")
    print(f"distinct failures: {len(session.failures)}")
    for key, (count, first) in session.failures.items():
        print(f"  {count} x {key}\n      e.g. {first}")
    return 1 if session.failures else 0


if __name__ == "__main__":
    sys.exit(main())
