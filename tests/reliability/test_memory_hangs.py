"""Issue 30, classes 3 and 4: inputs that blow up memory or hang, each stopped with one line.

Big inputs are made here at run time, in tmp_path, and kept small by small limits: a patched
memory figure for the decoded-bytes bound, an address-space limit (``resource.setrlimit`` in
the child) for the check itself. ``.nsys-rep`` exports that hang or write junk are in
``tests/ingest/nsys/test_rep.py``.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.support.paths import REPO, SAMPLES
from traceanalyzer import ingest
from traceanalyzer.cli.main import MAX_ERROR_CHARS, _one_line
from traceanalyzer.errors import InputError, RuleError
from traceanalyzer.ingest.textcap import MARKER, MAX_TEXT_CHARS, cap_text
from traceanalyzer.rules.schema import MAX_YAML_NODES, YamlTooBig, safe_load

CORPUS = REPO / "tests" / "reliability" / "corpus" / "yaml"
EVENT = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": %d, "dur": 1},\n'


def run_cli(
    *args: str, cwd: Path = REPO, limit_as: int | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # in the child only
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    full = {k: v for k, v in os.environ.items() if k != ingest.NO_MEMORY_CHECK_ENV}
    full["PYTHONPATH"] = str(REPO)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "traceanalyzer", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=full,
        preexec_fn=limit,
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("error: ") and "Traceback" not in proc.stderr
    assert len(lines[0]) <= len("error: ") + MAX_ERROR_CHARS
    return lines[0]


def member(data: bytes) -> bytes:
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def kineto_body(events: int) -> bytes:
    return b'{"traceEvents": [\n' + b"".join(EVENT % i for i in range(events)) + b"{}]}"


@pytest.fixture
def small_memory(monkeypatch: pytest.MonkeyPatch) -> int:
    """Memory for 8 MB of decoded Kineto JSON (2.2x) beyond the base."""
    monkeypatch.delenv(ingest.NO_MEMORY_CHECK_ENV, raising=False)
    budget = 8 << 20
    monkeypatch.setattr(
        ingest,
        "available_memory",
        lambda: ingest.BASE_MEMORY + int(budget * ingest.MEMORY_PER_BYTE["kineto"]),
    )
    return budget


# ---------------------------------------------------------------------------------------------
# Memory bound by what is decoded


def test_multi_member_gzip_is_bounded_by_what_it_decodes(tmp_path: Path, small_memory: int) -> None:
    """The last member's trailer says 4 bytes; the members before it hold 20 MB of events."""
    body = kineto_body(250_000)
    path = tmp_path / "multi.json.gz"
    path.write_bytes(member(body[:-4]) + member(body[-4:]))
    assert ingest.input_size(path) == 4  # the up-front estimate is fooled ...
    ingest.check_memory(path, "kineto")
    with pytest.raises(InputError, match="decompresses to more than"):  # ... the count is not
        ingest.read_any(path)


def test_gzip_with_a_lying_size_trailer(tmp_path: Path, small_memory: int) -> None:
    """A single member whose ISIZE is wrong (as it is, mod 2**32, past 4 GiB)."""
    body = kineto_body(250_000)
    data = bytearray(member(body))
    data[-4:] = (len(body) % 1000).to_bytes(4, "little")
    path = tmp_path / "wrapped.json.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="decompresses to more than"):
        ingest.read_any(path)


