"""Collectives linked across ranks: the job's dependency graph, its replay and its critical path
(docs/critical-path.md, "Collectives across ranks").

A rank's graph (:mod:`analysis.critical_path`) keeps a collective's wait for the other ranks
inside the collective's duration. Here the ranks' graphs are linked: a collective cannot end, on
any rank, before the last rank reached it (its start there) plus its transfer. The link needs
only a few nodes of each rank's graph, its **anchors**: every communication kernel (its arrival,
the kernel's start, and its end) and every step's end. :func:`rank_anchors` reduces a rank's
graph to them: for each anchor, the collective of the same rank that its arrival waited for
through the rank's own graph (the first collective on the chain of edges that set its time,
``pred``), the time from that collective's end to the arrival (``local_ns``: the rank's own
work, host and GPU) and that time by the critical path's categories. That is all a job's
worker sends (:mod:`analysis.job_reduce`); the client links every rank's anchors
(:func:`link`), matching collectives as :mod:`analysis.comm` and :mod:`analysis.job` match
them (step, kernel name, ordinal) and taking each one's transfer from ``comm``'s estimate.

The linked graph's nodes are the anchors; its edges:

- ``pred -> arrival``: a rank reaches a collective ``local_ns`` after the end of the collective
  it waited for (or at its recorded time, where its chain reaches back to no collective);
- ``arrivals -> end``: a matched collective ends at the later of its own arrival plus its
  transfer and the last rank's arrival plus what it took after it in the trace
  (``end - last arrival``: the transfer, and whatever slack the trace shows);
- a collective seen on some ranks only keeps its recorded duration after its arrival.

:func:`replay` solves it with numpy (a fixed point of the max-plus equations, one vectorised
pass per round of collectives); the unchanged graph gives back every anchor's recorded time.
A step of the job ends when its last rank's step ends (each rank's step ends as
``analysis.steps.with_wall_times`` says), and starts where the step before it ended.
:func:`critical_path` follows the edges that set each anchor's time back from the job's last
step end: at a collective that waited, to the rank that arrived last, so the path crosses ranks
and says which rank, and which of its work, sets each step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from traceanalyzer.analysis.critical_path import (
    _CAT,
    CATEGORIES,
    EDGE_LAUNCH,
    EDGE_STREAM,
    Graph,
    Replay,
    _chain,
    node_binder,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

#: The columns of :func:`rank_anchors`' frame (what a job's worker sends per anchor).
ANCHOR_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "idx": pl.Int64,  # the anchor's row in its rank's frame
        "kind": pl.String,  # "collective" or "step"
        "step": pl.Int64,
        "name": pl.String,  # the kernel's name (null for a step's end)
        "start_ns": pl.Int64,  # a collective's arrival; a step's wall-clock start
        "end_ns": pl.Int64,  # a collective's end; a step's wall-clock end
        "pred": pl.Int64,  # idx of the collective the arrival waited for, else -1
        "from_ns": pl.Int64,  # that collective's end (or where the chain began)
        "local_ns": pl.Int64,  # from from_ns to the arrival (a step: to its end)
        **{f"{c}_ns": pl.Int64 for c in CATEGORIES},
    }
)
#: Most rounds of the linked replay (a round settles at least one more collective per rank).
MAX_ROUNDS = 100_000


# --- each rank: its anchors -------------------------------------------------------------------


def _node_parts(g: Graph, rep: Replay, binder: np.ndarray, point: np.ndarray) -> np.ndarray:
    """Per node of :func:`critical_path.node_binder` (and the sentinel, last), the time from its
    binder's time to its own by category (n + 1, len(CATEGORIES)), as critical_path cuts a
    node: a call end is its own time (or its wake-up after the work it waited for), a call start
    the host work before it (data loading where a loader span covers it), an activity its run
    and, before it, the launch latency, the stream gap (the activity's own kind) or a wait
    between streams (other). Each row adds up to the node's time less its binder's, so that the
    rows of a chain add up to the chain's length."""
    nc, ng = g.n_calls, g.n_gpu
    n = 2 * nc + ng
    parts = np.zeros((n + 1, len(CATEGORIES)), np.int64)
    entry = point[binder]
    at = point
    total = np.where(binder == n, 0, at - entry)
    if nc:
        ce = np.arange(nc)
        parts[ce, g.c_cat] += total[:nc]
        cs = np.arange(nc, 2 * nc)
        dl = (np.maximum(total[cs], 0) * g.c_dl).astype(np.int64)
        parts[cs, _CAT["data_loading"]] += dl
        parts[cs, _CAT["cpu"]] += total[cs] - dl
    if ng:
        gn = np.arange(2 * nc, n)
        gi = gn - 2 * nc
        e, a = entry[gn], at[gn]
        lo = np.where(binder[gn] == n, a, np.clip(rep.g_start[gi], e, np.maximum(a, e)))
        edge = rep.g_edge[gi]
        edge_cat = np.where(
            edge == EDGE_LAUNCH,
            _CAT["launch"],
            np.where(edge == EDGE_STREAM, g.g_cat[gi], _CAT["other"]),
        )
        before = np.where(binder[gn] == n, 0, lo - e)
        body = np.where(binder[gn] == n, 0, np.maximum(a - lo, 0))
        parts[gn, edge_cat] += before
        parts[gn, g.g_cat[gi]] += body
        parts[gn, _CAT["other"]] += total[gn] - before - body
    return parts


def rank_anchors(g: Graph, rep: Replay) -> pl.DataFrame:
    """The rank's anchors (:data:`ANCHOR_SCHEMA`) from its graph and its unchanged replay: what
    the link across ranks needs of it, one row per communication kernel and per step."""
    nc, ng = g.n_calls, g.n_gpu
    n = 2 * nc + ng
    binder, point = node_binder(g, rep)
    parts = _node_parts(g, rep, binder, point)
    comm = np.nonzero(
        (g.g_cat == _CAT["gpu_communication"])
        & (g.gpu["kind"].cast(pl.String) == "kernel").to_numpy()
    )[0]
    comm = comm[np.argsort(rep.g_start[comm], kind="stable")]
    stop = np.zeros(n + 1, bool)
    stop[2 * nc + comm] = True
    # Follow every node's chain to the first collective on it (pointer doubling, summing the
    # parts on the way): top[v] is that collective's node (or the sentinel), acc[v] the time.
    par = np.where(stop, np.arange(n + 1), binder)
    par[n] = n
    acc = np.where(stop[:, None], 0, parts)
    for _ in range(max(int(n).bit_length(), 1) + 1):
        acc = acc + acc[par]
        par = par[par]
    # The chain's root where it reaches no collective: the node whose binder is the sentinel.
    root_at = _roots(binder, stop, point, n)
    anchor_of = np.full(n + 1, -1, np.int64)
    anchor_of[2 * nc + comm] = np.arange(len(comm))

    # Collectives: from their binder on; their own node adds the time before their start.
    cn = 2 * nc + comm
    b = binder[cn]
    own = parts[cn].copy()
    own[np.arange(len(cn)), g.g_cat[comm]] -= np.maximum(point[cn] - rep.g_start[comm], 0)
    c_cats = acc[b] + np.where((b == n)[:, None], 0, own)
    c_top = np.where(b == n, n, par[b])
    c_pred = np.where(c_top < n, anchor_of[np.minimum(c_top, n)], -1)
    c_from = np.where(
        c_pred >= 0, point[np.minimum(c_top, n)], np.where(b == n, rep.g_start[comm], root_at[b])
    )
    c_at = rep.g_start[comm]
    frames = [
        _frame(
            g,
            kind="collective",
            step=g.g_step[comm],
            name=g.gpu["name"].to_numpy()[comm],
            start=c_at,
            end=rep.g_end[comm],
            pred=c_pred,
            from_=c_from,
            at=c_at,
            cats=c_cats,
        )
    ]
    st = rep.step_times
    if st.height:
        s_ids = st["step"].to_numpy().astype(np.int64)
        w_end = st["wall_end_ns"].to_numpy().astype(np.int64)
        node = _step_end_nodes(g, rep, s_ids, w_end, nc)
        tail = w_end - point[node]
        s_stop = stop[node]
        s_top = np.where(s_stop, node, par[node])
        s_cats = np.where(s_stop[:, None], 0, acc[node])
        s_cats[:, _CAT["cpu"]] += np.maximum(tail, 0)
        s_cats[:, _CAT["other"]] += np.minimum(tail, 0)
        s_pred = np.where(s_top < n, anchor_of[np.minimum(s_top, n)], -1)
        s_from = np.where(s_pred >= 0, point[np.minimum(s_top, n)], root_at[node])
        frames.append(
            _frame(
                g,
                kind="step",
                step=s_ids,
                name=np.full(len(s_ids), None, object),
                start=st["wall_start_ns"].to_numpy().astype(np.int64),
                end=w_end,
                pred=s_pred,
                from_=s_from,
                at=w_end,
                cats=s_cats,
            )
        )
    out = pl.concat(frames, how="vertical_relaxed")
    return (
        out.with_columns(idx=pl.int_range(pl.len(), dtype=pl.Int64))
        .select(list(ANCHOR_SCHEMA))
        .cast(ANCHOR_SCHEMA)
    )


def _roots(binder: np.ndarray, stop: np.ndarray, point: np.ndarray, n: int) -> np.ndarray:
    """Per node, the time of the first node of its chain (the one whose binder is the
    sentinel), or of the collective that stops it."""
    par = np.where(stop | (binder == n), np.arange(n + 1), binder)
    for _ in range(max(int(n).bit_length(), 1) + 1):
        par = par[par]
    return point[par]


def _step_end_nodes(
    g: Graph, rep: Replay, steps: np.ndarray, wall_end: np.ndarray, nc: int
) -> np.ndarray:
    """The node that ends each step: the step's GPU work that ends last where the step ends
    with it, else the last call that ended by the step's end."""
    sel = g.g_step != np.iinfo(np.int64).min
    idx = np.nonzero(sel)[0]
    last = (
        pl.DataFrame({"step": g.g_step[idx], "g": idx, "e": rep.g_end[idx]})
        .sort("e")
        .group_by("step")
        .agg(pl.col("g").last(), pl.col("e").last())
    )
    m = pl.DataFrame({"step": steps, "w": wall_end}).join(
        last, on="step", how="left", maintain_order="left"
    )
    g_last = m["g"].fill_null(-1).to_numpy().astype(np.int64)
    g_e = m["e"].fill_null(np.iinfo(np.int64).min).to_numpy().astype(np.int64)
    order = np.argsort(rep.c_end, kind="stable")
    pos = np.searchsorted(rep.c_end[order], wall_end, side="right") - 1
    call = np.where(pos >= 0, order[np.maximum(pos, 0)], -1)
    use_gpu = (g_last >= 0) & ((g_e >= wall_end) | (call < 0))
    node = np.where(use_gpu, 2 * nc + np.maximum(g_last, 0), np.maximum(call, 0))
    return node.astype(np.int64)


def _frame(
    g: Graph,
    *,
    kind: str,
    step: np.ndarray,
    name: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    pred: np.ndarray,
    from_: np.ndarray,
    at: np.ndarray,
    cats: np.ndarray,
) -> pl.DataFrame:
    local = at - from_
    cats = np.maximum(cats, 0)
    # The parts add up to the chain's length; what they do not hold (threads whose calls
    # overlap, a copy ending after its call returned) counts as other.
    short = local - cats.sum(axis=1)
    cats[:, _CAT["other"]] += np.maximum(short, 0)
    over = cats.sum(axis=1) - np.maximum(local, 0)
    scale = np.where(over > 0, np.maximum(local, 0) / np.maximum(cats.sum(axis=1), 1), 1.0)
    cats = (cats * scale[:, None]).astype(np.int64)
    none = np.iinfo(np.int64).min
    return pl.DataFrame(
        {
            "rank": np.full(len(step), g.rank, np.int32),
            "kind": [kind] * len(step),
            "step": step,
            "name": pl.Series(name, dtype=pl.String),
            "start_ns": start + g.t0,
            "end_ns": end + g.t0,
            "pred": pred,
            "from_ns": from_ + g.t0,
            "local_ns": local,
            **{f"{c}_ns": cats[:, k] for k, c in enumerate(CATEGORIES)},
        }
    ).with_columns(step=pl.when(pl.col("step") != none).then(pl.col("step")))


def views_anchors(views: Views, found: dict[int, Any] | None = None) -> pl.DataFrame:
    """Every rank's anchors of a trace of one or several ranks (empty where none has a graph);
    step ends only of ranks whose trace marks its steps. ``found``: ranks whose graph and replay
    were built already (``critical_path.CriticalPath``; None where a rank has none)."""
    from traceanalyzer.analysis.critical_path import build_graph, replay

    found = found or {}
    frames = []
    for rank in views.ranks:  # a loop over ranks, not events
        if rank in found:
            cp = found[rank]
            if cp is not None:
                frames.append(rank_anchors(cp.graph, cp.replay))
            continue
        g = build_graph(views, rank)
        if g is not None:
            frames.append(rank_anchors(g, replay(g)))
    out = pl.concat(frames) if frames else pl.DataFrame(schema=ANCHOR_SCHEMA)
    # Steps inferred from a repeating kernel sequence need not line up from rank to rank:
    # only marked steps make job steps.
    marked = views.marked_steps["rank"].unique().to_list() if views.marked_steps.height else []
    return out.filter((pl.col("kind") == "collective") | pl.col("rank").is_in(marked))


# --- the job: the link ------------------------------------------------------------------------


@dataclass
class Linked:
    """The linked graph of a job: the anchors of every rank in arrays (one clock), and the
    matched collectives."""

    anchors: pl.DataFrame  # ANCHOR_SCHEMA + inst, transfer_ns, exposed_ns, in the order below
    pred: np.ndarray  # global index of the anchor's pred, else -1
    from_ns: np.ndarray
    local_ns: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    is_coll: np.ndarray
    inst: np.ndarray  # matched collective (0..n_inst-1), else -1
    n_inst: int
    transfer_ns: np.ndarray
    after_ns: np.ndarray  # a matched collective's end less its last arrival, as recorded
    exposed_ns: np.ndarray
    ranks: list[int]
    steps: list[int]  # the steps every rank holds
    _order: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def size(self) -> int:
        return len(self.pred)

    @property
    def order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The replay's sweep order (:func:`_sweep_order`), found once."""
        if self._order is None:
            self._order = _sweep_order(self)
        return self._order


def link(anchors: pl.DataFrame, collectives: pl.DataFrame, matched: pl.DataFrame) -> Linked | None:
    """The linked graph from every rank's anchors (one clock), ``comm``'s collectives
    (:func:`analysis.comm.collectives_from`: rank, name, start_ns, transfer_ns, exposed_ns,
    exposed_wait_ns) and
    the job's matched collectives (:func:`analysis.job.instances_from`'s per-rank frame: rank,
    name, start_ns, step, ordinal). None without two ranks with anchors."""
    ranks = sorted(int(r) for r in anchors["rank"].unique().to_list())
    if len(ranks) < 2:
        return None
    # Joined on (rank, start, the name's hash): names are long kernel signatures.
    keys = ["rank", "start_ns", "_h"]
    tr = collectives.select(
        pl.col("rank").cast(pl.Int32),
        "start_ns",
        "transfer_ns",
        "exposed_ns",
        "exposed_wait_ns",
        _h=pl.col("name").hash(),
    ).unique(keys, keep="first")
    inst = matched.select(
        pl.col("rank").cast(pl.Int32),
        "start_ns",
        "ordinal",
        _h=pl.col("name").hash(),
        _k=pl.struct("step", pl.col("name").hash(), "ordinal").hash(),
    ).unique(keys, keep="first")
    a = (
        anchors.sort("rank", "idx")
        .with_row_index("_i")
        .with_columns(_h=pl.col("name").hash())
        .join(tr, on=keys, how="left", maintain_order="left")
        .join(inst, on=keys, how="left", maintain_order="left")
        .with_columns(inst=(pl.col("_k").rank("dense") - 1).cast(pl.Int64))
        .drop("_h", "_k")
    )
    coll = (a["kind"] == "collective").to_numpy()
    inst_id = a["inst"].fill_null(-1).to_numpy().astype(np.int64)
    inst_id = np.where(coll, inst_id, -1)
    # Global index of each anchor's pred: same rank, its idx.
    base = a.group_by("rank").agg(_b=pl.col("_i").min())
    a = a.join(base, on="rank", how="left", maintain_order="left")
    pred_local = a["pred"].to_numpy().astype(np.int64)
    pred = np.where(pred_local >= 0, a["_b"].to_numpy().astype(np.int64) + pred_local, -1)
    start = a["start_ns"].to_numpy().astype(np.int64)
    end = a["end_ns"].to_numpy().astype(np.int64)
    n_inst = int(inst_id.max()) + 1 if (inst_id >= 0).any() else 0
    arrival = np.where(coll, start, end)
    last = np.full(max(n_inst, 1), np.iinfo(np.int64).min, np.int64)
    sel = inst_id >= 0
    np.maximum.at(last, inst_id[sel], arrival[sel])
    after = np.where(sel, end - last[np.maximum(inst_id, 0)], end - start)
    dur = end - start
    transfer = np.minimum(a["transfer_ns"].fill_null(0).to_numpy().astype(np.int64), dur)
    transfer = np.where(coll & a["transfer_ns"].is_null().to_numpy(), dur, transfer)
    steps_all = a.filter(pl.col("kind") == "step").group_by("step").agg(n=pl.col("rank").n_unique())
    steps = sorted(int(s) for s in steps_all.filter(pl.col("n") == len(ranks))["step"].to_list())
    return Linked(
        anchors=a.drop("_i", "_b"),
        pred=pred,
        from_ns=a["from_ns"].to_numpy().astype(np.int64),
        local_ns=a["local_ns"].to_numpy().astype(np.int64),
        start_ns=start,
        end_ns=end,
        is_coll=coll,
        inst=inst_id,
        n_inst=n_inst,
        transfer_ns=np.where(coll, transfer, 0),
        after_ns=np.where(coll, after, 0),
        exposed_ns=np.minimum(a["exposed_ns"].fill_null(0).to_numpy().astype(np.int64), transfer),
        ranks=ranks,
        steps=steps,
    )


@dataclass
class LinkedChange:
    """A what-if of the linked graph: new local times, ns cut off each collective's end."""

    local_ns: np.ndarray | None = None
    cut_ns: np.ndarray | None = None


@dataclass
class LinkedReplay:
    arrival: np.ndarray  # a collective's arrival; a step's end
    end: np.ndarray
    waited: np.ndarray  # a matched collective whose end the last rank's arrival set
    last_rank_of: np.ndarray  # per instance: the anchor that arrived last
    step_times: pl.DataFrame  # the job's steps: step, start_ns, end_ns, duration_ns


def _sweep_order(lk: Linked) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The order the replay solves the collectives in: the matched ones instance by instance, by
    the recorded time their last rank reached them; before each instance, the unmatched
    collectives reached before it. Returns the members by instance position and their offsets,
    the unmatched by position and theirs."""
    sel = lk.inst >= 0
    arrival = np.where(lk.is_coll, lk.start_ns, lk.end_ns)
    n = max(lk.n_inst, 1)
    ready = np.full(n, np.iinfo(np.int64).max, np.int64)
    m = np.nonzero(sel)[0]
    if len(m):
        ms = m[np.argsort(lk.inst[m], kind="stable")]
        heads = np.nonzero(np.r_[True, lk.inst[ms][1:] != lk.inst[ms][:-1]])[0]
        ready[lk.inst[ms][heads]] = np.maximum.reduceat(arrival[ms], heads)
    inst_pos = np.empty(n, np.int64)
    inst_pos[np.argsort(ready, kind="stable")] = np.arange(n)
    members = m[np.argsort(inst_pos[lk.inst[m]], kind="stable")]
    m_off = np.searchsorted(inst_pos[lk.inst[members]], np.arange(n + 1))
    loose = np.nonzero(lk.is_coll & ~sel)[0]
    batch = np.searchsorted(np.sort(ready), arrival[loose], side="right")
    loose = loose[np.lexsort((arrival[loose], batch))]
    l_off = np.searchsorted(np.sort(batch), np.arange(n + 2))
    return members, m_off, loose, l_off


def replay(lk: Linked, change: LinkedChange | None = None) -> LinkedReplay:
    """The anchors' times from the linked graph's edges. One sweep solves the max-plus equations
    in the order of :func:`_sweep_order` (one vectorised step per matched collective, over all
    its ranks; Python loops over collectives, never over a rank's events), then rounds of every
    anchor at once check that nothing moves (and fix what a clock skew put out of order). The
    unchanged graph gives back the recorded times."""
    ch = change or LinkedChange()
    local = lk.local_ns if ch.local_ns is None else ch.local_ns
    cut = np.zeros(lk.size, np.int64) if ch.cut_ns is None else ch.cut_ns
    has_pred = lk.pred >= 0
    p = np.maximum(lk.pred, 0)
    sel = lk.inst >= 0
    dur = lk.end_ns - lk.start_ns
    end = lk.end_ns.copy()
    if change is not None:
        members, m_off, loose, l_off = lk.order

        def loose_batch(ix: np.ndarray) -> None:
            for _ in range(MAX_ROUNDS):  # chains of unmatched collectives between two matched
                a = np.where(has_pred[ix], end[p[ix]], lk.from_ns[ix]) + local[ix]
                e = np.maximum(a + dur[ix] - cut[ix], a)
                if np.array_equal(e, end[ix]):
                    break
                end[ix] = e

        for pos in range(len(m_off) - 1):
            if l_off[pos + 1] > l_off[pos]:
                loose_batch(loose[l_off[pos] : l_off[pos + 1]])
            ix = members[m_off[pos] : m_off[pos + 1]]
            if len(ix):
                a = np.where(has_pred[ix], end[p[ix]], lk.from_ns[ix]) + local[ix]
                e = np.maximum(a + lk.transfer_ns[ix], a.max() + lk.after_ns[ix]) - cut[ix]
                end[ix] = np.maximum(e, a)
        if len(l_off) > len(m_off) and l_off[-1] > l_off[-2]:
            loose_batch(loose[l_off[-2] : l_off[-1]])
    arrival = np.where(lk.is_coll, lk.start_ns, lk.end_ns)
    n_inst = max(lk.n_inst, 1)
    last = np.full(n_inst, np.iinfo(np.int64).min, np.int64)
    # The matched collectives grouped by instance, for a segmented maximum per round.
    by_inst = np.nonzero(sel)[0]
    by_inst = by_inst[np.argsort(lk.inst[by_inst], kind="stable")]
    inst_sorted = lk.inst[by_inst]
    heads = np.nonzero(np.r_[True, inst_sorted[1:] != inst_sorted[:-1]])[0][: len(by_inst)]
    for _ in range(MAX_ROUNDS):
        arrival = np.where(has_pred, end[p], lk.from_ns) + local
        if len(by_inst):
            last[inst_sorted[heads]] = np.maximum.reduceat(arrival[by_inst], heads)
        own = arrival + np.where(sel, lk.transfer_ns, dur)
        floor = np.where(sel, last[np.maximum(lk.inst, 0)] + lk.after_ns, own)
        new = np.where(lk.is_coll, np.maximum(np.maximum(own, floor) - cut, arrival), arrival)
        if np.array_equal(new, end):
            break
        end = new
    own = arrival + np.where(sel, lk.transfer_ns, 0)
    waited = sel & (last[np.maximum(lk.inst, 0)] + lk.after_ns >= own)
    # Per instance, the anchor that arrived last (the lowest rank among equals).
    order = np.lexsort((-np.arange(lk.size), np.where(sel, arrival, np.iinfo(np.int64).min)))
    last_of = np.full(n_inst, -1, np.int64)
    last_of[lk.inst[order][sel[order]]] = order[sel[order]]
    return LinkedReplay(
        arrival=arrival,
        end=end,
        waited=waited,
        last_rank_of=last_of,
        step_times=_job_steps(lk, end),
    )


def _job_steps(lk: Linked, end: np.ndarray) -> pl.DataFrame:
    """The job's steps: a step ends when its last rank's step ends, and starts where the step
    before it ended (the first: at its ranks' earliest recorded start; what comes before the
    first step is not what a fix of the steps changes)."""
    frame = (
        lk.anchors.select("kind", "step")
        .with_columns(start=pl.Series(lk.start_ns), end=pl.Series(end))
        .filter(pl.col("kind") == "step", pl.col("step").is_in(lk.steps))
    )
    job = frame.group_by("step").agg(pl.col("start").min(), pl.col("end").max()).sort("step")
    return job.select(
        "step",
        start_ns=pl.coalesce(pl.col("end").shift(1), pl.col("start")),
        end_ns="end",
    ).with_columns(duration_ns=pl.col("end_ns") - pl.col("start_ns"))


def step_time_ns(rep: LinkedReplay) -> float | None:
    """The job's mean step time (ns), None without steps every rank holds."""
    st = rep.step_times
    return float(st["duration_ns"].mean()) if st.height else None  # type: ignore[arg-type]


# --- the critical path across ranks -----------------------------------------------------------


def critical_path(lk: Linked, rep: LinkedReplay) -> pl.DataFrame:
    """Per job step: its range and duration, the critical path's time by category
    (``<category>_ns``, adding up to the step) and by rank, and ``rank``: the rank whose work
    holds the most of it (the rank that sets the step time), with its share (``rank_pct``).

    The path runs back from the job's last step end: a step end or a collective's arrival to the
    collective it waited for on its rank (its local work, by category, on that rank); a matched
    collective that waited for the other ranks to the rank that arrived last (the transfer
    after that arrival is communication of that rank). A segment's local work is spread evenly
    over its time where a step boundary cuts it."""
    st = rep.step_times
    if st.is_empty():
        return pl.DataFrame()
    n = lk.size
    ranks = lk.anchors["rank"].to_numpy().astype(np.int64)
    via = np.arange(n)
    w = rep.waited & (rep.last_rank_of[np.maximum(lk.inst, 0)] >= 0)
    via = np.where(w, rep.last_rank_of[np.maximum(lk.inst, 0)], via)
    parent = np.where(lk.pred[via] >= 0, lk.pred[via], n)
    binder = np.append(parent, n)
    is_step = (lk.anchors["kind"] == "step").to_numpy()
    last_step = int(st["step"][-1])
    cand = np.nonzero(is_step & (lk.anchors["step"] == last_step).fill_null(False).to_numpy())[0]
    tail = int(cand[np.argmax(rep.end[cand])])
    nodes = _chain(binder, tail, n)[::-1]
    # Each node's segment: [its parent's end (or its via's start), via's arrival) local work on
    # via's rank, [arrival, end) communication for a collective.
    v = via[nodes]
    arr = rep.arrival[v]
    lo = np.where(lk.pred[v] >= 0, rep.end[np.maximum(lk.pred[v], 0)], arr - lk.local_ns[v])
    hi_local = arr
    cats = lk.anchors.select([f"{c}_ns" for c in CATEGORIES]).to_numpy().astype(np.float64)[v]
    cats_sum = cats.sum(axis=1)
    comm_hi = np.where(lk.is_coll[nodes], rep.end[nodes], arr)
    s_lo = st["start_ns"].to_numpy()
    s_hi = st["end_ns"].to_numpy()
    # Overlap of each segment with each step (segments x steps: the path's collectives x steps).
    ov_local = np.clip(np.minimum(hi_local[:, None], s_hi) - np.maximum(lo[:, None], s_lo), 0, None)
    frac = ov_local / np.maximum(hi_local - lo, 1)[:, None]
    ov_comm = np.clip(np.minimum(comm_hi[:, None], s_hi) - np.maximum(arr[:, None], s_lo), 0, None)
    by_cat = np.einsum("ns,nc->sc", frac, cats * (cats_sum > 0)[:, None])
    by_cat[:, _CAT["gpu_communication"]] += ov_comm.sum(axis=0)
    dur = (s_hi - s_lo).astype(np.float64)
    # Whole ns, adding up to the step: what the path does not reach is other.
    by_cat = np.floor(by_cat)
    by_cat[:, _CAT["other"]] = 0
    by_cat *= np.minimum(1.0, dur / np.maximum(by_cat.sum(axis=1), 1))[:, None]
    by_cat = np.floor(by_cat)
    by_cat[:, _CAT["other"]] = dur - by_cat.sum(axis=1)
    r_of = ranks[v]
    rank_ids = np.array(lk.ranks)
    pos = np.searchsorted(rank_ids, r_of)
    by_rank = np.zeros((len(s_lo), len(rank_ids)))
    np.add.at(by_rank.T, pos, ov_local + ov_comm)
    top = np.argmax(by_rank, axis=1)
    top_ns = by_rank[np.arange(len(s_lo)), top]
    out: dict[str, Any] = {
        "step": st["step"],
        "start_ns": st["start_ns"],
        "end_ns": st["end_ns"],
        "duration_ns": st["duration_ns"],
        "rank": np.where(top_ns > 0, rank_ids[top], -1),
        "rank_pct": np.where(dur > 0, 100.0 * top_ns / np.maximum(dur, 1), 0.0),
    }
    for k, c in enumerate(CATEGORIES):
        out[f"{c}_ns"] = np.round(by_cat[:, k]).astype(np.int64)
    frame = pl.DataFrame(out).with_columns(
        pl.col("rank").cast(pl.Int32),
        by_rank=pl.Series(
            [
                [
                    {"rank": int(r), "ns": int(round(x))}
                    for r, x in zip(rank_ids, row, strict=True)
                    if x > 0
                ]
                for row in by_rank
            ]
        ),
    )
    return frame.with_columns(pl.when(pl.col("rank") >= 0).then(pl.col("rank")).alias("rank"))


# --- what-if ----------------------------------------------------------------------------------

#: What the linked what-ifs assume (the job's JSON and terminal say it).
ASSUMES = {
    "collective-wait": "the ranks are balanced: in each step, each rank's own work is scaled "
    "so that its own time (the step less the time its GPU only waited in collectives for the "
    "other ranks) is the ranks' mean, as an even split of the same work; the transfers stay",
    "nccl-not-overlapped": "each collective's exposed transfer overlaps compute on every rank: "
    "the collective ends that much earlier, and what waited for it moves with it",
}


def balanced(lk: Linked) -> LinkedChange:
    """The ranks balanced: in each step, every rank's own work (its local times) scaled so that
    its own time in the step (the step's duration less the time its GPU did nothing but wait in
    collectives for the other ranks: rule collective-wait's figure, ``analysis.comm``'s
    ``exposed_wait_ns``) is the ranks' mean: what an even split of the same total work gives.
    Only the part of a local time inside its step scales (a chain that reaches back to no
    collective can begin steps earlier); anchors outside the steps every rank holds stay."""
    a = lk.anchors
    frame = pl.DataFrame(
        {
            "rank": a["rank"],
            "step": a["step"],
            "kind": a["kind"],
            "at": np.where(lk.is_coll, lk.start_ns, lk.end_ns),
            "dur": np.where(lk.is_coll, 0, lk.end_ns - lk.start_ns),
            "waited": a["exposed_wait_ns"].fill_null(0),
            "local": lk.local_ns,
        }
    )
    own = (
        frame.filter(pl.col("step").is_in(lk.steps))
        .group_by("rank", "step")
        .agg(
            own=pl.col("dur").sum() - pl.col("waited").sum(),
            step_lo=(pl.col("at") - pl.col("dur")).filter(pl.col("kind") == "step").first(),
        )
        .filter(pl.col("own") > 0)
        .with_columns(scale=pl.col("own").mean().over("step") / pl.col("own"))
    )
    inside_step = pl.min_horizontal("local", (pl.col("at") - pl.col("step_lo")).clip(lower_bound=0))
    scaled = frame.join(own, on=["rank", "step"], how="left", maintain_order="left").select(
        (pl.col("local") + (pl.col("scale") - 1.0) * inside_step)
        .fill_null(pl.col("local"))
        .round()
        .cast(pl.Int64)
    )
    return LinkedChange(local_ns=scaled.to_series().to_numpy().astype(np.int64))


def overlapped(lk: Linked) -> LinkedChange:
    """Each collective's exposed transfer cut off its end."""
    return LinkedChange(cut_ns=np.where(lk.is_coll, lk.exposed_ns, 0))


def what_if(lk: Linked) -> dict[str, Any]:
    """The job's step time now and with each linked fix (``collective-wait``: the ranks
    balanced; ``nccl-not-overlapped``: the exposed transfers hidden)."""
    base = step_time_ns(replay(lk))
    out: dict[str, Any] = {"step_time_ns": _round(base), "fixes": {}}
    for slug, change in (
        ("collective-wait", balanced(lk)),
        ("nccl-not-overlapped", overlapped(lk)),
    ):
        new = step_time_ns(replay(lk, change))
        out["fixes"][slug] = {
            "step_time_ns": _round(new),
            "saving_ns": None if new is None or base is None else _round(base - new),
            "assumes": ASSUMES[slug],
        }
    return out


def _round(v: float | None) -> int | None:
    return None if v is None else int(round(v))


@dataclass
class JobCritical:
    """What a job keeps of its linked graph: per step, the cross-rank critical path; the
    linked what-ifs."""

    steps: pl.DataFrame
    what_if: dict[str, Any]
    collectives: int  # matched collectives linked
    anchors: int


def analyze_linked(
    anchors: pl.DataFrame, collectives: pl.DataFrame, matched: pl.DataFrame
) -> JobCritical | None:
    """The job's critical path across ranks and its linked what-ifs; None without two ranks
    with a graph or without steps every rank holds."""
    lk = link(anchors, collectives, matched)
    if lk is None or not lk.steps:
        return None
    rep = replay(lk)
    return JobCritical(
        steps=critical_path(lk, rep), what_if=what_if(lk), collectives=lk.n_inst, anchors=lk.size
    )


def to_dict(jc: JobCritical) -> dict[str, Any]:
    """The job JSON's ``critical_path``."""
    return {
        "linked_collectives": jc.collectives,
        "steps": jc.steps.to_dicts(),
        "what_if": jc.what_if,
    }


#: Steps the terminal lists (the JSON has every one).
TERMINAL_STEPS = 8
_LABEL = {
    "gpu_compute": "GPU compute",
    "gpu_communication": "communication",
    "gpu_copy": "copies",
    "cpu": "CPU",
    "launch": "launches",
    "host_wait": "host waits",
    "data_loading": "data loading",
    "other": "other",
}


def render_lines(jc: JobCritical) -> list[str]:
    """The terminal's lines: per step, the rank that sets it and what its path is made of; the
    linked what-ifs."""

    def ms(ns: float | None) -> str:
        return "-" if ns is None else f"{ns / 1e6:.2f} ms"

    lines = [f"Critical path across ranks ({jc.collectives} collectives linked):"]
    for row in jc.steps.head(TERMINAL_STEPS).iter_rows(named=True):
        dur = max(int(row["duration_ns"]), 1)
        parts = sorted(((row[f"{c}_ns"], c) for c in CATEGORIES), reverse=True)
        mix = ", ".join(f"{_LABEL[c]} {100 * v / dur:.0f}%" for v, c in parts[:3] if v > 0)
        who = "no rank" if row["rank"] is None else f"rank {row['rank']} ({row['rank_pct']:.0f}%)"
        lines.append(f"  step {row['step']}: {ms(row['duration_ns'])}, set by {who}: {mix}")
    if jc.steps.height > TERMINAL_STEPS:
        lines.append(f"  ... {jc.steps.height - TERMINAL_STEPS} more steps in --json")
    base = jc.what_if["step_time_ns"]
    for slug, fix in jc.what_if["fixes"].items():
        lines.append(
            f"  what-if {slug} (linked): {ms(base)} -> {ms(fix['step_time_ns'])} a step "
            f"(saving {ms(fix['saving_ns'])}): {fix['assumes']}"
        )
    return lines


__all__ = [
    "ANCHOR_SCHEMA",
    "JobCritical",
    "Linked",
    "LinkedChange",
    "analyze_linked",
    "critical_path",
    "link",
    "rank_anchors",
    "render_lines",
    "replay",
    "to_dict",
    "views_anchors",
    "what_if",
]
