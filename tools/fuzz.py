"""Mutation fuzzing of the real CLI, outside CI (a script, not a test).

    nice -n 10 python tools/fuzz.py --minutes 30 [--targets kineto,gz,nsys,perfetto,rules,cli]
        [--save DIR] [--seed N] [--timeout S] [--memory-mb MB]

Starts from real small inputs (the bad-input corpus, sample traces of each format, the rule
files, a hostile trace), mutates them (bytes flipped, cut, junk inserted; JSON fields given
hostile values; SQLite cells, rows, tables and columns changed; YAML values given other types;
option strings drawn from the CLI's options with hostile values) and runs
``python -m traceanalyzer`` on each mutant in a child process, one at a time, under a memory
limit (``RLIMIT_AS``) and a timeout. A run fails when it

- prints a traceback (``traceback``), or ends with exit code 3 (``internal``);
- ends with an exit code outside 0, 1 (only with ``--fail-on``) and 2, or by a signal
  (``exit-code``, ``signal``);
- runs past the timeout (``hang``);
- runs out of memory or peaks above ``--rss-mb`` on these small inputs (``memory``);
- ends with exit code 2 but more than one line on stderr outside click's usage text
  (``multi-line``), or sends control characters (ESC, BEL, CR, C1, bidi overrides) to the
  terminal (``escape``).

Each failing input is saved under ``--save`` (default /tmp/traceanalyzer-fuzz2) as
``CLASS/TARGET-HASH.EXT`` with ``.txt`` beside it (the command, exit code and stderr). At the
end (and every ``--report-every`` runs) it prints the runs per target, the outcomes and the
failures by class with their distinct signatures. Exit code 1 when anything failed.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: Control characters that must never reach a terminal (C0 but tab/newline, DEL, C1, bidi).
TERMINAL_HOSTILE = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")

HOSTILE_STRINGS = [
    "",
    " ",
    "\x00",
    "\x1b]0;pwned\x07",
    "\x1b[2J\r",
    "\u202eevil",
    "\x9b31m",
    "\ud800",
    "\udcff",
    "\uffff",
    "<script>alert(1)</script>",
    "https://evil.example/x",
    "a@b.com",
    '=HYPERLINK("http://x")',
    "{window_ms.__class__}",
    "%s%n",
    "../../etc/passwd",
    "A" * 5000,
    "名前",
    "\U0001f600",
    "\u2028\u2029",
    "'; DROP TABLE x; --",
]
HOSTILE_NUMBERS = [
    0,
    -1,
    1,
    2**31,
    -(2**31) - 1,
    2**63 - 1,
    2**63,
    -(2**63),
    2**64,
    10**30,
    1e308,
    -1e308,
    1e-320,
    0.5,
    float("nan"),
    float("inf"),
    True,
]


def hostile_value(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(HOSTILE_NUMBERS)
    if roll < 0.75:
        return rng.choice(HOSTILE_STRINGS)
    if roll < 0.85:
        return None
    if roll < 0.92:
        return [rng.choice(HOSTILE_NUMBERS), rng.choice(HOSTILE_STRINGS)]
    depth = rng.choice([2, 50, 500])
    value: object = 1
    for _ in range(depth):
        value = {"x": value} if rng.random() < 0.5 else [value]
    return value


# -- byte-level mutations ------------------------------------------------------------------------


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        if not out:
            out += bytes(rng.randrange(256) for _ in range(8))
        elif op < 0.35:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                out[rng.randrange(len(out))] = rng.randrange(256)
        elif op < 0.55:  # cut the end
            del out[rng.randrange(len(out)) :]
        elif op < 0.75:  # insert junk or an interesting token
            at = rng.randrange(len(out) + 1)
            token = rng.choice(
                [
                    b"\x00",
                    b"\xff\xfe",
                    b"\\ud800",
                    b"NaN",
                    b"1e999",
                    b"[" * 200,
                    b'"',
                    b"{",
                    b"}",
                    b"]",
                    b",",
                    b"-",
                    b"99999999999999999999",
                    bytes(rng.randrange(256) for _ in range(rng.randint(1, 32))),
                ]
            )
            out[at:at] = token
        elif op < 0.9:  # duplicate a chunk
            a = rng.randrange(len(out))
            b = min(len(out), a + rng.randint(1, 4096))
            at = rng.randrange(len(out) + 1)
            out[at:at] = out[a:b]
        else:  # delete a chunk
            a = rng.randrange(len(out))
            del out[a : a + rng.randint(1, 256)]
    return bytes(out)


# -- Kineto JSON ---------------------------------------------------------------------------------

EVENT_FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "s", "bp"]
ARG_FIELDS = [
    "correlation",
    "External id",
    "device",
    "stream",
    "grid",
    "block",
    "bytes",
    "Input Dims",
    "Input type",
    "Call stack",
    "registers per thread",
    "shared memory",
    "context",
    "queued",
    "Ev Idx",
    "cuda_sync_kind",
]
META_FIELDS = [
    "deviceProperties",
    "distributedInfo",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "traceName",
    "schemaVersion",
    "trace_id",
    "cupti_version",
]


def mutate_kineto_doc(doc: dict, rng: random.Random) -> dict:
    events = doc.get("traceEvents")
    if not isinstance(events, list) or not events:
        return doc
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        ev = events[rng.randrange(len(events))]
        if not isinstance(ev, dict):
            continue
        if op < 0.4:
            ev[rng.choice(EVENT_FIELDS)] = hostile_value(rng)
        elif op < 0.6:
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                args[rng.choice(ARG_FIELDS)] = hostile_value(rng)
        elif op < 0.7:
            ev.pop(rng.choice(EVENT_FIELDS), None)
        elif op < 0.78:  # duplicates, with or without a change
            for _ in range(rng.choice([1, 2, 100])):
                events.append(dict(ev))
        elif op < 0.84:  # names from the hostile list on every event of one category
            cat = ev.get("cat")
            name = rng.choice(HOSTILE_STRINGS)
            for e in events:
                if isinstance(e, dict) and e.get("cat") == cat:
                    e["name"] = str(e.get("name", "")) + name
        elif op < 0.9:
            doc[rng.choice(META_FIELDS)] = hostile_value(rng)
        elif op < 0.95:
            props = doc.get("deviceProperties")
            if isinstance(props, list) and props and isinstance(props[0], dict):
                props[0][
                    rng.choice(
                        [
                            "id",
                            "name",
                            "numSms",
                            "computeMajor",
                            "totalGlobalMem",
                            "maxThreadsPerBlock",
                            "sharedMemPerBlock",
                        ]
                    )
                ] = hostile_value(rng)
        elif op < 0.97:  # keys that all tie: one time, correlation or External id for all
            field, value = rng.choice([("ts", 0), ("ts", 100), ("correlation", 1),
                                       ("External id", 1), ("dur", 0)])
            for e in events:
                if not isinstance(e, dict):
                    continue
                if field in ("ts", "dur"):
                    e[field] = value
                elif isinstance(e.get("args"), dict):
                    e["args"][field] = value
        elif op < 0.985:  # one long string (escaped quotes, escapes, wide text) in a field
            piece = rng.choice(['"', "\\", "\u00e9", "\U0001f600", "x", "名"])
            text = piece * rng.choice([70_000, 300_000, 1_000_000])
            if rng.random() < 0.5:
                ev["name"] = text
            elif isinstance(ev.get("args"), dict):
                ev["args"][rng.choice(ARG_FIELDS)] = text
        else:  # scale time: µs traces read as ns and the other way round
            scale = rng.choice([1000, 1e-3, 1e9])
            for e in events:
                if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] * scale
                    if rng.random() < 0.3:
                        break
    return doc


def mutate_kineto(seed: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.7:
        try:
            doc = json.loads(seed)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            text = json.dumps(mutate_kineto_doc(doc, rng), allow_nan=True)
            data = text.encode("utf-8", "surrogatepass")
            return mutate_bytes(data, rng) if rng.random() < 0.2 else data
    return mutate_bytes(seed, rng)


def mutate_gz(seed: bytes, rng: random.Random) -> bytes:
    data = mutate_kineto(seed, rng)  # ``seed`` is the uncompressed JSON
    roll = rng.random()
    if roll < 0.15:  # several members
        cut = rng.randrange(len(data) + 1)
        return gzip.compress(data[:cut]) + gzip.compress(data[cut:])
    packed = gzip.compress(data, compresslevel=1)
    if roll < 0.4:
        return mutate_bytes(packed, rng)
    return packed


# -- Nsight Systems SQLite -----------------------------------------------------------------------


def mutate_sqlite(seed: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.12:
        return mutate_bytes(seed, rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.sqlite"
        path.write_bytes(seed)
        con = sqlite3.connect(path)
        try:
            tables = [
                r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            for _ in range(rng.randint(1, 4)):
                table = rng.choice(tables)
                cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
                if not cols:
                    continue
                col = rng.choice(cols)
                op = rng.random()
                value = hostile_value(rng)
                if isinstance(value, (list, dict)):
                    value = json.dumps(value)
                if isinstance(value, float) and value != value:
                    value = None
                if isinstance(value, int) and not -(2**63) <= value < 2**63:
                    value = str(value)
                if isinstance(value, str):
                    value = value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
                if op < 0.45:
                    con.execute(
                        f'UPDATE "{table}" SET "{col}" = ? WHERE rowid IN '
                        f'(SELECT rowid FROM "{table}" ORDER BY random() LIMIT ?)',
                        (value, rng.choice([1, 3, 1000000])),
                    )
                elif op < 0.55:
                    con.execute(
                        f'UPDATE "{table}" SET "{col}" = ?',
                        (rng.choice([None, b"\x00\x01", "text", 2**62, -5]),),
                    )
                elif op < 0.65:
                    con.execute(
                        f'DELETE FROM "{table}" WHERE rowid IN '
                        f'(SELECT rowid FROM "{table}" ORDER BY random() LIMIT ?)',
                        (rng.choice([1, 10, 1000000]),),
                    )
                elif op < 0.75:
                    con.execute(
                        f'INSERT INTO "{table}" SELECT * FROM "{table}" ORDER BY random() LIMIT ?',
                        (rng.choice([1, 50]),),
                    )
                elif op < 0.82:
                    con.execute(f'DROP TABLE "{table}"')
                    tables.remove(table)
                    if not tables:
                        break
                elif op < 0.9:
                    con.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{col}" TO "{col}_x"')
                elif op < 0.95 and "StringIds" in tables:
                    con.execute(
                        "UPDATE StringIds SET value = ? WHERE id IN "
                        "(SELECT id FROM StringIds ORDER BY random() LIMIT 5)",
                        (
                            rng.choice(HOSTILE_STRINGS[:-1])
                            .encode("utf-8", "replace")
                            .decode("utf-8"),
                        ),
                    )
                else:
                    con.execute(f'CREATE TABLE "{table}_copy" AS SELECT * FROM "{table}"')
            con.commit()
        except sqlite3.Error:
            pass
        finally:
            con.close()
        return path.read_bytes()


# -- Perfetto and rule files ---------------------------------------------------------------------


def mutate_perfetto(seed: bytes, rng: random.Random) -> bytes:
    return mutate_bytes(seed, rng)


RULE_KEYS = [
    "slug",
    "id",
    "title",
    "severity",
    "enabled",
    "parameters",
    "message",
    "fix",
    "rationale",
    "examples",
    "query",
    "detector",
    "requires",
    "min_impact_pct",
]


def mutate_rule(seed: bytes, rng: random.Random) -> bytes:
    import yaml

    if rng.random() < 0.25:
        return mutate_bytes(seed, rng)
    try:
        doc = yaml.safe_load(seed)
    except yaml.YAMLError:
        return mutate_bytes(seed, rng)
    if not isinstance(doc, dict):
        return mutate_bytes(seed, rng)
    if rng.random() < 0.2:  # a new rule (no detector of its own unless it has a query)
        doc["slug"] = f"fuzz-rule-{rng.randrange(10**6)}"
        doc["id"] = f"TA{rng.randrange(900, 999)}"
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        params = doc.get("parameters")
        if op < 0.4 and isinstance(params, dict) and params:
            key = rng.choice(list(params))
            if isinstance(params[key], dict) and rng.random() < 0.7:
                params[key][rng.choice(["default", "unit", "min", "max", "description"])] = (
                    hostile_value(rng)
                )
            else:
                params[key] = hostile_value(rng)
        elif op < 0.6:
            doc[rng.choice(RULE_KEYS)] = hostile_value(rng)
        elif op < 0.7:
            doc.pop(rng.choice(RULE_KEYS), None)
        elif op < 0.85:
            doc["message"] = rng.choice(
                [
                    "{impact_ms:.1f}",
                    "{impact_ms:>99999}",
                    "{}",
                    "{0}",
                    "{impact_ms!s}",
                    "{nope}",
                    "}{",
                    "{impact_ms:%}",
                    "{" * 50,
                    "{impact_ms:.{impact_ms}f}",
                ]
            )
        else:
            doc["query"] = rng.choice(
                [
                    "SELECT * FROM gpu",
                    "SELECT name FROM gpu WHERE end_ns < start_ns",
                    "SELECT * FROM read_csv('/etc/passwd')",
                    "SELECT 1/0 AS x FROM gpu",
                    "WITH a AS (SELECT * FROM gpu) SELECT * FROM a, a AS b, a AS c",
                    "SELECT " + "(" * 500 + "1" + ")" * 500 + " FROM gpu",
                    "SELECT",
                ]
            )
    try:
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    except RecursionError:  # a value nested thousands deep: written as flow text instead
        depth = rng.choice([500, 3000, 20000])
        text = seed.decode("utf-8", "replace") + "\nextra: " + "[" * depth + "]" * depth + "\n"
    return text.encode("utf-8", "surrogatepass")


# -- CLI option strings --------------------------------------------------------------------------

OPTION_VALUES: dict[str, list[str]] = {
    "--top": ["0", "-1", "1", "10", "99999999999", str(10**30), "x", "1.5", ""],
    "--steps": [
        "0",
        "1:3",
        "3:1",
        "-1",
        "0,1,2",
        "99999",
        str(10**30),
        "a:b",
        ":",
        "",
        "1:",
        ":2",
        "0x10",
        "1e3",
        "٣",
    ],
    "--time-window": [
        "0:1ms",
        "1ms:0",
        "0:" + "9" * 400,
        "-5:5",
        "0:1e308s",
        "abc",
        ":",
        "",
        "5us:5us",
        "0:1h",
        "nan:inf",
        "1ms:2xs",
    ],
    "--window": [
        "steps",
        "all",
        "profiler-range",
        "0:1ms",
        "10ms:2ms",
        "x:y",
        "",
        "all:all",
        "0:" + "9" * 40,
    ],
    "--ranks": ["0", "0,1", "-1", "99999999999999999999", "a", "", ",", "0-3", "1e9"],
    "--fail-on": ["info", "low", "high", "critical", "bogus"],
    "--set": [
        "gpu-idle-gaps.min_gap_us=200",
        "gpu-idle-gaps.min_gap_us=-1",
        "gpu-idle-gaps.min_gap_us=1e308",
        "gpu-idle-gaps.min_gap_us=nan",
        "gpu-idle-gaps.min_gap_us=abc",
        "nope.x=1",
        "gpu-idle-gaps.nope=1",
        "=",
        "gpu-idle-gaps.min_gap_us=" + "9" * 400,
        "a.b.c=d",
        "\x1b[2J.x=1",
    ],
    "--enable": ["gpu-idle-gaps", "nope", "", "\x1b]0;t\x07"],
    "--disable": ["gpu-idle-gaps", "nope", "hidden-sync", "\u202e"],
    "--report": ["kernels", "api", "memops", "nvtx", "x"],
    "--format": ["table", "csv", "json", "xml"],
    "--limit": ["0", "-1", "5", str(10**30)],
    "--min-lateness-us": ["0", "-1", "1e308", "nan", "x"],
}
COMMAND_OPTIONS = {
    "analyze": [
        "--top",
        "--steps",
        "--time-window",
        "--window",
        "--ranks",
        "--fail-on",
        "--set",
        "--enable",
        "--disable",
        "--no-rules",
        "-q",
        "-v",
        "--json",
        "--markdown",
        "--html",
        "--annotate",
    ],
    "stats": ["--report", "--format", "--limit"],
    "diff": ["--top", "--window", "--set", "--disable", "--json", "--markdown"],
    "job": ["--top", "--window", "--min-lateness-us", "--no-rules", "--json"],
    "rules": [],
}


def cli_args(rng: random.Random, trace: Path, out: Path) -> list[str]:
    command = rng.choice(["analyze"] * 5 + ["stats"] * 2 + ["diff", "job", "rules"])
    if command == "rules":
        return [
            "rules",
            rng.choice(["list", "show"]),
            *rng.choice([[], ["gpu-idle-gaps"], ["nope"], ["\x1b[2J"], ["--format", "json"]]),
        ]
    args = [command, str(trace)] + ([str(trace)] if command == "diff" else [])
    for option in rng.sample(
        COMMAND_OPTIONS[command], k=min(len(COMMAND_OPTIONS[command]), rng.randint(1, 4))
    ):
        if option in ("--no-rules", "-q", "-v"):
            args.append(option)
        elif option in ("--json", "--markdown", "--html", "--annotate"):
            args += [
                option,
                rng.choice(
                    [
                        str(out / f"o{option[2:]}"),
                        "-",
                        str(trace),
                        str(out / "missing" / "x"),
                        str(out / ("n" * 300)),
                    ]
                ),
            ]
        else:
            args += [option, rng.choice(OPTION_VALUES[option])]
    if rng.random() < 0.1:
        args.insert(rng.randrange(1, len(args) + 1), rng.choice(["--bogus", "--", "-x", "--top"]))
    return args


# -- running one input ---------------------------------------------------------------------------


class Fuzzer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.save: Path = args.save
        self.work = Path(tempfile.mkdtemp(prefix="ta-fuzz-"))
        self.runs: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.signatures: dict[str, tuple[int, Path]] = {}
        self.seeds = collect_seeds(self.work)

    def limits(self) -> None:
        mem = self.args.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.setsid()

    def run_cli(self, argv: list[str], cwd: Path) -> tuple[int | None, str, str, int, float]:
        out, err = cwd / ".stdout", cwd / ".stderr"
        env = {
            **os.environ,
            "TRACEANALYZER_DEBUG": "",
            "PYTHONPATH": str(REPO),
            "TRACEANALYZER_CACHE_DIR": str(cwd / "cache"),
        }
        start = time.monotonic()
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(
                [sys.executable, "-m", "traceanalyzer", *argv],
                cwd=cwd,
                stdout=fo,
                stderr=fe,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=self.limits,
            )
            rc: int | None = None
            rss_kb = 0
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    rc = os.waitstatus_to_exitcode(status)
                    rss_kb = usage.ru_maxrss
                    proc.returncode = rc
                    break
                if time.monotonic() - start > self.args.timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    _, _, usage = os.wait4(proc.pid, 0)
                    proc.returncode = -9
                    rss_kb = usage.ru_maxrss
                    break
                time.sleep(0.02)
        seconds = time.monotonic() - start
        return (
            rc,
            out.read_text("utf-8", "replace"),
            err.read_text("utf-8", "replace"),
            rss_kb,
            seconds,
        )

    def one(self, target: str) -> None:
        case = self.work / f"case-{self.runs.total()}"
        case.mkdir()
        try:
            self._one(target, case)
        finally:
            shutil.rmtree(case, ignore_errors=True)

    def _one(self, target: str, case: Path) -> None:
        rng = self.rng
        small = self.seeds["kineto"][0][1]
        if target == "cli":
            trace = case / "t.json"
            trace.write_bytes(small)
            data = b""
            argv = cli_args(rng, trace, case)
            ext = ".args"
        elif target == "rules":
            name, seed = rng.choice(self.seeds["rules"])
            try:
                data = mutate_rule(seed, rng)
            except (RecursionError, ValueError, OverflowError):
                data = mutate_bytes(seed, rng)
            trace = case / "t.json"
            trace.write_bytes(small)
            rule = case / "rule.yaml"
            rule.write_bytes(data)
            argv = (
                ["analyze", str(trace), "--rules", str(rule)]
                if rng.random() < 0.8
                else ["rules", "list", "--rules", str(rule)]
            )
            if rng.random() < 0.3:  # the auto-loaded project config
                config = mutate_bytes(seed, rng) if rng.random() < 0.3 else data
                (case / "traceanalyzer.yaml").write_bytes(config)
            ext = ".yaml"
        else:
            name, seed = rng.choice(self.seeds[target])
            mutate: Callable[[bytes, random.Random], bytes] = {
                "kineto": mutate_kineto,
                "gz": mutate_gz,
                "nsys": mutate_sqlite,
                "perfetto": mutate_perfetto,
            }[target]
            try:
                data = mutate(seed, rng)
            except (RecursionError, ValueError, OverflowError):  # the mutator's, not a finding
                data = mutate_bytes(seed, rng)
            ext = {"kineto": ".json", "gz": ".json.gz", "nsys": ".sqlite", "perfetto": ".pftrace"}[
                target
            ]
            trace = case / f"t{ext}"
            trace.write_bytes(data)
            argv = [
                "analyze",
                str(trace),
                "--no-cache",
                "--json",
                str(case / "o.json"),
                "--markdown",
                str(case / "o.md"),
            ]
            roll = rng.random()
            if roll < 0.25:
                argv += ["--html", str(case / "o.html"), "--annotate", str(case / "o.trace.json")]
            elif roll < 0.45:
                argv = [
                    "stats",
                    str(trace),
                    "--no-cache",
                    "--format",
                    rng.choice(["csv", "table", "json"]),
                    "--report",
                    rng.choice(["kernels", "api", "memops", "nvtx"]),
                ]
            elif roll < 0.5:
                argv += ["--window", "all"]
        self.runs[target] += 1
        rc, stdout, stderr, rss_kb, seconds = self.run_cli(argv, case)
        verdict = self.judge(argv, rc, stdout, stderr, rss_kb, case)
        self.outcomes[f"{target}:{verdict if verdict in ('ok', 'rejected') else 'FAILED'}"] += 1
        if verdict in ("ok", "rejected"):
            return
        self.failures[verdict] += 1
        if target == "cli":
            data = json.dumps(argv).encode()
        digest = hashlib.sha1(data + " ".join(argv).encode("utf-8", "replace")).hexdigest()[:12]
        folder = self.save / verdict
        folder.mkdir(parents=True, exist_ok=True)
        saved = folder / f"{target}-{digest}{ext}"
        saved.write_bytes(data)
        extra = [p for p in case.iterdir() if p.name == "traceanalyzer.yaml"]
        for p in extra:
            shutil.copy(p, folder / f"{target}-{digest}.traceanalyzer.yaml")
        (folder / f"{target}-{digest}.txt").write_text(
            f"argv: {json.dumps(argv)}\nexit: {rc}\nrss_mb: {rss_kb // 1024}\n"
            f"seconds: {seconds:.1f}\n--- stderr (tail)\n{stderr[-3000:]}\n--- stdout (head)\n"
            f"{stdout[:2000]}\n",
            encoding="utf-8",
            errors="replace",
        )
        signature = f"{verdict}: {_signature(stderr, rc)}"
        count, first = self.signatures.get(signature, (0, saved))
        self.signatures[signature] = (count + 1, first)
        if count == 0:
            print(f"NEW {signature}\n    {first}", flush=True)

    def judge(
        self, argv: list[str], rc: int | None, stdout: str, stderr: str, rss_kb: int, case: Path
    ) -> str:
        if rc == -9 and "out of memory" not in stderr:
            if rss_kb >= (self.args.memory_mb << 10) * 0.9:
                return "memory"
            return "hang"
        if "Traceback (most recent call last)" in stderr or "panicked at" in stderr:
            return "traceback"
        if "out of memory" in stderr or "MemoryError" in stderr:
            return "memory"
        if rss_kb > self.args.rss_mb << 10:
            return "memory"
        if rc == 3:
            return "internal"
        if rc is None or rc < 0:
            return "signal"
        if rc not in (0, 1, 2) or (rc == 1 and "--fail-on" not in argv):
            return "exit-code"
        if TERMINAL_HOSTILE.search(stdout) or TERMINAL_HOSTILE.search(stderr):
            return "escape"
        if rc == 2:
            lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
            usage = any(ln.startswith(("Usage:", "Error:", "Try ")) for ln in lines)
            if not usage and len([ln for ln in lines if not ln.startswith("warning:")]) > 1:
                return "multi-line"
            return "rejected"
        return "ok"

    def report(self, seconds: float) -> None:
        print(f"--- {self.runs.total()} runs in {seconds:.0f} s", flush=True)
        print("runs per target: " + json.dumps(dict(sorted(self.runs.items()))))
        print("outcomes: " + json.dumps(dict(sorted(self.outcomes.items()))))
        print("failures by class: " + json.dumps(dict(sorted(self.failures.items()))))
        for sig, (count, first) in sorted(self.signatures.items()):
            print(f"  {count:5d}  {sig}\n         {first}")
        sys.stdout.flush()


def _signature(stderr: str, rc: int | None) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    text = lines[-1] if lines else f"exit {rc}, no stderr"
    for ln in lines:
        if ln.startswith(("internal error", "error:")):
            text = ln
            break
    text = re.sub(r"/tmp/\S+", "PATH", text)
    text = re.sub(r"\d+", "N", text)
    return text[:150]


def collect_seeds(work: Path) -> dict[str, list[tuple[str, bytes]]]:
    """Real small inputs of each format, smallest first (the first Kineto one is the CLI's)."""
    seeds: dict[str, list[tuple[str, bytes]]] = {
        k: [] for k in ("kineto", "gz", "nsys", "perfetto", "rules")
    }
    torch = sorted(
        (REPO / "sample_traces" / "torch").glob("*.json.gz"), key=lambda p: p.stat().st_size
    )[:6]
    for p in torch:
        raw = gzip.decompress(p.read_bytes())
        seeds["kineto"].append((p.name, raw))
        seeds["gz"].append((p.name, raw))  # mutated as JSON, then compressed
    for p in sorted((REPO / "tests" / "reliability" / "corpus").glob("*.json")):
        seeds["kineto"].append((p.name, p.read_bytes()))
    try:
        from tests.reliability.test_injection import hostile_trace

        seeds["kineto"].append(("hostile", json.dumps(hostile_trace()).encode()))
    except Exception:  # noqa: BLE001 - the seed is optional
        pass
    nsys = sorted(
        (REPO / "sample_traces" / "nsys").glob("*.sqlite"), key=lambda p: p.stat().st_size
    )[:3]
    seeds["nsys"] = [(p.name, p.read_bytes()) for p in nsys]
    try:
        from tests.support.perfetto_builder import kineto_to_perfetto, small_rocprof_trace

        seeds["perfetto"].append(("rocprof", small_rocprof_trace()))
        out = work / "seed.pftrace"
        kineto_to_perfetto(torch[0], out)
        seeds["perfetto"].append((torch[0].name, out.read_bytes()))
    except Exception as exc:  # noqa: BLE001
        print(f"no Perfetto seeds: {exc}", file=sys.stderr)
    seeds["rules"] = [(p.name, p.read_bytes()) for p in sorted((REPO / "rules").glob("*.yaml"))]
    return {k: v for k, v in seeds.items() if v}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--targets", default="kineto,gz,nsys,perfetto,rules,cli")
    parser.add_argument("--save", type=Path, default=Path("/tmp/traceanalyzer-fuzz2"))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--timeout", type=float, default=60, help="seconds per run")
    parser.add_argument("--memory-mb", type=int, default=4096, help="RLIMIT_AS of a run")
    parser.add_argument(
        "--rss-mb",
        type=int,
        default=1500,
        help="peak RSS that counts as a blow-up on these small inputs",
    )
    parser.add_argument("--report-every", type=int, default=100)
    args = parser.parse_args()
    fuzzer = Fuzzer(args)
    targets = [t for t in args.targets.split(",") if t in fuzzer.seeds or t == "cli"]
    print(
        f"seed {args.seed}; targets {targets}; seeds "
        + json.dumps({k: len(v) for k, v in fuzzer.seeds.items()}),
        flush=True,
    )
    start = time.monotonic()
    try:
        while time.monotonic() - start < args.minutes * 60:
            fuzzer.one(targets[fuzzer.runs.total() % len(targets)])
            if fuzzer.runs.total() % args.report_every == 0:
                fuzzer.report(time.monotonic() - start)
    except KeyboardInterrupt:
        pass
    finally:
        fuzzer.report(time.monotonic() - start)
        shutil.rmtree(fuzzer.work, ignore_errors=True)
    return 1 if fuzzer.failures else 0


if __name__ == "__main__":
    sys.exit(main())