def test_a_gzip_within_the_bound_reads_whole(tmp_path: Path, small_memory: int) -> None:
    body = kineto_body(20_000)  # 1.7 MB, several members
    path = tmp_path / "ok.json.gz"
    path.write_bytes(member(body[: len(body) // 2]) + member(body[len(body) // 2 :]))
    assert ingest.read_any(path).gpu.height == 20_000


def test_perfetto_gzip_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ingest.NO_MEMORY_CHECK_ENV, raising=False)
    monkeypatch.setattr(
        ingest, "available_memory", lambda: ingest.BASE_MEMORY + 12 * (4 << 20)
    )  # 4 MB of protobuf
    packets = b"\x0a\x00" * (8 << 20)  # 16 MB of empty packets
    path = tmp_path / "t.pftrace.gz"
    path.write_bytes(member(packets[:-2]) + member(packets[-2:]))
    with pytest.raises(InputError, match="decompresses to more than"):
        ingest.read_any(path)


def test_address_space_limit_stops_with_one_line(tmp_path: Path) -> None:
    """Under RLIMIT_AS Polars used to die of a Rust panic and SIGABRT; the check stops first."""
    out = tmp_path / "r.json"
    proc = run_cli(
        "analyze",
        str(SAMPLES / "torch" / "gpt_step_bad.json.gz"),
        "--no-cache",
        "--json",
        str(out),
        limit_as=1000 << 20,
    )
    line = one_error_line(proc)
    assert "memory" in line and "panick" not in proc.stderr
    assert not out.exists()


def test_rlimits_lower_available_memory() -> None:
    code = (
        "import resource; from traceanalyzer import ingest; "
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "print(ingest.available_memory())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert 0 <= int(proc.stdout) < (3 << 30) - ingest.ADDRESS_SPACE_BASE


def test_cgroup_v1_and_v2_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2, unlimited = tmp_path / "v1", tmp_path / "v2", tmp_path / "none"
    for folder in (v1, v2, unlimited):
        folder.mkdir()
    (v1 / "memory.limit_in_bytes").write_text("1073741824\n")
    (v1 / "memory.usage_in_bytes").write_text("73741824\n")
    (v2 / "memory.max").write_text("2147483648\n")
    (v2 / "memory.current").write_text("147483648\n")
    (unlimited / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (unlimited / "memory.usage_in_bytes").write_text("1\n")
    monkeypatch.setattr(
        ingest, "_cgroup_folders", lambda: [("v1", v1), ("v2", v2), ("v1", unlimited)]
    )
    assert sorted(ingest._cgroup_left()) == [1_000_000_000, 2_000_000_000]
    assert ingest.available_memory() <= 1_000_000_000


# ---------------------------------------------------------------------------------------------
# Text caps


def test_long_names_are_cut_and_reports_stay_small(tmp_path: Path) -> None:
    name = "k" * (3 << 20)  # a 3 MB kernel name, three times
    quotes = '\\"' * (1 << 20)  # 2 MB of escaped quotes in one operator's name
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 1,
            "tid": 7,
            "ts": 10 + 10 * i,
            "dur": 5,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i in range(3)
    ]
    events.append(
        {"ph": "X", "cat": "cpu_op", "name": quotes, "pid": 1, "tid": 1, "ts": 1, "dur": 50}
    )
    trace = tmp_path / "long.json"
    trace.write_text(
        json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "G" * 100_000}]})
    )
    outs = {ext: tmp_path / f"r.{ext}" for ext in ("json", "html", "md")}
    proc = run_cli(
        "analyze",
        str(trace),
        "--no-cache",
        "--json",
        str(outs["json"]),
        "--html",
        str(outs["html"]),
        "--markdown",
        str(outs["md"]),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for out in outs.values():
        assert out.stat().st_size < 1 << 20, out  # the names alone were 11 MB
    warnings = json.loads(outs["json"].read_text())["trace"]["warnings"]
    assert any("cut 5 text fields longer than 65,536 characters" in w for w in warnings)
    loaded = ingest.read_any(trace)
    assert loaded.gpu["name"].str.len_chars().max() == MAX_TEXT_CHARS + len(MARKER)
    assert loaded.gpu["name"][0].endswith(MARKER)


def test_cap_text_leaves_short_text_alone() -> None:
    trace = ingest.read_any(SAMPLES / "torch" / "fp32_matmul_bad.json.gz")
    capped = cap_text(trace)
    assert all(capped.frames()[n].equals(f) for n, f in trace.frames().items())
    assert not any("text fields" in w for w in capped.meta.warnings)
    small = cap_text(ingest.read_any(SAMPLES / "torch" / "fp32_matmul_bad.json.gz"), limit=10)
    assert small.gpu["name"].str.len_chars().max() <= 10 + len(MARKER)


# ---------------------------------------------------------------------------------------------
# YAML alias bombs and error lines


def test_alias_bomb_is_refused_before_it_is_built() -> None:
    text = (CORPUS / "alias_bomb.yaml").read_text()
    assert len(text) < 600
    with pytest.raises(YamlTooBig, match=f"{MAX_YAML_NODES:,} nodes"):
        safe_load(text)
    assert safe_load("a: &x [1, 2]\nb: *x\nc: *x\n") == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}


def test_alias_bomb_rule_file_through_the_cli(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "bomb.yaml").write_text((CORPUS / "alias_bomb.yaml").read_text())
    proc = run_cli(
        "analyze",
        str(SAMPLES / "torch" / "fp32_matmul_bad.json.gz"),
        "--rules",
        str(rules),
        "--no-cache",
    )
    assert "alias" in one_error_line(proc)


def test_alias_bomb_project_config(tmp_path: Path) -> None:
    """The same bomb as an auto-loaded ./traceanalyzer.yaml."""
    (tmp_path / "traceanalyzer.yaml").write_text((CORPUS / "traceanalyzer.yaml").read_text())
    proc = run_cli(
        "analyze", str(SAMPLES / "torch" / "fp32_matmul_bad.json.gz"), "--no-cache", cwd=tmp_path
    )
    line = one_error_line(proc)
    assert "traceanalyzer.yaml" in line and "alias" in line


