"""The dependency graph of a rank's steps, its replay, and the critical path (docs/critical-path.md).

The graph is built from the canonical frames of one rank:

- the **host chain**: the rank's CUDA/HIP API calls in order of start (all threads of the
  process in one chain: PyTorch's autograd thread launches the backward while the main thread
  waits for it, so their calls take turns). Between two calls is host work (Python, operator
  dispatch, data loading), kept as it was;
- **launch -> GPU activity**, by correlation id: an activity is ready a launch latency after its
  call starts;
- **stream order**: an activity starts after the one before it on its (device, stream), plus the
  GPU's own gap between back-to-back work;
- **host waits**: a blocking call (stream/device/event synchronize, a blocking copy, a free)
  returns once the GPU work it waits for has ended;
- **cross-stream waits** (``cudaStreamWaitEvent``, event syncs, copies between GPUs of one
  process): an activity that started later than its stream, its launch and the GPU's own gap
  explain waited for the activity of another stream of the rank that ended last before it; the
  edge is inferred from the times, since no trace records which event a wait was for.

:func:`replay` recomputes every node's times from the edges and the node durations, so that
an unchanged graph gives back the trace's own times, and a changed one (``whatif.py``) the
times with a problem fixed. :func:`critical_path` follows, from the last node of the window,
the edge that set each node's start: that chain of work is the critical path, cut at the step
boundaries into a breakdown per step.

Everything is vectorised: the host chain between two host waits is a cumulative sum; a stream
is a max-plus recurrence, ``end_i = max(end_{i-1} + gap_i, ready_i) + dur_i``, solved for all
streams at once by a segmented cumulative maximum; Python loops only over host waits and over
the passes that propagate cross-stream waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from traceanalyzer.model import API_KINDS

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

#: Calls that block the host until GPU work is done: synchronizations, copies without
#: ``Async`` (which return once the copy is done), frees (``cudaFree`` synchronizes the device).
BLOCKING_API = (
    r"^(cuda|hip)(StreamSynchronize|DeviceSynchronize|EventSynchronize|Memcpy|Memcpy2D|Memcpy3D"
    r"|Memset|Free)(_v\d+)?$"
    r"|^cu(StreamSynchronize|CtxSynchronize|EventSynchronize|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD"
    r"|MemFree)(_v\d+)?(_v\d+)?$"
)
#: Calls that launch GPU work; their time on the path is launch overhead.
LAUNCH_API = r"(?i)launch|memcpy|memset|graphlaunch"

#: The launch latency assumed where a trace shows none: call start to kernel start.
DEFAULT_LAUNCH_LATENCY_NS = 5_000
#: Bounds on the measured launch latency (the median of call start to start of the activities
#: that did not queue behind other work).
LAUNCH_LATENCY_RANGE_NS = (1_000, 50_000)
#: The GPU's own gap between back-to-back activities of one stream, where the trace shows none.
DEFAULT_STREAM_GAP_NS = 1_000
#: Bound on the measured gap (the median gap between activities that were queued).
MAX_STREAM_GAP_NS = 10_000
#: Slack in ns before a start is said to be unexplained by its stream and its launch.
WAIT_SLACK_NS = 2_000
#: Most passes of cross-stream propagation between two host waits.
MAX_PASSES = 500
#: Most nodes (host calls plus GPU activities) of one rank's graph. A rank's window with more
#: is judged on the contiguous whole steps around its median step that fit (at least one step),
#: so that the graph, its replays and the what-ifs cost no more however long the trace is
#: (docs/critical-path.md, "Big traces"). 500k nodes take about 0.4 GB and 10 CPU-s.
NODE_BUDGET = 500_000
#: Launches-view columns that neither the graph nor a what-if model reads: dropped before the
#: graph sorts its activities (a sort copies every column).
UNREAD_COLUMNS = (
    "external_id",
    "registers",
    "shared_mem",
    "mangled_name",
    "block_y",
    "block_z",
    "launch_name",
    "launch_end_ns",
    "launch_tid",
    "launch_delay_ns",
    "call_stack",
)
#: The host rows' columns the graph reads.
CPU_COLUMNS = ("rank", "kind", "name", "tid", "correlation", "start_ns", "end_ns")

#: Breakdown categories of the critical path, in report order (docs/metrics.md).
CATEGORIES = (
    "gpu_compute",
    "gpu_communication",
    "gpu_copy",
    "cpu",
    "launch",
    "host_wait",
    "data_loading",
    "other",
)
_CAT = {c: i for i, c in enumerate(CATEGORIES)}

#: Edge kinds (why a node started when it did).
EDGE_NONE, EDGE_CHAIN, EDGE_WAIT, EDGE_STREAM, EDGE_LAUNCH, EDGE_CROSS = range(6)
_BIG = np.int64(1) << np.int64(50)


@dataclass
class Graph:
    """The dependency graph of one rank's window. Times are relative to ``t0`` (ns)."""

    rank: int
    t0: int
    # host chain: API calls in order of start
    c_start: np.ndarray
    c_end: np.ndarray
    c_wait: np.ndarray  # index of the GPU activity a blocking call waits for, else -1
    c_own: np.ndarray  # the call's own time: all of it unless it waited, then its wake-up
    c_wake: np.ndarray  # from the awaited activity's end to the call's return
    c_cat: np.ndarray  # category of the call's time on the path
    c_dl: np.ndarray  # share of the host gap before the call spent loading data (0..1)
    # GPU activities, in order of (stream, start)
    g_start: np.ndarray
    g_end: np.ndarray
    g_seg: np.ndarray  # stream index (segments are contiguous)
    g_launch: np.ndarray  # index of the launching call, else -1
    g_lat: np.ndarray  # from the launch call's start to when the activity is ready
    g_gap: np.ndarray  # the stream's own gap before it (may be negative: recorded overlap)
    g_x: np.ndarray  # inferred cross-stream predecessor, else -1
    g_xgap: np.ndarray  # from that predecessor's end to this start
    g_cat: np.ndarray
    g_step: np.ndarray  # step number, or min int for none
    gpu: pl.DataFrame  # the activities' rows (launches view), in graph order, with ``_g``
    calls: pl.DataFrame  # the calls' rows, in chain order, with ``_c``
    steps: pl.DataFrame  # rank's steps: step, start_ns, end_ns (CPU range), relative
    judged: dict[str, Any] | None = None  # the steps judged: see judged_steps()
    lead_ns: int | None = None  # where the first step starts: the end of the one before it
    dl_lo: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # data loading
    dl_hi: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    first_at: int = 0  # the window's first host time (the first step's start)
    launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS
    stream_gap_ns: int = DEFAULT_STREAM_GAP_NS

    @property
    def n_calls(self) -> int:
        return len(self.c_start)

    @property
    def n_gpu(self) -> int:
        return len(self.g_start)


