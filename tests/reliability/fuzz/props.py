"""Generated inputs and the properties every input must satisfy, shared by the Hypothesis tests in
CI (tests/reliability/test_fuzz.py) and the long fuzzing sessions
(tests/reliability/fuzz/fuzz_ingest.py).

Properties, checked on every generated input after ``ingest.load(use_cache=False)`` and
``analysis.analyze_trace``:

- nothing is raised but :class:`traceanalyzer.errors.TraceAnalyzerError` subclasses;
- the frames have the canonical schemas;
- busy <= span, idle = span - busy >= 0, and the idle causes sum to the idle time;
- compute + exposed communication <= busy <= compute + exposed communication + memory
  (the exact identity "compute + exposed comm + exposed memory + idle = span" cannot be stated
  from the metrics: memory time is a union that may overlap compute, and no "exposed memory" is
  computed; these bounds are what holds by definition);
- every finding's impact is in [0, window], where window is the rules engine's window
  (``Views.window``: the GPU span, or the CPU events' extent when there is no GPU activity), and
  its impact_pct in [0, 100].
"""

from __future__ import annotations

import gzip
import json
import math
import sqlite3
import sys
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository: tests.support

from tests.support.nsys_fixtures import NsysBuilder  # noqa: E402
from traceanalyzer.analysis import analyze_trace  # noqa: E402
from traceanalyzer.analysis.views import Views  # noqa: E402
from traceanalyzer.errors import TraceAnalyzerError  # noqa: E402
from traceanalyzer.ingest import load  # noqa: E402
from traceanalyzer.model import FRAME_SCHEMAS, TIME_LIMIT_NS  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Chrome / Kineto JSON

PHASES = ["X", "X", "X", "X", "i", "I", "B", "E", "M", "s", "f", "C", "", "x"]
CATS = ["kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "cuda_runtime", "cuda_driver",
        "user_annotation", "gpu_user_annotation", "cuda_sync", "python_function", "Kernel",
        "ac2g", "", "weird"]
NAMES = ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#x", "[memory]", "aten::mm",
         "cudaLaunchKernel", "cudaGraphLaunch", "cudaDeviceSynchronize", "cudaMemcpyAsync",
         "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)",
         "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ampere_sgemm_128x64_tn",
         "void at::native::vectorized_elementwise_kernel<4>", "fmha_cutlassF", "Optimizer.step#Adam",
         "<script>alert(1)</script>", "\x1b[31mred\x1b[0m", "", "Event Sync", "Stream Sync"]

small_ints = st.integers(min_value=-3, max_value=12)
weird = st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.lists(small_ints, max_size=3),
                  st.dictionaries(st.text(max_size=3), small_ints, max_size=2),
                  st.integers(min_value=-(2**70), max_value=2**70),
                  st.floats(allow_nan=True, allow_infinity=True))


def maybe(strategy: st.SearchStrategy, p_weird: int = 8) -> st.SearchStrategy:
    """Mostly ``strategy``, sometimes a value of a random type."""
    return st.one_of(*([strategy] * p_weird), weird)


# Hostile values (issue 30, classes 5 and 7): times that overflow int64 once in ns, or sit near
# the time limit, ns mixed with µs (1.7e18 beside 1.7e15), durations of 1e308 / NaN / inf.
LIMIT_US = (1 << 62) // 1000
hostile_times = st.one_of(
    st.sampled_from([9.3e15, 1e16, 1.8e16, 9223372036854775, 9223372036854775807, -9.3e15,
                     LIMIT_US - 1, LIMIT_US, LIMIT_US + 1, -LIMIT_US, 1.7e15, 1.7e18, 1e300]),
    st.integers(min_value=LIMIT_US - 5000, max_value=LIMIT_US + 5000),
    st.floats(min_value=-1e19, max_value=1e19, allow_nan=False))
hostile_durs = st.one_of(
    st.sampled_from([1e308, -1e308, 1e20, 4.7e15, 9.3e15, float("nan"), float("inf"),
                     -float("inf"), 1.7e15]),
    st.floats(allow_nan=True, allow_infinity=True))
times = st.one_of(st.integers(min_value=0, max_value=5000),
                  st.floats(min_value=0, max_value=5000, allow_nan=False).map(lambda f: round(f, 3)),
                  hostile_times)
durs = st.one_of(st.integers(min_value=-5, max_value=800),
                 st.floats(min_value=0, max_value=800, allow_nan=False).map(lambda f: round(f, 3)),
                 hostile_durs)