def test_rule_error_quoting_a_huge_value_is_one_short_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "long.yaml").write_text(f"slug: {'X' * 1_000_000}\n")
    proc = run_cli(
        "analyze",
        str(SAMPLES / "torch" / "fp32_matmul_bad.json.gz"),
        "--rules",
        str(rules),
        "--no-cache",
    )
    one_error_line(proc)


def test_one_line_caps_length() -> None:
    line = _one_line("path: " + "x" * 10_000 + " the end\nmore")
    assert len(line) <= MAX_ERROR_CHARS and line.startswith("path: ") and line.endswith("more")
    assert _one_line("short") == "short"
    with pytest.raises(RuleError):
        from traceanalyzer.rules.schema import _parse_rule_text

        _parse_rule_text((CORPUS / "alias_bomb.yaml").read_text(), "bomb.yaml")


# ---------------------------------------------------------------------------------------------
# Hangs


def test_nested_trace_events_keys_before_the_array(tmp_path: Path) -> None:
    """100,000 nested "traceEvents" keys in the metadata (1.9 MB): the header scan was
    quadratic in them (minutes); it is linear now."""
    n = 100_000
    head = b'{"meta": ' + b'{"traceEvents": [' * n + b"]}" * n
    path = tmp_path / "nested.json"
    path.write_bytes(head + b', "traceEvents": [\n' + EVENT % 1 + b"{}]}")
    trace = ingest.read_any(path)
    assert trace.gpu.height == 1


def test_gzip_bomb_within_a_gzip_stream_of_many_members(tmp_path: Path, small_memory: int) -> None:
    """Many members, each small, add up past the bound: every member is counted."""
    body = kineto_body(250_000)
    step = len(body) // 50
    path = tmp_path / "many.json.gz"
    path.write_bytes(b"".join(member(body[i : i + step]) for i in range(0, len(body), step)))
    with pytest.raises(InputError, match="decompresses to more than"):
        ingest.read_any(path)
    assert gzip.decompress(path.read_bytes()) == body


# ---------------------------------------------------------------------------------------------
# One huge string: the cap applies while decoding

PEAK_RSS = (
    "import atexit, resource, runpy, sys\n"
    "atexit.register(lambda: print('peak-rss-kb', resource.getrusage(resource.RUSAGE_SELF)"
    ".ru_maxrss, file=sys.stderr))\n"
    "sys.argv = ['traceanalyzer', *sys.argv[1:]]\n"
    "runpy.run_module('traceanalyzer', run_name='__main__')\n"
)


def _peak_mb(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    full = {k: v for k, v in os.environ.items() if k != ingest.NO_MEMORY_CHECK_ENV}
    full["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *args], capture_output=True, text=True, timeout=300,
        cwd=REPO, env=full,
    )
    peak = [line for line in proc.stderr.splitlines() if line.startswith("peak-rss-kb")]
    assert peak, proc.stderr[-2000:]
    return proc, int(peak[-1].split()[1]) / 1024


@pytest.mark.parametrize("where", ["name", "arg", "fallback"])
def test_one_huge_string_of_escaped_quotes_decodes_in_proportion(
    tmp_path: Path, where: str
) -> None:
    # 10 MB of \" in one event: the structural scan held 8-byte positions of every quote and
    # backslash (35x the string), the decoders the whole text. A duplicate key sends the event
    # to the Polars fallback, which gets its strings cut first.
    quotes = '\\"' * (5 << 20)
    kernel = ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, '
              '"args": {"correlation": 1, "device": 0, "stream": 7}}')
    launch = ('{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, '
              '"tid": 1, "ts": 5, "dur": 3, "args": {"correlation": 1}}')
    name, dims, dup = ("op", quotes, "") if where == "arg" else (quotes, "[]", "")
    if where == "fallback":
        dup = '"dur": 30, '
    op = (f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": 1, {dup}'
          f'"dur": 30, "args": {{"Input Dims": "{dims}"}}}}')
    trace = tmp_path / "quotes.json"
    trace.write_text('{"traceEvents": [' + ", ".join([kernel, launch, op]) + "]}")
    small = tmp_path / "small.json"
    small.write_text('{"traceEvents": [' + ", ".join([kernel, launch]) + "]}")
    out = tmp_path / "r.json"
    proc, peak = _peak_mb("analyze", str(trace), "--no-cache", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    _, base = _peak_mb("analyze", str(small), "--no-cache")
    report = json.loads(out.read_text())
    assert any("cut 1 text fields longer than 65,536" in w for w in report["trace"]["warnings"])
    assert out.stat().st_size < 1 << 20
    loaded = ingest.read_any(trace)
    text = loaded.cpu["name"] if where != "arg" else loaded.cpu["input_dims"]
    assert text.str.len_chars().max() == MAX_TEXT_CHARS + len(MARKER)
    # Measured: 30-40 MB above a two-event trace (10 MB file); the scan alone took 350 MB.
    size_mb = trace.stat().st_size / 2**20
    assert peak - base < 8 * size_mb, (peak, base)
