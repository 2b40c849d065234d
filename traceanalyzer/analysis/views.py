"""Derived views over a canonical trace, computed once and shared by metrics and rules.

Rules read these by name (also as tables in their SQL queries): ``gpu``, ``cpu``,
``annotations``, ``syncs``, ``counters``, ``memory``, ``steps``, ``launches``, ``idle_gaps``,
``kernel_summary``, ``collectives``. Each view is computed on first use and cached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cached_property, wraps
from typing import Any, TypeVar

import polars as pl

from traceanalyzer.analysis.comm import exposed_by_rank, step_collectives
from traceanalyzer.analysis.idle import RANK_KEYS, assign_steps, idle_gaps
from traceanalyzer.analysis.kernels import kernel_summary
from traceanalyzer.analysis.launches import launches
from traceanalyzer.analysis.metrics import compute_metrics
from traceanalyzer.analysis.result import Metrics
from traceanalyzer.analysis.steps import (
    INFERRED_STEPS,
    SOURCE_INFERRED,
    find_steps,
    infer_steps,
    kept_steps,
    with_wall_times,
)
from traceanalyzer.analysis.timings import step
from traceanalyzer.model import Trace

TABLE_NAMES = ("gpu", "cpu", "annotations", "syncs", "counters", "memory", "steps", "launches",
               "idle_gaps", "gpu_idle_gaps", "kernel_summary", "collectives", "kernel_metrics")


T = TypeVar("T")


def _view(fn: Callable[[Any], T]) -> cached_property[T]:
    """A cached view whose first computation is a step of the run's timings (analysis.timings)."""
    name = fn.__name__.lstrip("_")

    @wraps(fn)
    def timed(self: Any) -> T:
        with step(name, "view"):
            return fn(self)

    return cached_property(timed)