@dataclass
class Change:
    """A what-if edit of the graph (``whatif.py``). Arrays are None where nothing changes."""

    g_dur: np.ndarray | None = None  # new durations of GPU activities
    c_shrink: np.ndarray | None = None  # ns taken off each call's own time
    gap_shrink: np.ndarray | None = None  # ns taken off the host gap before each call
    unblock: np.ndarray | None = None  # blocking calls that no longer wait
    g_ready_call: np.ndarray | None = None  # call whose start makes an activity ready, else -1
    g_no_cross: np.ndarray | None = None  # cross-stream waits dropped
    g_no_gap: np.ndarray | None = None  # activities merged into the one before: no stream gap
    g_gap_cap: bool = False  # re-timed activities (g_ready_call) keep only the GPU's own gap
    step_delta_ns: dict[int, int] = field(default_factory=dict)  # added to a step's time

    def merged(self, other: Change) -> Change:
        """Both changes at once: the shorter durations, the larger cuts."""

        def pick(a: Any, b: Any, fn: Any) -> Any:
            if a is None:
                return b
            if b is None:
                return a
            return fn(a, b)

        def ready(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return np.where(a >= 0, a, b)

        deltas = dict(self.step_delta_ns)
        for k, v in other.step_delta_ns.items():
            deltas[k] = deltas.get(k, 0) + v
        return Change(
            g_dur=pick(self.g_dur, other.g_dur, np.minimum),
            c_shrink=pick(self.c_shrink, other.c_shrink, np.maximum),
            gap_shrink=pick(self.gap_shrink, other.gap_shrink, np.maximum),
            unblock=pick(self.unblock, other.unblock, np.logical_or),
            g_ready_call=pick(self.g_ready_call, other.g_ready_call, ready),
            g_no_cross=pick(self.g_no_cross, other.g_no_cross, np.logical_or),
            g_no_gap=pick(self.g_no_gap, other.g_no_gap, np.logical_or),
            g_gap_cap=self.g_gap_cap or other.g_gap_cap,
            step_delta_ns=deltas,
        )


@dataclass
class Replay:
    """Node times after a replay, and the edge that set each node's start or end."""

    c_start: np.ndarray
    c_end: np.ndarray
    c_edge: np.ndarray  # EDGE_CHAIN or EDGE_WAIT (the call's end was set by the GPU)
    g_start: np.ndarray
    g_end: np.ndarray
    g_edge: np.ndarray  # EDGE_STREAM, EDGE_LAUNCH, EDGE_CROSS or EDGE_NONE
    g_ready_call: np.ndarray
    step_times: pl.DataFrame  # step, wall_start_ns, wall_end_ns, duration_ns (relative)


# --- building the graph -----------------------------------------------------------------------


def judged_steps(
    gpu: pl.DataFrame, cpu: pl.DataFrame, steps: pl.DataFrame, budget: int
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """The rank's frames cut to the steps its graph judges, and what was judged.

    Within ``budget`` nodes (API calls and GPU activities), or without steps to cut at, every
    frame is kept as it is. Over it: the contiguous whole steps around the median step (in
    order of start), grown one step at a time on the side with fewer nodes while they fit, at
    least the median step (a step's nodes are those from its start to the next step's); the GPU
    activities launched in them, those of no step launched between them, and the host rows that
    start from the first one's start to the start of the step after the last. A window without
    steps (a serving loop, a capture of CUDA graphs) over the budget: the time range in its
    middle that holds ``budget`` nodes (:func:`_judged_range`). ``judged``: ``bounded``,
    ``steps`` (judged), ``of_steps``, ``first`` and ``last`` step, ``nodes`` (judged) and
    ``window_nodes``, ``node_budget``; for a range, its ``start_ns`` and ``end_ns``."""
    api = pl.col("kind").is_in(API_KINDS)
    total = _nodes(gpu, cpu)
    ids = steps["step"].to_list()
    judged: dict[str, Any] = {
        "bounded": False,
        "steps": len(ids),
        "of_steps": len(ids),
        "first": ids[0] if ids else None,
        "last": ids[-1] if ids else None,
        "window_first": ids[0] if ids else None,
        "nodes": total,
        "window_nodes": total,
        "node_budget": budget,
    }
    if total <= budget:
        return gpu, cpu, steps, judged
    # When each node enters the graph: an activity when it was launched (or, with no launch
    # call, started), a call when it started.
    at = np.concatenate(
        (
            gpu.select(pl.coalesce("launch_start_ns", "start_ns"))
            .to_series()
            .to_numpy()
            .astype(np.int64),
            cpu.filter(api)["start_ns"].to_numpy().astype(np.int64),
        )
    )
    if steps.is_empty():
        return _judged_range(gpu, cpu, steps, judged, at, budget)
    lo = steps["start_ns"].to_numpy()
    # Nodes of each step: the activities launched from its start to the next step's start (its
    # own, and those launched between the two steps), and the calls that start there.
    pos = np.searchsorted(lo, at, side="right") - 1
    nodes = np.bincount(pos[pos >= 0], minlength=len(ids))
    a = b = (len(ids) - 1) // 2
    used = int(nodes[a])
    while True:  # a loop over steps, not events
        left = int(nodes[a - 1]) if a > 0 else None
        right = int(nodes[b + 1]) if b + 1 < len(ids) else None
        options = [(n, side) for n, side in ((right, 1), (left, 0)) if n is not None]
        if not options:
            break
        n, side = min(options)
        if used + n > budget:
            break
        used += n
        a, b = (a, b + 1) if side else (a - 1, b)
    kept = steps.slice(a, b - a + 1)
    t_lo = int(lo[a])
    t_hi = int(lo[b + 1]) if b + 1 < len(ids) else np.iinfo(np.int64).max
    judged.update(bounded=True, steps=kept.height, first=ids[a], last=ids[b], nodes=used)
    launched = pl.coalesce("launch_start_ns", "start_ns")
    between = pl.col("step").is_null() & (launched >= t_lo) & (launched < t_hi)
    return (
        gpu.filter(pl.col("step").is_in(kept["step"].implode()) | between),
        cpu.filter(pl.col("start_ns") >= t_lo, pl.col("start_ns") < t_hi),
        kept,
        judged,
    )


def _judged_range(
    gpu: pl.DataFrame, cpu: pl.DataFrame, steps: pl.DataFrame, judged: dict[str, Any],
    at: np.ndarray, budget: int,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """A window without steps, cut to the ``budget`` nodes around its middle node in time
    (``at``: when each node enters the graph). Such a window has no step time for the path or
    the what-if to explain; unbounded, its graph grew with the trace (+545 MiB at 1 GB of a
    CUDA-graph capture: bench/NOTES.md)."""
    first = max(0, (len(at) - budget) // 2)
    t_lo, t_hi = np.partition(at, [first, first + budget])[[first, first + budget]]
    launched = pl.coalesce("launch_start_ns", "start_ns")
    gpu = gpu.filter(launched >= int(t_lo), launched < int(t_hi))
    cpu = cpu.filter(pl.col("start_ns") >= int(t_lo), pl.col("start_ns") < int(t_hi))
    judged.update(bounded=True, nodes=_nodes(gpu, cpu), start_ns=int(t_lo), end_ns=int(t_hi))
    return gpu, cpu, steps, judged


def _nodes(gpu: pl.DataFrame, cpu: pl.DataFrame) -> int:
    """The graph's nodes in these frames: GPU activities and host API calls."""
    return gpu.height + int(cpu.select(pl.col("kind").is_in(API_KINDS).sum()).item() or 0)


def build_graph(views: Views, rank: int, budget: int | None = None) -> Graph | None:
    """The graph of ``rank``'s window, or None when it has no GPU activity or no host calls (a
    GPU-only capture, an Nsight Compute report: nothing launches the work, so there is no step
    to explain beyond the streams themselves). Over ``budget`` nodes (:data:`NODE_BUDGET` by
    default), the graph of the steps :func:`judged_steps` chooses."""
    launches = views.launches
    # The columns read, before any filter or sort (each copies every column it is given); the
    # names, most of both frames' bytes, are gathered once the rows are final (``_row``).
    gpu = (
        launches.drop([c for c in (*UNREAD_COLUMNS, "name") if c in launches.columns])
        .with_columns(_row=pl.int_range(pl.len(), dtype=pl.UInt32))
        .filter(pl.col("rank") == rank)
    )
    if gpu.is_empty():
        return None
    cpu = views.cpu.select(
        *(c for c in CPU_COLUMNS if c != "name"), _row=pl.int_range(pl.len(), dtype=pl.UInt32)
    ).filter(pl.col("rank") == rank)
    rank_steps = (
        views.steps.filter(pl.col("rank") == rank)
        .select("step", "start_ns", "end_ns", "wall_start_ns")
        .sort("start_ns")
    )
    gpu, cpu, rank_steps, judged = judged_steps(
        gpu, cpu, rank_steps, NODE_BUDGET if budget is None else budget
    )
    if gpu.is_empty():
        return None
    # A judged run of steps that is not the window's first starts where the step before it
    # ended, as in the whole window (not a step shorter by the gap between them).
    lead = (
        rank_steps["wall_start_ns"][0]
        if judged["bounded"] and judged["first"] != (judged["window_first"])
        else None
    )
    starts = gpu["start_ns"].to_numpy()
    t0 = int(min(starts.min(), cpu["start_ns"].to_numpy().min() if cpu.height else starts.min()))
    calls = (
        cpu.filter(pl.col("kind").is_in(API_KINDS))
        .select("_row", "tid", "correlation", "start_ns", "end_ns")
        .sort("start_ns", "end_ns")
        .with_row_index("_c")
    )
    if calls.is_empty():
        return None
    calls = calls.select(
        "_c", views.cpu["name"].gather(calls["_row"]).alias("name"),
        *(c for c in calls.columns if c not in ("_c", "_row")),
    )
    # The runtime call that launched each activity (launches view), by (correlation, start).
    # The first call of each (correlation, start), by sorting: a hashed unique() of two Int64
    # keys took 4x the memory on 205k calls (bench/NOTES.md).
    pair = ["correlation", "launch_start_ns"]
    launch_of = (
        calls.filter(pl.col("correlation").is_not_null())
        .select("correlation", pl.col("start_ns").alias("launch_start_ns"), "_c")
        .sort(*pair, "_c")
        .filter(pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(1)) for c in pair))
    )
    segs = (
        gpu.select("device", "stream")
        .unique()
        .sort("device", "stream", nulls_last=True)
        .with_row_index("_seg")
        .with_columns(pl.col("_seg").cast(pl.Int64))
    )
    gpu = (
        gpu.join(segs, on=["device", "stream"], how="left", nulls_equal=True)
        .sort("_seg", "start_ns", "end_ns")
        .join(launch_of, on=["correlation", "launch_start_ns"], how="left", maintain_order="left")
        .with_row_index("_g")
    )
    gpu = gpu.with_columns(name=launches["name"].gather(gpu["_row"])).drop("_row")
    n_gpu = gpu.height
    g_start = gpu["start_ns"].to_numpy().astype(np.int64) - t0
    g_end = np.maximum(gpu["end_ns"].to_numpy().astype(np.int64) - t0, g_start)
    g_seg = gpu["_seg"].to_numpy().astype(np.int64)
    g_launch = gpu["_c"].fill_null(-1).to_numpy().astype(np.int64)
    c_start = calls["start_ns"].to_numpy().astype(np.int64) - t0
    c_end = np.maximum(calls["end_ns"].to_numpy().astype(np.int64) - t0, c_start)

    first = np.ones(n_gpu, dtype=bool)
    first[1:] = g_seg[1:] != g_seg[:-1]
    prev_end = np.empty(n_gpu, dtype=np.int64)
    prev_end[0] = 0
    prev_end[1:] = g_end[:-1]
    gap = np.where(first, 0, g_start - prev_end)
    has_launch = g_launch >= 0
    ls = np.where(has_launch, c_start[np.maximum(g_launch, 0)], g_start)
    queued = has_launch & ~first & (ls < prev_end)
    q_gaps = gap[queued]
    stream_gap = (
        int(np.clip(np.median(q_gaps[q_gaps >= 0]), 0, MAX_STREAM_GAP_NS))
        if (q_gaps >= 0).any()
        else DEFAULT_STREAM_GAP_NS
    )
    offset = g_start - ls
    free = has_launch & ~queued & (first | (gap > stream_gap + WAIT_SLACK_NS))
    latency = (
        int(np.clip(np.median(offset[free]), *LAUNCH_LATENCY_RANGE_NS))
        if free.any()
        else DEFAULT_LAUNCH_LATENCY_NS
    )

    # Cross-stream waits: started later than stream, launch and the GPU's gap explain.
    bound = np.maximum(
        np.where(first, np.iinfo(np.int64).min // 4, prev_end + stream_gap),
        np.where(has_launch, ls + latency, g_start),
    )
    late = (g_start > bound + WAIT_SLACK_NS) & has_launch
    g_x = np.full(n_gpu, -1, dtype=np.int64)
    if late.any() and g_seg.max() > 0:
        by_end = np.argsort(g_end, kind="stable")
        ends_sorted = g_end[by_end]
        # The activity that ended last at or before the start, on another stream: the last
        # end at or before it, or the one before that when it is on the same stream.
        idx = np.nonzero(late)[0]
        pos = np.searchsorted(ends_sorted, g_start[idx], side="right") - 1
        cand = np.where(pos >= 0, by_end[np.maximum(pos, 0)], -1)
        same = (cand >= 0) & (g_seg[np.maximum(cand, 0)] == g_seg[idx])
        pos2 = pos - 1
        cand2 = np.where(pos2 >= 0, by_end[np.maximum(pos2, 0)], -1)
        cand = np.where(same, cand2, cand)
        ok = (cand >= 0) & (g_seg[np.maximum(cand, 0)] != g_seg[idx])
        ok &= g_end[np.maximum(cand, 0)] > bound[idx] - WAIT_SLACK_NS
        # What a stream waits for was launched before the wait was (an event is recorded
        # before a stream can wait on it).
        ok &= g_launch[np.maximum(cand, 0)] <= g_launch[idx]
        g_x[idx[ok]] = cand[ok]
    explained = g_x >= 0
    g_xgap = np.where(explained, g_start - g_end[np.maximum(g_x, 0)], 0)
    # Ready time after the launch: a queued or cross-waiting activity could have started a
    # launch latency after its call; any other keeps the offset it had (what else it waited for
    # is not recorded).
    g_lat = np.where(queued | explained, np.minimum(offset, latency), offset)
    g_lat = np.where(has_launch, g_lat, g_start)  # no launch: ready at its own start
    g_gap = np.where(queued & ~explained, gap, np.minimum(gap, stream_gap))

    g_cat = np.where(
        (gpu["category"].cast(pl.String) == "communication").fill_null(False).to_numpy(),
        _CAT["gpu_communication"],
        np.where(
            gpu["kind"].cast(pl.String).is_in(["memcpy", "memset"]).fill_null(False).to_numpy(),
            _CAT["gpu_copy"],
            _CAT["gpu_compute"],
        ),
    ).astype(np.int64)
    g_step = gpu["step"].fill_null(np.iinfo(np.int64).min).to_numpy().astype(np.int64)

    # Host waits: what each blocking call waited for.
    n_calls = calls.height
    names = calls["name"]
    blocking = names.str.contains(BLOCKING_API).to_numpy()
    # Copies to or from pageable memory block their call whatever its name: a read until it is
    # done, a write while the driver stages the buffer (the call of a 38 MB cudaMemcpyAsync
    # lasted its copy's 4.2 ms on an H200), and the call returns when its staging is done.
    reads = gpu.filter(
        pl.col("kind") == "memcpy",
        ((pl.col("copy_kind") == "DtoH") & (pl.col("dst_kind") == "pageable"))
        | ((pl.col("copy_kind") == "HtoD") & (pl.col("src_kind") == "pageable")),
        pl.col("_c").is_not_null(),
    )
    blocking[reads["_c"].to_numpy()] = True
    c_wait = np.full(n_calls, -1, dtype=np.int64)
    if blocking.any():
        widx = np.nonzero(blocking)[0]
        by_end = np.argsort(g_end, kind="stable")
        ends_sorted = g_end[by_end]
        pos = np.searchsorted(ends_sorted, c_end[widx], side="right") - 1
        cand = np.where(pos >= 0, by_end[np.maximum(pos, 0)], -1)
        # Only work launched before the call can be what it waits for.
        launched_before = (cand >= 0) & (g_launch[np.maximum(cand, 0)] <= widx)
        c_wait[widx[launched_before]] = cand[launched_before]
        # A blocking copy or memset waits for its own activity (the last one, if several).
        own_acts = (
            gpu.filter(pl.col("_c").is_not_null())
            .select("_c", "_g", "end_ns")
            .sort("end_ns")
            .unique("_c", keep="last")
        )
        oc = own_acts["_c"].to_numpy().astype(np.int64)
        og = own_acts["_g"].to_numpy().astype(np.int64)
        mine = blocking[oc]
        c_wait[oc[mine]] = og[mine]
    waited = c_wait >= 0
    target_end = g_end[np.maximum(c_wait, 0)]
    # (negative where a copy's own activity ends after the call returns: the call then returns
    # that long before the copy is done)
    c_wake = np.where(waited, c_end - target_end, 0)
    blocked = waited & (target_end > c_start)
    c_own = np.where(blocked, np.maximum(c_wake, 0), c_end - c_start)
    c_cat = np.where(
        blocking,
        _CAT["host_wait"],
        np.where(names.str.contains(LAUNCH_API).to_numpy(), _CAT["launch"], _CAT["cpu"]),
    ).astype(np.int64)
    from traceanalyzer.rules.detectors.dataloader_stall import loader_ranges

    steps = rank_steps.select("step", pl.col("start_ns") - t0, pl.col("end_ns") - t0)
    lead_ns = None if lead is None else int(lead) - t0
    first_at = int(c_start[0]) if n_calls else 0
    if steps.height and n_calls:
        first_at = min(first_at, int(steps["start_ns"].to_numpy().min()))
    spans = loader_ranges(views).filter(pl.col("rank") == rank)
    c_dl, dl_lo, dl_hi = _dataloader_share(spans, c_start, c_end, t0, first_at)
    return Graph(
        rank=rank,
        t0=t0,
        c_start=c_start,
        c_end=c_end,
        c_wait=c_wait,
        c_own=c_own,
        c_wake=c_wake,
        c_cat=c_cat,
        c_dl=c_dl,
        g_start=g_start,
        g_end=g_end,
        g_seg=g_seg,
        g_launch=g_launch,
        g_lat=g_lat,
        g_gap=g_gap,
        g_x=g_x,
        g_xgap=g_xgap,
        g_cat=g_cat,
        g_step=g_step,
        gpu=gpu,
        calls=calls,
        steps=steps,
        judged=judged,
        lead_ns=lead_ns,
        dl_lo=dl_lo,
        dl_hi=dl_hi,
        first_at=first_at,
        launch_latency_ns=latency,
        stream_gap_ns=stream_gap,
    )


def _dataloader_share(
    spans: pl.DataFrame, c_start: np.ndarray, c_end: np.ndarray, t0: int, first_at: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call, the share of the host gap before it that falls in a data-loader span; and the
    merged spans (relative)."""
    from traceanalyzer.analysis import intervals

    out = np.zeros(len(c_start), dtype=np.float64)
    none = np.zeros(0, np.int64)
    if spans.is_empty() or len(c_start) == 0:
        return out, none, none
    merged = intervals.merge(spans.select(pl.col("start_ns") - t0, pl.col("end_ns") - t0))
    lo = host_gaps_from(c_start, c_end, first_at)
    hi = np.maximum(c_start, lo)
    covered = intervals.covered_between(merged, lo, hi)
    width = hi - lo
    return (
        np.where(width > 0, covered / np.maximum(width, 1), 0.0),
        merged["start_ns"].to_numpy().astype(np.int64),
        merged["end_ns"].to_numpy().astype(np.int64),
    )


def host_gaps_from(c_start: np.ndarray, c_end: np.ndarray, first_at: int) -> np.ndarray:
    """Where the host gap before each call begins: the latest end of the calls before it (the
    window's start for the first)."""
    lo = np.empty_like(c_start)
    if len(c_start):
        lo[0] = min(first_at, int(c_start[0]))
        lo[1:] = np.maximum.accumulate(c_end)[:-1]
    return lo


# --- replay -----------------------------------------------------------------------------------


def replay(g: Graph, change: Change | None = None) -> Replay:
    """Node times from the graph's edges and (changed) durations; the unchanged graph gives back
    the recorded times."""
    ch = change or Change()
    nc, ng = g.n_calls, g.n_gpu
    dur = g.c_end - g.c_start
    shrink = np.zeros(nc, np.int64) if ch.c_shrink is None else np.minimum(ch.c_shrink, dur)
    gshrink = np.zeros(nc, np.int64) if ch.gap_shrink is None else ch.gap_shrink.astype(np.int64)
    unblock = np.zeros(nc, bool) if ch.unblock is None else ch.unblock
    # A call that no longer waits loses its waiting time: only its own time stays.
    unblocked = unblock & (g.c_wait >= 0)
    shrink = np.where(unblocked, np.maximum(shrink, dur - np.minimum(g.c_own, dur)), shrink)
    # Host calls without waits: recorded starts, minus what was cut before them.
    removed = (
        np.cumsum(gshrink) + np.concatenate(([0], np.cumsum(shrink)[:-1]))
        if nc
        else np.zeros(0, np.int64)
    )
    base_start = g.c_start - removed
    waits = (g.c_wait >= 0) & ~unblock
    # An unblocked call keeps only its own time, as if the GPU had been done.
    own = np.where(g.c_wait >= 0, np.where(unblock, np.minimum(g.c_own, dur), g.c_own), dur)
    own = np.maximum(own - shrink, 0)
    base_end_nowait = base_start + np.where(g.c_wait >= 0, own, dur - shrink)

    g_dur = (g.g_end - g.g_start) if ch.g_dur is None else np.maximum(ch.g_dur, 0)
    ready_call = (
        g.g_launch
        if ch.g_ready_call is None
        else np.where(ch.g_ready_call >= 0, ch.g_ready_call, g.g_launch)
    )
    cross = g.g_x.copy()
    if ch.g_no_cross is not None:
        cross[ch.g_no_cross] = -1
    lat = np.where(ready_call != g.g_launch, g.launch_latency_ns, g.g_lat)
    gaps = g.g_gap.copy()
    if ch.g_gap_cap and ch.g_ready_call is not None:
        moved = ch.g_ready_call >= 0
        gaps[moved] = np.minimum(gaps[moved], g.stream_gap_ns)
    if ch.g_no_gap is not None:
        gaps[ch.g_no_gap] = 0

    c_start = np.zeros(nc, np.int64)
    c_end = np.zeros(nc, np.int64)
    c_edge = np.full(nc, EDGE_CHAIN, np.int64)
    g_start = np.zeros(ng, np.int64)
    g_end = np.full(ng, np.iinfo(np.int64).min // 4, np.int64)
    g_edge = np.full(ng, EDGE_NONE, np.int64)
    done = np.zeros(ng, bool)
    seg_end = np.full(int(g.g_seg.max()) + 1 if ng else 0, np.iinfo(np.int64).min // 4, np.int64)

    # Epochs: the calls up to and including each host wait, and the GPU work they launch.
    wait_idx = np.nonzero(waits)[0]
    bounds = np.concatenate((wait_idx + 1, [nc])) if nc else np.array([0])
    # Activities by epoch of their ready call (no call: the first epoch).
    epoch_of = np.searchsorted(bounds, np.maximum(ready_call, 0), side="right")
    epoch_of = np.where(ready_call >= 0, epoch_of, 0)
    order = np.argsort(epoch_of, kind="stable")  # keeps (stream, start) order inside an epoch
    e_first = np.searchsorted(epoch_of[order], np.arange(len(bounds) + 1))
    delay = 0
    lo = 0
    for e, hi in enumerate(bounds):
        sl = slice(lo, int(hi))
        c_start[sl] = base_start[sl] + delay
        c_end[sl] = base_end_nowait[sl] + delay
        acts = order[e_first[e] : e_first[e + 1]]
        if acts.size:
            _run_gpu(
                g,
                acts,
                g_dur,
                gaps,
                ready_call,
                lat,
                cross,
                c_start,
                g_start,
                g_end,
                g_edge,
                done,
                seg_end,
            )
        if hi > lo and hi - 1 < nc and waits[hi - 1]:
            w = int(hi) - 1
            t = int(g.c_wait[w])
            if done[t]:
                via_gpu = int(g_end[t]) + int(g.c_wake[w])
                if via_gpu > c_end[w]:
                    c_end[w] = via_gpu
                    c_edge[w] = EDGE_WAIT
            # Later host work moves with this call's end, from where it was recorded.
            delay = int(c_end[w]) - int(base_start[w] + dur[w] - shrink[w])
        lo = int(hi)
    left = ~done
    if left.any():  # activities in no epoch (cannot happen, but never leave them unset)
        g_start[left] = g.g_start[left]
        g_end[left] = g.g_end[left]
    return Replay(
        c_start=c_start,
        c_end=c_end,
        c_edge=c_edge,
        g_start=g_start,
        g_end=g_end,
        g_edge=g_edge,
        g_ready_call=ready_call,
        step_times=_step_times(g, c_end, g_start, g_end, ch.step_delta_ns),
    )


def _run_gpu(
    g: Graph,
    acts: np.ndarray,
    g_dur: np.ndarray,
    gaps: np.ndarray,
    ready_call: np.ndarray,
    lat: np.ndarray,
    cross: np.ndarray,
    c_start: np.ndarray,
    g_start: np.ndarray,
    g_end: np.ndarray,
    g_edge: np.ndarray,
    done: np.ndarray,
    seg_end: np.ndarray,
) -> None:
    """The stream recurrences of one epoch's activities (``acts``, in (stream, start) order),
    repeated until cross-stream waits settle."""
    seg = g.g_seg[acts]
    d = g_dur[acts]
    gap = gaps[acts]
    rc = ready_call[acts]
    r_launch = np.where(rc >= 0, c_start[np.maximum(rc, 0)] + lat[acts], g.g_lat[acts])
    x = cross[acts]
    has_x = x >= 0
    first = np.ones(acts.size, bool)
    first[1:] = seg[1:] != seg[:-1]
    starts = np.nonzero(first)[0]
    seg_ids = seg[starts]
    carry = seg_end[seg_ids]
    # T_i = sum over the segment of (gap_k + d_k), k <= i; the first gap applies to the carry.
    step_cost = gap + d
    csum = np.cumsum(step_cost)
    seg_base = np.repeat(csum[starts] - step_cost[starts], np.diff(np.append(starts, acts.size)))
    T = csum - seg_base
    seg_index = np.cumsum(first) - 1
    big = seg_index.astype(np.int64) * _BIG
    minus = np.iinfo(np.int64).min // 4
    prev_end = None
    for _ in range(MAX_PASSES):
        xe = g_end[np.maximum(x, 0)]
        xr = np.where(has_x & (xe > minus // 2), xe + g.g_xgap[acts], minus)
        ready = np.maximum(r_launch, xr)
        val = ready + d - T + big
        cm = np.maximum.accumulate(val) - big
        end = T + np.maximum(carry[seg_index], cm)
        g_end[acts] = end
        if prev_end is not None and np.array_equal(end, prev_end):
            break
        prev_end = end
    start = end - d
    g_start[acts] = start
    # Which edge set each start.
    pend = np.empty_like(end)
    pend[1:] = end[:-1]
    pend[first] = carry
    via_stream = pend + gap
    edge = np.where(
        via_stream >= np.maximum(r_launch, xr),
        EDGE_STREAM,
        np.where(xr > r_launch, EDGE_CROSS, EDGE_LAUNCH),
    )
    edge = np.where((edge == EDGE_LAUNCH) & (rc < 0), EDGE_NONE, edge)
    edge = np.where(
        first & (carry[seg_index] <= minus // 2) & (edge == EDGE_STREAM), EDGE_NONE, edge
    )
    g_edge[acts] = edge
    done[acts] = True
    last = np.append(starts[1:] - 1, acts.size - 1)
    seg_end[seg_ids] = end[last]


def _step_times(
    g: Graph, c_end: np.ndarray, g_start: np.ndarray, g_end: np.ndarray, deltas: dict[int, int]
) -> pl.DataFrame:
    """Each step's wall-clock range after a replay, as ``analysis.steps.with_wall_times`` defines
    it: ends at the later of its CPU range's end and its GPU work's end; starts where the step
    before it ended."""
    steps = g.steps
    schema = {
        "step": pl.Int64,
        "wall_start_ns": pl.Int64,
        "wall_end_ns": pl.Int64,
        "duration_ns": pl.Int64,
    }
    if steps.is_empty():
        return pl.DataFrame(schema=schema)
    s_start = steps["start_ns"].to_numpy().astype(np.int64)
    s_end = steps["end_ns"].to_numpy().astype(np.int64)
    new_s = _warp(g, c_end, s_start)
    new_e = _warp(g, c_end, s_end)
    step_ids = steps["step"].to_numpy()
    sel = g.g_step != np.iinfo(np.int64).min
    gpu = (
        pl.DataFrame({"step": g.g_step[sel], "s": g_start[sel], "e": g_end[sel]})
        .group_by("step")
        .agg(pl.col("s").min(), pl.col("e").max())
    )
    frame = (
        pl.DataFrame({"step": step_ids, "cs": new_s, "ce": new_e})
        .join(gpu, on="step", how="left", maintain_order="left")
        .with_columns(wall_end_ns=pl.max_horizontal("ce", "e"))
    )
    first_len = pl.max_horizontal(pl.col("ce") - pl.col("cs"), pl.col("e") - pl.col("s"))
    first = pl.col("wall_end_ns") - first_len if g.lead_ns is None else pl.lit(g.lead_ns)
    out = frame.with_columns(
        wall_start_ns=pl.coalesce(pl.col("wall_end_ns").shift(1), first)
    ).with_columns(wall_start_ns=pl.min_horizontal("wall_start_ns", "wall_end_ns"))
    delta = (
        pl.col("step").replace_strict(deltas, default=0, return_dtype=pl.Int64)
        if deltas
        else pl.lit(0, pl.Int64)
    )
    return out.select(
        "step",
        "wall_start_ns",
        "wall_end_ns",
        duration_ns=(pl.col("wall_end_ns") - pl.col("wall_start_ns") + delta).clip(lower_bound=0),
    ).cast(schema)  # type: ignore[arg-type]


def _warp(g: Graph, c_end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """A host time after a replay: it moves with the last call that ended before it."""
    if g.n_calls == 0:
        return t
    order = np.argsort(g.c_end, kind="stable")
    pos = np.searchsorted(g.c_end[order], t, side="right") - 1
    idx = order[np.maximum(pos, 0)]
    return np.where(pos >= 0, t + (c_end[idx] - g.c_end[idx]), t)


def step_time_ns(rep: Replay) -> float | None:
    """The mean step time of a replay, in ns (None without steps)."""
    if rep.step_times.is_empty():
        return None
    return float(rep.step_times["duration_ns"].mean())  # type: ignore[arg-type]


# --- the critical path ------------------------------------------------------------------------


@dataclass
class Path:
    """The critical path of the window: its segments in time order (relative ns)."""

    lo: np.ndarray
    hi: np.ndarray
    cat: np.ndarray  # index into CATEGORIES
    node: np.ndarray  # graph node: calls 0..n_calls-1, then GPU activities


def critical_path(g: Graph, rep: Replay) -> Path:
    """The chain of work that ends last, followed back through the edge that set each node's
    start (or, for a host wait, its end), as contiguous segments of time.

    Each call is two nodes, its start (set by the call before it) and its end (set by its start,
    or for a host wait by the GPU work it waited for), so that a blocking copy can wait for the
    copy it launched itself. Node ids: call ends ``0..nc-1``, call starts ``nc..2nc-1``, GPU
    activities ``2nc..``; ``Path.node`` holds the call or the activity (``nc + j``)."""
    nc, ng = g.n_calls, g.n_gpu
    n = 2 * nc + ng
    sentinel = n
    binder, point = node_binder(g, rep)
    ge = rep.g_edge
    tail = int(np.argmax(point[:n]))
    nodes = _chain(binder, tail, sentinel)[::-1]  # in time order
    entry = point[binder[nodes]]
    entry[0] = point[nodes[0]] if binder[nodes[0]] == sentinel else entry[0]
    at = point[nodes]
    kind = np.where(nodes < nc, 0, np.where(nodes < 2 * nc, 1, 2))
    cidx = np.where(kind == 0, nodes, nodes - nc).clip(0, max(nc - 1, 0))
    gidx = (nodes - 2 * nc).clip(0, max(ng - 1, 0))
    has_c, has_g = nc > 0, ng > 0
    # The body: a call end's time from its start (or, waiting, from the awaited work's end),
    # an activity's run; before it, the edge's time.
    body_lo = np.where(
        kind == 2,
        rep.g_start[gidx] if has_g else 0,
        np.where(kind == 0, rep.c_start[cidx] if has_c else 0, at),
    )
    body_lo = np.clip(body_lo, entry, np.maximum(at, entry))
    waited = (kind == 0) & ((rep.c_edge[cidx] == EDGE_WAIT) if has_c else False)
    body_lo = np.where(waited, entry, body_lo)
    body_cat = np.where(kind == 2, g.g_cat[gidx] if has_g else 0, g.c_cat[cidx] if has_c else 0)
    g_edge = ge[gidx] if has_g else np.zeros(len(nodes), np.int64)
    edge_cat = np.where(
        kind < 2,
        _CAT["cpu"],
        np.where(
            g_edge == EDGE_LAUNCH,
            _CAT["launch"],
            np.where(g_edge == EDGE_STREAM, body_cat, _CAT["other"]),
        ),
    )
    dl = np.where(kind == 1, g.c_dl[cidx] if has_c else 0.0, 0.0)
    dl_len = ((body_lo - entry) * dl).astype(np.int64)
    del dl, g_edge
    # Three segments a node (data loading, the edge, the body): the arrays are n long each, so
    # the small ones are kept small (categories and parts in one byte, node ids in four).
    los = np.concatenate((entry, entry + dl_len, body_lo))
    his = np.concatenate((entry + dl_len, body_lo, np.maximum(at, body_lo)))
    del entry, dl_len, at
    cats = np.concatenate((np.full(len(nodes), _CAT["data_loading"]), edge_cat, body_cat)).astype(
        np.int8)
    del edge_cat, body_cat, body_lo
    ref = np.where(kind == 2, nc + gidx, cidx).astype(np.int32 if n < 2**31 else np.int64)
    nid = np.concatenate((ref, ref, ref))
    part = np.repeat(np.arange(3, dtype=np.int8), len(nodes))
    del ref, kind, cidx, gidx
    # Host time before the path's first node and after its last, inside the steps.
    st = rep.step_times
    if st.height:
        w_lo, w_hi = int(st["wall_start_ns"].min()), int(st["wall_end_ns"].max())  # type: ignore[arg-type]
        pre = np.array([w_lo, min(int(los.min()), w_hi)])
        post = np.array([max(int(his.max()), w_lo), w_hi])
        for lo_, hi_ in (pre, post):
            if hi_ > lo_:
                share = float(_covered(g.dl_lo, g.dl_hi, np.array([lo_]), np.array([hi_]))[0])
                mid = lo_ + int(share)
                los = np.concatenate((los, [lo_, mid]))
                his = np.concatenate((his, [mid, hi_]))
                cats = np.concatenate(
                    (cats, np.array([_CAT["data_loading"], _CAT["cpu"]], cats.dtype)))
                nid = np.concatenate((nid, np.array([-1, -1], nid.dtype)))
                part = np.concatenate((part, np.array([0, 1], part.dtype)))
    keep = np.flatnonzero(his > los)
    keep = keep[np.lexsort((part[keep], los[keep]))]
    lo_, hi_ = los[keep], his[keep]
    cat_, nid_ = cats[keep].astype(np.int64), nid[keep].astype(np.int64)
    del los, his, cats, nid, part, keep
    # A copy that ends after its call returned makes the path step back a little: each segment
    # starts where the one before it ended, so the segments never overlap.
    if len(lo_):
        reach = np.maximum.accumulate(hi_)
        lo_ = np.concatenate((lo_[:1], np.maximum(lo_[1:], reach[:-1])))
        ok = hi_ > lo_
        lo_, hi_, cat_, nid_ = lo_[ok], hi_[ok], cat_[ok], nid_[ok]
    return Path(lo=lo_, hi=hi_, cat=cat_, node=nid_)


def node_binder(g: Graph, rep: Replay) -> tuple[np.ndarray, np.ndarray]:
    """For every node of :func:`critical_path` (call ends, call starts, GPU activities, then a
    sentinel), the node whose time set its own (the sentinel where none did), and its time."""
    nc, ng = g.n_calls, g.n_gpu
    n = 2 * nc + ng
    sentinel = n
    binder = np.full(n + 1, sentinel, np.int64)
    if nc:
        ci = np.arange(nc)
        w = rep.c_edge == EDGE_WAIT
        binder[:nc] = np.where(w, 2 * nc + np.maximum(g.c_wait, 0), nc + ci)
        binder[nc + 1 : 2 * nc] = ci[:-1]
    ge = rep.g_edge
    gi = np.arange(ng)
    first = np.ones(ng, bool)
    first[1:] = g.g_seg[1:] != g.g_seg[:-1]
    rc = rep.g_ready_call
    binder[2 * nc : n] = np.where(
        ge == EDGE_STREAM,
        np.where(first, sentinel, 2 * nc + gi - 1),
        np.where(
            (ge == EDGE_LAUNCH) & (rc >= 0),
            nc + np.maximum(rc, 0),
            np.where(ge == EDGE_CROSS, 2 * nc + np.maximum(g.g_x, 0), sentinel),
        ),
    )
    point = np.concatenate((rep.c_end, rep.c_start, rep.g_end, [0]))
    return binder, point


def _chain(binder: np.ndarray, tail: int, sentinel: int) -> np.ndarray:
    """The nodes from ``tail`` back through ``binder``, ``tail`` first.

    Following the pointers one by one is a Python loop over the path; keeping every power of
    ``binder`` (pointer doubling) holds log2(n) arrays of n. Instead ``binder`` is raised to a
    power ``s`` near sqrt(n) (two arrays at a time), the path is walked in jumps of ``s`` from
    ``tail`` (at most n / s steps), and the ``s`` nodes after each of those marks are filled in
    together (``s`` vectorized steps): O(n log n) time, O(n) memory, O(sqrt(n)) Python steps."""
    dtype = np.int32 if sentinel < 2**31 - 1 else np.int64
    one = binder.astype(dtype)
    bits = max((int(sentinel).bit_length() + 1) // 2, 1)
    far = one
    for _ in range(bits):
        far = far[far]
    stride = 1 << bits
    marks = [int(tail)]
    while (nxt := int(far[marks[-1]])) != sentinel:  # at most n / stride steps
        marks.append(nxt)
    del far
    block = np.empty((len(marks), stride), dtype)
    cur = np.asarray(marks, dtype)
    for j in range(stride):  # stride vectorized steps over every mark at once
        block[:, j] = cur
        cur = one[cur]
    node = block.ravel()
    # Only the last mark's block reaches the sentinel (the sentinel points to itself).
    ends = np.flatnonzero(node == sentinel)
    return node[: ends[0] if ends.size else node.size].astype(np.int64)


def breakdown(g: Graph, rep: Replay, path: Path) -> pl.DataFrame:
    """Per step: its wall-clock range and the time of the critical path in it by category
    (``<category>_ns``, adding up to the step's duration), in absolute trace time."""
    st = rep.step_times
    cols: dict[str, Any] = {
        "step": st["step"],
        "start_ns": st["wall_start_ns"] + g.t0,
        "end_ns": st["wall_end_ns"] + g.t0,
        "duration_ns": st["wall_end_ns"] - st["wall_start_ns"],
    }
    if st.is_empty():
        return pl.DataFrame(
            {**cols, **{f"{c}_ns": pl.Series([], dtype=pl.Int64) for c in CATEGORIES}}
        )
    lo = st["wall_start_ns"].to_numpy()
    hi = st["wall_end_ns"].to_numpy()
    covered = np.zeros((len(CATEGORIES), len(lo)), np.int64)
    for k in range(len(CATEGORIES)):
        m = path.cat == k
        covered[k] = _covered(path.lo[m], path.hi[m], lo, hi)
    total = covered.sum(axis=0)
    # What the path does not reach in a step (it starts later, after the window's first
    # node) counts as other, so the categories add up to the step.
    covered[_CAT["other"]] += np.maximum(hi - lo - total, 0)
    for k, c in enumerate(CATEGORIES):
        cols[f"{c}_ns"] = covered[k]
    return pl.DataFrame(cols).with_columns(pl.col("*").cast(pl.Int64))


def _covered(a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of the union of disjoint sorted intervals [a, b) inside each [lo, hi)."""
    if len(a) == 0:
        return np.zeros(len(lo), np.int64)
    cum = np.concatenate(([0], np.cumsum(b - a)))

    def before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(a, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        part = np.where(
            i > 0, np.clip(t - a[np.maximum(i - 1, 0)], 0, (b - a)[np.maximum(i - 1, 0)]), 0
        )
        return np.where(i > 0, full + part, 0)

    return before(hi) - before(lo)


def path_segments(g: Graph, path: Path, limit: int = 20_000) -> pl.DataFrame:
    """The path's segments for drawing: start_ns, end_ns (absolute), category, where (``cpu``,
    or ``gpu <device>:<stream>``) and the node's name; merged where one node spans several."""
    n = len(path.lo)
    if n == 0:
        return pl.DataFrame(
            schema={
                "start_ns": pl.Int64,
                "end_ns": pl.Int64,
                "category": pl.String,
                "lane": pl.String,
                "name": pl.String,
            }
        )
    nc = g.n_calls
    host_cats = np.isin(
        path.cat, [_CAT["cpu"], _CAT["data_loading"], _CAT["launch"], _CAT["host_wait"]]
    )
    frame = pl.DataFrame(
        {
            "start_ns": path.lo + g.t0,
            "end_ns": path.hi + g.t0,
            "_cat": path.cat,
            "_call": path.node < nc,
            "_host": host_cats,
            "_c": np.clip(path.node, 0, max(nc - 1, 0)),
            "_g": np.clip(path.node - nc, 0, max(g.n_gpu - 1, 0)),
        }
    )
    if frame.height > limit:
        frame = (
            frame.sort(
                pl.col("end_ns") - pl.col("start_ns"),
                "start_ns",
                descending=[True, False],
                maintain_order=True,
            )
            .head(limit)
            .sort("start_ns", maintain_order=True)
        )
    # The texts of the kept segments only (a path has hundreds of thousands of nodes).
    if g.n_gpu:
        gpu = g.gpu.select("device", "stream", "name")[frame["_g"]].select(
            lane=pl.format("gpu {}:{}", "device", "stream"), name="name"
        )
    else:
        gpu = pl.DataFrame({"lane": [""] * frame.height, "name": [""] * frame.height})
    call_names = g.calls["name"][frame["_c"]] if nc else pl.Series([""] * frame.height)
    is_call = frame["_call"]
    # Time before a node's start belongs to the host or the edge; drawn on the node's lane.
    return frame.select(
        "start_ns",
        "end_ns",
        category=pl.Series(CATEGORIES, dtype=pl.String).gather(frame["_cat"]),
        lane=pl.when(is_call | frame["_host"]).then(pl.lit("cpu")).otherwise(gpu["lane"]),
        name=pl.when(is_call).then(call_names).otherwise(gpu["name"]),
    )


@dataclass
class CriticalPath:
    """What the analysis keeps: the graph (not stored), the per-step breakdown and segments."""

    graph: Graph
    replay: Replay
    steps: pl.DataFrame
    segments: pl.DataFrame


def analyze(views: Views, rank: int) -> CriticalPath | None:
    """The graph, its replay and the critical path of ``rank``; None without GPU activity."""
    g = build_graph(views, rank)
    if g is None:
        return None
    rep = replay(g)
    path = critical_path(g, rep)
    return CriticalPath(
        graph=g, replay=rep, steps=breakdown(g, rep, path), segments=path_segments(g, path)
    )


__all__ = [
    "CATEGORIES",
    "Change",
    "CriticalPath",
    "Graph",
    "NODE_BUDGET",
    "Replay",
    "analyze",
    "breakdown",
    "build_graph",
    "critical_path",
    "judged_steps",
    "replay",
    "replace",
    "step_time_ns",
]