#: Text a device may hold: lone surrogates (json.dumps writes them as JSON's "\ud800"), NUL.
hostile_text = st.sampled_from(["G\ud800PU", "\udc00", "\ud83d", "x\x00y", "\u202e", "GPU"])
corrs = st.integers(min_value=0, max_value=12)

args_strategy = st.fixed_dictionaries(
    {},
    optional={
        "correlation": maybe(corrs),
        "External id": maybe(corrs),
        "device": maybe(st.integers(0, 2)),
        "stream": maybe(st.integers(0, 9)),
        "grid": maybe(st.lists(st.integers(0, 2000), min_size=0, max_size=4)),
        "block": maybe(st.lists(st.integers(0, 1024), min_size=0, max_size=4)),
        "registers per thread": maybe(st.integers(0, 255)),
        "shared memory": maybe(st.integers(0, 1 << 20)),
        "bytes": maybe(st.integers(0, 1 << 30)),
        "Input Dims": maybe(st.sampled_from(["[[8, 1024], [1024, 1024]]", "[]", "[[3]]", "x"])),
        "Input type": maybe(st.sampled_from(['["float", "float"]', '["c10::BFloat16"]', "?"])),
        "Call stack": maybe(st.sampled_from(["train.py(42): step;torch/nn.py(1): f", ""])),
        "Total Allocated": maybe(st.integers(0, 1 << 34)),
        "Total Reserved": maybe(st.integers(0, 1 << 34)),
        "Device Id": maybe(st.integers(0, 2)),
    },
)

event_strategy = st.fixed_dictionaries(
    {},
    optional={
        "ph": maybe(st.sampled_from(PHASES), 20),
        "cat": maybe(st.sampled_from(CATS), 20),
        "name": maybe(st.one_of(st.sampled_from(NAMES), st.text(max_size=12)), 20),
        "pid": maybe(st.one_of(st.integers(0, 3), st.sampled_from(["Spans", "", "1"]))),
        "tid": maybe(st.one_of(st.integers(0, 3), st.sampled_from(["stream 7", "1"]))),
        "ts": maybe(times, 20),
        "dur": maybe(durs, 20),
        "args": maybe(args_strategy, 10),
    },
)


@st.composite
def coherent_events(draw: Any) -> list[dict[str, Any]]:
    """Steps, ops, launches and the kernels they launch: exercises joins and rules, not just
    the decoder."""
    events: list[dict[str, Any]] = []
    n_steps = draw(st.integers(0, 3))
    t = 0
    corr = 0
    for step in range(n_steps):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": 1, "ts": t, "dur": 1000})
        t += 1000
    for _ in range(draw(st.integers(0, 12))):
        corr += 1
        start = draw(st.integers(0, max(t, 3000)))
        cat = draw(st.sampled_from(["kernel", "kernel", "gpu_memcpy", "gpu_memset"]))
        name = draw(st.sampled_from(NAMES))
        launched = draw(st.integers(0, 4)) > 0
        if launched:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                           "tid": 1, "ts": start, "dur": draw(st.integers(1, 20)),
                           "args": {"correlation": corr, "External id": corr}})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                           "ts": start - 1, "dur": 30, "args": {"External id": corr}})
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 0,
                       "tid": draw(st.sampled_from([7, 8])),
                       "ts": start + draw(st.integers(0, 200)), "dur": draw(st.integers(0, 300)),
                       "args": {"correlation": corr, "device": 0,
                                "stream": draw(st.sampled_from([7, 8])),
                                "bytes": 4096, "grid": [2, 1, 1], "block": [128, 1, 1]}})
    return events


@st.composite
def chrome_trace_bytes(draw: Any) -> tuple[bytes, str]:
    """A Chrome/Kineto trace file's bytes and a file name, possibly broken on purpose."""
    events = draw(coherent_events()) + draw(st.lists(event_strategy, max_size=15))
    if draw(st.integers(0, 9)) == 0:
        events += draw(st.lists(weird, max_size=3))  # non-object events
    events = draw(st.permutations(events)) if draw(st.booleans()) else events
    top: dict[str, Any] = {"schemaVersion": 1}
    if draw(st.booleans()):
        top["deviceProperties"] = [{"id": draw(maybe(st.integers(0, 2))),
                                    "name": draw(st.one_of(st.sampled_from(NAMES), hostile_text)),
                                    "numSms": draw(maybe(st.integers(1, 132))),
                                    "computeMajor": draw(maybe(st.just(9))), "computeMinor": 0}]
    if draw(st.booleans()):
        top["distributedInfo"] = {"rank": draw(maybe(st.integers(0, 3))), "world_size": 4}
    top["traceEvents"] = events
    array_format = draw(st.integers(0, 9)) == 0
    text = json.dumps(events if array_format else top, allow_nan=True,
                      indent=draw(st.sampled_from([None, 1])))
    data = text.encode("utf-8", errors="surrogatepass")
    mutation = draw(st.integers(0, 9))
    if mutation == 0 and data:  # cut anywhere
        data = data[: draw(st.integers(0, len(data)))]
    elif mutation == 1 and data:  # flip a byte
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    elif mutation == 2:  # NaN/Infinity literals, big ints
        data = data.replace(b'"dur": 1', b'"dur": NaN', 1).replace(
            b'"ts": 2', b'"ts": 1e400', 1).replace(b'"correlation": 1', b'"correlation": 1' +
                                                   b"0" * 25, 1)
    compress = draw(st.integers(0, 3)) == 0
    if compress:
        data = gzip.compress(data, mtime=0)
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]
    return data, "trace.json.gz" if compress else "trace.json"