class Views:
    """Lazily computed, cached derived frames of one trace. Never mutates the trace."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.meta = trace.meta

    @property
    def gpu(self) -> pl.DataFrame:
        return self.trace.gpu

    @property
    def cpu(self) -> pl.DataFrame:
        return self.trace.cpu

    @property
    def annotations(self) -> pl.DataFrame:
        return self.trace.annotations

    @property
    def syncs(self) -> pl.DataFrame:
        return self.trace.syncs

    @property
    def counters(self) -> pl.DataFrame:
        return self.trace.counters

    @property
    def memory(self) -> pl.DataFrame:
        return self.trace.memory

    @_view
    def kernel_metrics(self) -> pl.DataFrame:
        """Nsight Compute's per-launch metrics the trace carries (empty without them): see
        model.kernel_metrics_frame."""
        from traceanalyzer.model import kernel_metrics_frame

        return kernel_metrics_frame(self.meta)

    @_view
    def kernel_verdicts(self) -> pl.DataFrame:
        """``kernel_metrics`` judged against the roofline and matched to the timeline's kernels
        (analysis.ncu.judge_kernels); empty without kernel metrics."""
        from traceanalyzer.analysis.ncu import judge_kernels

        km = self.kernel_metrics
        return km if km.is_empty() else judge_kernels(km, self.gpu)

    @_view
    def _found_steps(self) -> tuple[pl.DataFrame, str | None, str | None]:
        steps, source, label = find_steps(self.trace)
        if steps.is_empty():
            kept = self.trace.meta.extra.get(INFERRED_STEPS)
            window = self.trace.meta.extra.get("window")
            if kept:  # a window cut to inferred steps: those steps (analysis.window)
                label = window.get("step_label") if isinstance(window, dict) else None
                return kept_steps(kept), SOURCE_INFERRED, label
            inferred, inferred_label = infer_steps(self._raw_launches)
            if not inferred.is_empty():
                return inferred, SOURCE_INFERRED, inferred_label
        return steps, source, label

    @property
    def cpu_steps(self) -> pl.DataFrame:
        """Steps as annotated (or inferred): rank, step, name, start_ns, end_ns of the CPU-side
        range."""
        return self._found_steps[0]

    @property
    def step_source(self) -> str | None:
        """How the steps were found: analysis.steps.SOURCE_*, or None when there are none."""
        return self._found_steps[1]

    @property
    def step_label(self) -> str | None:
        """The steps' shared name with the number taken out ("step #"), or how they were inferred."""
        return self._found_steps[2]

    @_view
    def steps(self) -> pl.DataFrame:
        """Steps with their CPU range (start_ns, end_ns), the GPU work launched in them
        (gpu_start_ns, gpu_end_ns) and their wall-clock range (wall_start_ns, wall_end_ns);
        see analysis.steps.with_wall_times."""
        return with_wall_times(self.cpu_steps, self.launches)

    @_view
    def wall_steps(self) -> pl.DataFrame:
        """Steps whose start_ns/end_ns are their wall-clock range, for placing GPU-side events."""
        return self.steps.with_columns(start_ns="wall_start_ns", end_ns="wall_end_ns")

    @_view
    def _raw_launches(self) -> pl.DataFrame:
        return launches(self.trace)

    @_view
    def launches(self) -> pl.DataFrame:
        """GPU activity + launching call (see analysis.launches), with the step whose CPU range
        it was launched in."""
        # Work is placed in the step it was launched in. Work whose launch is not in the trace
        # (launched before the capture began) belongs to no step, unless the rank records no
        # launches at all (a GPU-only trace), where its start places it.
        known = pl.col("launch_start_ns").is_not_null().any().over("rank")
        frame = self._raw_launches.with_columns(
            _at=pl.coalesce("launch_start_ns", pl.when(~known).then("start_ns")))
        return assign_steps(frame, self.cpu_steps, at="_at").drop("_at")

    @_view
    def idle_gaps(self) -> pl.DataFrame:
        return idle_gaps(self.launches, self.wall_steps)

    @_view
    def gpu_idle_gaps(self) -> pl.DataFrame:
        """Gaps in the union of each rank's GPU activity: when no stream was busy."""
        return idle_gaps(self.launches, self.wall_steps, keys=RANK_KEYS)

    @_view
    def kernel_summary(self) -> pl.DataFrame:
        return kernel_summary(self.gpu)

    @_view
    def collectives(self) -> pl.DataFrame:
        """The communication kernels that count (every rank's), with their transfer, wait and
        exposed parts: see analysis.comm.step_collectives."""
        return step_collectives(self.marked_launches, self.marked_steps)

    @property
    def marked_steps(self) -> pl.DataFrame:
        """The steps the trace marks (not inferred ones): collectives are matched across ranks by
        step, and inferred steps need not line up from one rank to the next."""
        return self.steps if self.step_source != SOURCE_INFERRED else self.steps.clear()

    @property
    def marked_launches(self) -> pl.DataFrame:
        """``launches`` with the step of :attr:`marked_steps` (null where steps were inferred)."""
        if self.step_source != SOURCE_INFERRED:
            return self.launches
        return self.launches.with_columns(step=pl.lit(None, pl.Int64))

    @_view
    def ranks(self) -> list[int]:
        ranks = set(self.gpu["rank"].unique().to_list()) | set(self.cpu["rank"].unique().to_list())
        return sorted(r for r in ranks if r is not None) or [self.meta.rank]

    @_view
    def metrics_by_rank(self) -> dict[int, Metrics]:
        out = {}
        for rank in self.ranks:
            def of(frame: pl.DataFrame, rank: int = rank) -> pl.DataFrame:
                ranks = frame["rank"]
                if ranks.null_count() == 0 and ranks.min() == rank and ranks.max() == rank:
                    return frame  # all of it (one rank): no copy of every column
                return frame.filter(pl.col("rank") == rank)
            out[rank] = compute_metrics(rank, of(self.launches), of(self.cpu), of(self.gpu_idle_gaps),
                                        of(self.wall_steps))
        if any(m.communication_ns for m in out.values()):
            for row in self.exposed_comm.iter_rows(named=True):
                m = out.get(row["rank"])
                if m is not None and m.communication_ns:
                    m.exposed_transfer_ns = int(row["exposed_comm_ns"])
                    m.comm_wait_ns = int(row["comm_wait_ns"])
                    m.exposed_transfer_basis = row["exposed_comm_basis"]
        return out

    @_view
    def exposed_comm(self) -> pl.DataFrame:
        """Per rank, exposed transfer and wait (:func:`analysis.comm.exposed_by_rank`): the one
        computation the headline, the rules and the job view read."""
        return exposed_by_rank(self.collectives, self.marked_steps, self.ranks)

    @_view
    def metrics(self) -> Metrics:
        """Headline metrics: of the trace's own rank, or the lowest rank present."""
        by_rank = self.metrics_by_rank
        return by_rank.get(self.meta.rank) or by_rank[min(by_rank)]

    def attributed_kernels(self, rank: int) -> pl.DataFrame:
        """The kernels of ``rank`` with the operator call each belongs to
        (:func:`perfmodel.model.attributed_kernels`), computed once per rank for the
        performance model and the what-if (a cache that :meth:`for_rank`'s views share)."""
        from traceanalyzer.perfmodel.model import attributed_kernels

        cache: dict[int, pl.DataFrame] = self.__dict__.setdefault("_attributed", {})
        if rank not in cache:
            with step("attributed_kernels", "view"):
                cache[rank] = attributed_kernels(
                    of_rank(self.launches, rank), of_rank(self.cpu, rank)
                )
        return cache[rank]

    @_view
    def perf_model(self) -> tuple[pl.DataFrame, dict[str, Any]]:
        """The performance model of the headline rank (:func:`perfmodel.summarize`), computed
        once for the result and the roofline rules."""
        from traceanalyzer.perfmodel import summarize

        return summarize(self, self.metrics.rank)

    @_view
    def perf_roofline(self) -> tuple[pl.DataFrame | None, str | None]:
        """The roofline per operator signature of the headline rank against the peaks of the GPU
        it ran on (:func:`perfmodel.device_roofline`), shared by the roofline rules; (None, why)
        without shapes or without peaks for the device."""
        from traceanalyzer.perfmodel import device_roofline
        from traceanalyzer.rules.detectors._common import analyzed_device

        return device_roofline(self.cpu, self.perf_model[0], analyzed_device(self))

    @property
    def window(self) -> tuple[int, int] | None:
        """The analyzed window: from the first to the last GPU activity (or CPU event)."""
        m = self.metrics
        if m.window_start_ns is not None and m.window_end_ns is not None:
            return m.window_start_ns, m.window_end_ns
        if self.cpu.is_empty():
            return None
        return int(self.cpu["start_ns"].min()), int(self.cpu["end_ns"].max())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype

    def device_sm_count(self, device: int | None) -> int | None:
        dev = self.meta.device(device)
        if dev is not None and dev.sm_count:
            return dev.sm_count
        counts = {d.sm_count for d in self.meta.devices if d.sm_count}
        return counts.pop() if len(counts) == 1 else None

    def tables(self) -> dict[str, pl.DataFrame]:
        """All views by name, for SQL queries."""
        return {name: getattr(self, name) for name in TABLE_NAMES}

    def for_rank(self, rank: int) -> Views:
        """These views with ``rank`` as the headline, for judging another rank of a file that
        holds several: the views of every rank (launches, gaps, steps, collectives) already
        computed are shared, not rebuilt; only the headline's own are computed again."""
        other = type(self)(replace(self.trace, meta=replace(self.meta, rank=rank)))
        other.__dict__.update({k: v for k, v in self.__dict__.items()
                               if k not in ("trace", "meta", *HEADLINE_VIEWS)})
        return other


def of_rank(frame: pl.DataFrame, rank: int) -> pl.DataFrame:
    """The rows of ``rank``: the frame itself when it holds no other (no copy of its columns)."""
    ranks = frame["rank"]
    if frame.height and ranks.null_count() == 0 and ranks.min() == rank == ranks.max():
        return frame
    return frame.filter(pl.col("rank") == rank)


#: The cached views that depend on the headline rank (:meth:`Views.for_rank` recomputes them).
HEADLINE_VIEWS = ("metrics", "perf_model", "perf_roofline")


class StepViews(Views):
    """The views that choosing the analysis window reads (the steps, the GPU work placed in
    them, what ran before the first one), on the columns they need only: each launch's times,
    not its call's name, stack or operator, and the GPU activities' times, kinds and bytes.
    The window is chosen with these, before any full view of the whole trace exists; the
    analysis then builds its :class:`Views` on the window alone. The steps are those
    :class:`Views` finds (the same rows)."""

    #: The GPU columns that steps (also inferred ones) and the start-up summary read.
    GPU_COLUMNS = ("rank", "device", "stream", "kind", "name", "start_ns", "end_ns",
                   "correlation", "bytes", "src_kind", "dst_kind")

    @_view
    def _raw_launches(self) -> pl.DataFrame:
        gpu = self.trace.gpu.select(c for c in self.GPU_COLUMNS if c in self.trace.gpu.columns)
        return launches(replace(self.trace, gpu=gpu), detail=False)