# ---------------------------------------------------------------------------------------------
# Nsight Systems SQLite

i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
sql_weird = st.one_of(st.none(), st.text(max_size=4), st.floats(allow_nan=False), i64,
                      st.binary(max_size=4))


@st.composite
def nsys_db(draw: Any, path: Path) -> Path:
    """A small nsys-like export: random launches, copies, syncs and NVTX; sometimes rows whose
    values have the wrong SQLite type (SQLite lets any column hold any type)."""
    b = NsysBuilder()
    for _ in range(draw(st.integers(0, 10))):
        cpu = draw(st.integers(0, 100_000))
        b.launch(draw(st.sampled_from(NAMES[:14])), cpu, draw(st.integers(0, 5000)),
                 cpu + draw(st.integers(-1000, 50_000)), draw(st.integers(-10, 20_000)),
                 stream=draw(st.sampled_from([7, 8])), launched=draw(st.booleans()),
                 pid=draw(st.sampled_from([100, 101])))
    for _ in range(draw(st.integers(0, 3))):
        b.memcpy(draw(st.integers(1000, 100_000)), draw(st.integers(0, 5000)),
                 draw(st.integers(0, 1 << 30)), draw(st.integers(0, 12)),
                 draw(st.one_of(st.none(), st.integers(0, 12))),
                 draw(st.one_of(st.none(), st.integers(0, 12))))
    for _ in range(draw(st.integers(0, 2))):
        b.sync("cudaStreamSynchronize", draw(st.integers(0, 100_000)), draw(st.integers(20, 5000)),
               draw(st.integers(0, 5)))
    for i in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, 100_000))
        b.nvtx(draw(st.sampled_from([f"ProfilerStep#{i}", "<b>x</b>", "data", None])), start,
               draw(st.one_of(st.none(), st.integers(start - 10, start + 50_000))),
               registered=draw(st.booleans()))
    b.write(path)
    wild = draw(st.lists(st.tuples(
        st.sampled_from(["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                         "StringIds", "NVTX_EVENTS"]),
        st.lists(sql_weird, min_size=4, max_size=4)), max_size=3))
    hostile = draw(st.lists(st.sampled_from(HOSTILE_NSYS), max_size=3, unique=True))
    if hostile:
        con = sqlite3.connect(path)
        for name in hostile:
            try:
                _hostile_nsys(con, name, draw)
            except sqlite3.IntegrityError:  # NULL drawn for a NOT NULL column
                pass
        con.commit()
        con.close()
    if wild:
        con = sqlite3.connect(path)
        for table, values in wild:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
            notnull = {r[1] for r in con.execute(f"PRAGMA table_info({table})") if r[3]}
            if not cols:
                continue
            chosen = cols[:4]
            row = [v if v is not None or c not in notnull else 0 for c, v in zip(chosen, values, strict=False)]
            try:
                con.execute(f"INSERT INTO {table} ({', '.join(chosen)}) VALUES "
                            f"({', '.join('?' * len(chosen))})", row)
            except sqlite3.IntegrityError:
                pass
        con.commit()
        con.close()
    return path


#: Values an export may hold that nsys never writes (issue 30, class 5).
HOSTILE_NSYS = ["big_ids", "big_times", "target_info_gpu", "session_start", "env_rank"]
big_or_weird = st.one_of(sql_weird, st.sampled_from([2**31, 2**32, 2**62, 2**63 - 1, -(2**63),
                                                     "yesterday", "9" * 5000, 1e300]))


def _hostile_nsys(con: sqlite3.Connection, name: str, draw: Any) -> None:
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    has_kernels = con.execute("SELECT count(*) FROM sqlite_master WHERE name = ?",
                              (kernel,)).fetchone()[0]
    if name == "big_ids" and has_kernels:
        con.execute(f"UPDATE {kernel} SET deviceId = ?, streamId = ?, gridX = ? WHERE rowid = 1",
                    [draw(big_or_weird) for _ in range(3)])
    elif name == "big_times" and has_kernels:
        start = draw(st.one_of(i64, st.sampled_from([2**62 - 1, 2**62, 2**63 - 1000, -(2**63)])))
        con.execute(f"UPDATE {kernel} SET start = ?, end = ? WHERE rowid = 1",
                    (start, draw(st.one_of(i64, st.just(2**63 - 1)))))
    elif name == "target_info_gpu":
        con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER, "
                    "totalMemory INTEGER, computeMajor INTEGER, computeMinor INTEGER)")
        con.execute("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, ?, ?, ?)",
                    [draw(st.one_of(st.just(0), big_or_weird)) for _ in range(6)])
    elif name == "session_start":
        con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER)")
        con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?)", (draw(big_or_weird),))
    elif name == "env_rank":
        con.execute("CREATE TABLE IF NOT EXISTS TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, "
                    "devStateName TEXT, name TEXT, nameEnum INTEGER, value TEXT)")
        rank = draw(st.sampled_from(["1", "3000000000", "9" * 5000, "x"]))
        world = draw(st.sampled_from(["4", "4000000000", "9" * 5001]))
        con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'x', 'DeviceEnvironment', 0, ?)",
                    (f"RANK={rank};WORLD_SIZE={world}",))


# ---------------------------------------------------------------------------------------------
# The properties


def check_file(path: Path) -> str:
    """Ingest and analyze ``path``; assert the properties. Returns "rejected" or "analyzed"."""
    try:
        trace = load(path, use_cache=False)
    except TraceAnalyzerError as exc:
        assert str(path) in str(exc) or path.name in str(exc), str(exc)
        assert "\n" not in str(exc).strip()
        return "rejected"
    trace.validate()
    for name, frame in trace.frames().items():
        assert frame.schema == FRAME_SCHEMAS[name]
        if "start_ns" in frame.columns and frame.height:
            assert frame.filter(frame["end_ns"] < frame["start_ns"]).height == 0, name
        for col in ("start_ns", "end_ns", "ts_ns"):  # within the time limit: no wrap anywhere
            if col in frame.columns and frame.height:
                assert frame[col].null_count() == 0, (name, col)
                assert frame[col].abs().max() < TIME_LIMIT_NS, (name, col)
    # The metadata is valid Unicode and JSON (a lone surrogate broke every report).
    json.dumps(trace.meta.to_dict(), allow_nan=False).encode("utf-8")
    assert all(isinstance(d.id, int) and -(2**31) <= d.id < 2**31 for d in trace.meta.devices)
    try:
        result = analyze_trace(trace)
    except TraceAnalyzerError:
        return "rejected"
    check_result(trace, result)
    return "analyzed"


def check_result(trace: Any, result: Any) -> None:
    m = result.metrics
    assert 0 <= m.span_ns < 2**63
    assert 0 <= m.busy_ns <= m.span_ns, (m.busy_ns, m.span_ns)
    assert m.idle_ns == m.span_ns - m.busy_ns
    assert m.idle_host_wait_ns + m.idle_kernel_wait_ns + m.idle_other_ns == m.idle_ns, vars(m)
    assert min(m.idle_host_wait_ns, m.idle_kernel_wait_ns, m.idle_other_ns) >= 0
    assert 0 <= m.exposed_communication_ns <= m.communication_ns
    assert m.compute_ns + m.exposed_communication_ns <= m.busy_ns
    assert m.busy_ns <= m.compute_ns + m.exposed_communication_ns + m.memory_ns
    if m.comm_overlap_pct is not None:
        assert 0.0 <= m.comm_overlap_pct <= 100.0
    views = Views(trace)
    for f in result.findings:
        # each rank's finding is judged against that rank's own window
        window = views.for_rank(f.rank).window if f.rank is not None else views.window
        length = max(0, window[1] - window[0]) if window else 0
        assert 0 <= f.impact_ns <= length, (f.slug, f.rank, f.impact_ns, length)
        assert 0.0 <= f.impact_pct <= 100.0 + 1e-9, (f.slug, f.impact_pct)
        assert not (isinstance(f.impact_pct, float) and math.isnan(f.impact_pct))
    steps = result.steps
    if steps.height:
        assert (steps["busy_ns"] <= steps["duration_ns"]).all()
        assert (steps["busy_ns"] >= 0).all()
