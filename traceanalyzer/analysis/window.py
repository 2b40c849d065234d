"""The analysis window: the part of a trace that is judged, and narrowing a trace to it.

By default the window is the steady state: from the start of the first step to the end of the
last, per rank, with warm-up steps at the start left out (:func:`choose_window`). A user can ask
for the whole capture, the profiler's capture range, a time window, some steps or some ranks.
Narrowing happens on the canonical frames, before any analysis, so every metric, rule and report
sees only the chosen window; the :class:`Window` says what was captured, what was analyzed and
what was left out. Times in a time window are relative to the trace's first event.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer.analysis.launches import join_calls, unique_calls
from traceanalyzer.analysis.steps import INFERRED_STEPS
from traceanalyzer.errors import UsageError
from traceanalyzer.model import API_KINDS, TIME_LIMIT_NS, Trace

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


@dataclass(frozen=True)
class Selection:
    steps: tuple[int, int] | None = None  # inclusive range of step numbers
    time_window_ns: tuple[int, int] | None = None  # relative to the first event
    ranks: frozenset[int] | None = None

    @property
    def empty(self) -> bool:
        return self.steps is None and self.time_window_ns is None and self.ranks is None


def parse_steps(text: str | None) -> tuple[int, int] | None:
    """``"5"`` or ``"3-7"`` (inclusive)."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    if not m:
        raise UsageError(f"--steps {text!r}: expected N or FIRST-LAST, e.g. 3-7")
    if any(len(g.lstrip("0")) > 10 or int(g) > MAX_SELECTED for g in m.groups() if g):
        raise UsageError(f"--steps {_short(text)}: step numbers go up to {MAX_SELECTED:,}")
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else first
    if last < first:
        raise UsageError(f"--steps {text!r}: the last step comes before the first")
    return first, last


def parse_duration(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)?\s*", text)
    if not m:
        raise UsageError(f"{text!r} is not a duration such as 250ms, 1.5s or 300us")
    ns = float(m.group(1)) * _UNITS_NS[m.group(2) or "ms"]
    if not ns < TIME_LIMIT_NS:  # also inf, from hundreds of digits
        raise UsageError(f"{_short(text)} is too long a duration: times go up to 146 years")
    return int(ns)


#: The largest step or rank number a selection takes (both are int32 in the frames).
MAX_SELECTED = 2**31 - 1


def _short(text: str, limit: int = 40) -> str:
    """An option's value quoted for a message, cut to ``limit`` characters."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"


def parse_time_window(text: str | None) -> tuple[int, int] | None:
    """``"START:END"`` with units (default ms), relative to the first event: ``"100ms:2s"``."""
    if not text:
        return None
    if ":" not in text:
        raise UsageError(f"--time-window {text!r}: expected START:END, e.g. 100ms:2s")
    start, end = (parse_duration(part) for part in text.split(":", 1))
    if end <= start:
        raise UsageError(f"--time-window {text!r}: END must be after START")
    return start, end


def parse_ranks(text: str | None) -> frozenset[int] | None:
    if not text:
        return None
    try:
        ranks = frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:  # also for over 4,300 digits
        raise UsageError(f"--ranks {_short(text)}: expected a comma-separated list such as "
                         "0,1") from None
    if any(not 0 <= r <= MAX_SELECTED for r in ranks):
        raise UsageError(f"--ranks {_short(text)}: ranks go from 0 to {MAX_SELECTED:,}")
    return ranks


def narrow(trace: Trace, selection: Selection) -> Trace:
    """A new trace holding only the selected ranks, time window and steps (in that order; see
    :func:`narrow_to` for which events a window keeps)."""
    if selection.empty:
        return trace
    frames = dict(trace.frames())
    if selection.ranks is not None:
        frames = {k: f.filter(pl.col("rank").is_in(sorted(selection.ranks))) for k, f in frames.items()}
    work = Trace(meta=trace.meta, **frames)
    if selection.time_window_ns is not None:
        origin = _extent(work)[0] or 0
        lo, hi = origin + selection.time_window_ns[0], origin + selection.time_window_ns[1]
        ranks = pl.concat([f.select(pl.col("rank").cast(pl.Int32)) for f in work.frames().values()])
        work = narrow_to(work, ranks.unique().with_columns(lo=pl.lit(lo), hi=pl.lit(hi)))
    if selection.steps is not None:
        from traceanalyzer.analysis.views import StepViews

        views = StepViews(work)
        work = narrow_to(work, _step_bounds(work, *selection.steps, views=views))
        first, last = selection.steps
        keep_inferred_steps(work, views.steps.filter(pl.col("step").is_between(first, last)),
                            views.step_source)
    if all(f.is_empty() for f in work.frames().values()) and not (trace.gpu.is_empty()
                                                                  and trace.cpu.is_empty()):
        # An empty report would look like an idle GPU; say that the selection missed instead.
        ranks = sorted(set(trace.gpu["rank"].unique().to_list())
                       | set(trace.cpu["rank"].unique().to_list()))
        raise UsageError(f"--ranks/--steps/--time-window select no events of this trace (it holds "
                         f"rank {', '.join(map(str, ranks))})")
    work.meta.extra["selection"] = {
        "steps": list(selection.steps) if selection.steps else None,
        "time_window_ns": list(selection.time_window_ns) if selection.time_window_ns else None,
        "ranks": sorted(selection.ranks) if selection.ranks is not None else None,
    }
    return work


def keep_inferred_steps(trace: Trace, steps: pl.DataFrame, source: str | None) -> None:
    """Where the window was cut to inferred steps, keep them with the cut trace: inferring them
    again from the window's kernels alone can pick another anchor kernel, drop a step as cut off
    and renumber the rest (a whole-process capture of the GPT program: "analyzed steps 0-6"
    beside a table of steps 0-5), so the analysis uses the steps the window was chosen by."""
    if source != "inferred" or steps.is_empty():
        return
    trace.meta.extra[INFERRED_STEPS] = steps.select(
        "rank", "step", "start_ns", "end_ns").rows()


def _step_bounds(trace: Trace, first: int, last: int, views: Any = None) -> pl.DataFrame:
    """Per rank: from the CPU start of step ``first`` to the end of step ``last`` (its wall-clock
    end, or the next step's CPU start if that comes first: the CPU runs ahead of the GPU)."""
    from traceanalyzer.analysis.views import StepViews

    views = views if views is not None else StepViews(trace)
    found = views.steps.sort("rank", "start_ns").with_columns(
        next_start=pl.col("start_ns").shift(-1).over("rank"))
    steps = found.filter(pl.col("step").is_between(first, last))
    if steps.is_empty():
        have = (f"its steps are {found['step'].min()}-{found['step'].max()}"
                if found.height else "it has no steps")
        raise UsageError(f"--steps {first}-{last}: the trace has no such step ({have})")
    return steps.group_by("rank").agg(
        lo=pl.col("start_ns").min(),
        hi=pl.min_horizontal(pl.col("wall_end_ns").last(),
                             pl.col("next_start").last().fill_null(pl.col("wall_end_ns").last())))


# --- the steady-state window ------------------------------------------------------------------

#: What ``Window.kind`` (and the JSON ``metrics.window_kind``) can be.
WINDOW_KINDS = ("steps", "all", "profiler-range", "time", "selection")
#: What ``--window`` accepts besides START:END.
WINDOW_CHOICES = ("steps", "all", "profiler-range")
#: A leading step slower than this multiple of the median step is warm-up (docs/metrics.md).
WARMUP_FACTOR = 1.5
#: Fewer steps than this on a rank give no median to judge warm-up by: all are kept.
MIN_STEPS_FOR_WARMUP = 3
#: The window sentence gives the steps' time and the window's apart once they differ by more
#: than this share of the steps' time (docs/metrics.md, "The window sentence").
STEPS_WINDOW_TOLERANCE = 0.005
#: The first step's GPU work waited after its launch this share of the lead, and this long
#: (well past a launch's latency, tens of µs), before the lead is called queued, not idle.
QUEUED_LEAD_SHARE = 0.5
MIN_QUEUED_NS = 500_000
#: A later step slower than this multiple of the median is named as an outlier.
OUTLIER_FACTOR = 1.5
#: Steps with GPU work a rank needs for a median to name outliers by (with two, one of them
#: is always "slower than 1.5x the median" when they differ enough).
MIN_STEPS_FOR_OUTLIERS = 3
PROFILER_START, PROFILER_STOP = r"^cu(da)?ProfilerStart", r"^cu(da)?ProfilerStop"
#: Runtime and driver calls that launch one kernel.
LAUNCH_CALLS = r"^(cuda|hip|cu)(LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|ExtModuleLaunchKernel|LaunchKernelExC|LaunchKernelEx)"


@dataclass
class Window:
    """What was judged: the capture, the analyzed window and what was left out, and why.

    ``kind`` is what was applied: ``steps`` (the steady state, the default), ``all`` (the whole
    capture), ``profiler-range`` (between cudaProfilerStart and Stop), ``time`` (START:END),
    ``selection`` (``--steps``/``--time-window``/``--ranks``). Times are trace nanoseconds;
    ``start_ns``/``end_ns`` bound the analyzed window over all ranks: for steps, from the CPU
    start of the first analyzed step to the wall-clock end of the last.
    """

    kind: str
    requested: str
    captured_start_ns: int | None = None
    captured_end_ns: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    #: How steps were found (analysis.steps.SOURCE_*) and their shared name ("step #").
    step_source: str | None = None
    step_label: str | None = None
    steps_found: int = 0
    first_step: int | None = None
    last_step: int | None = None
    steps_analyzed: int = 0
    #: Leading steps left out as warm-up: [{"step", "duration_ns"}], with the median they
    #: were compared with.
    warmup: list[dict[str, int]] = field(default_factory=list)
    #: Trailing steps left out as cut short by the end of the capture (no GPU work recorded,
    #: shorter than the median step): [{"step", "duration_ns"}].
    cut_short: list[dict[str, int]] = field(default_factory=list)
    median_step_ns: int | None = None
    #: CPU start of the first step found (warm-up included): start-up ends there.
    first_step_start_ns: int | None = None
    #: The analyzed steps' time on the headline rank (their wall-clock durations added up).
    steps_ns: int | None = None
    #: Why the window is not the one asked for ("no steps found"), or "".
    reason: str = ""
    #: Before the window on the headline rank: duration and what the GPU did (start_up()).
    startup: dict[str, Any] = field(default_factory=dict)
    #: The part of the window that is not the headline rank's step time (steps_ns), so that
    #: the sentence accounts for all of it: from the window's start to its first step's timed
    #: start (the first step counts the longer of its CPU range and its GPU work, so its CPU
    #: range may open the window while the GPU still runs older work), the GPU's busy time
    #: then, and how much of that was work whose launch the trace does not hold (queued before
    #: the capture began).
    lead_ns: int = 0
    #: From the first warm-up step's CPU start to the window's start: the capture's time that
    #: the warm-up steps take (0 without warm-up).
    warmup_span_ns: int = 0
    lead_gpu_busy_ns: int = 0
    lead_unlaunched_ns: int = 0
    #: With no GPU work recorded in the lead: how long the step's first GPU work waited after
    #: its launch call (queued behind work the trace does not hold, or the GPU really idle
    #: while the CPU prepared the step when this is about 0).
    lead_queued_ns: int = 0
    #: Whether the first step's timed start is where its GPU work began (else: its CPU range's
    #: length, counted back from its end).
    lead_to_gpu_start: bool = False
    #: The step before the first analyzed one on the headline rank (a warm-up step), whose end
    #: the first step's time counts from, or None (the rank's first step).
    lead_after_step: int | None = None
    #: From the headline rank's last step's end to the window's end (other ranks' later steps).
    tail_ns: int = 0
    #: From the window's start to the headline rank's first step's CPU start (other ranks'
    #: earlier steps: ranks of one file need not run at the same time).
    others_lead_ns: int = 0
    #: Rows of the cpu and gpu frames in the whole capture, before the window cut them, and of
    #: the cpu frame's runtime/driver calls (``cpu_api``): what a "no CPU activity" could be said
    #: of (rules.engine.missing_requirement).
    captured_rows: dict[str, int] = field(default_factory=dict)

    @property
    def captured_ns(self) -> int:
        if self.captured_start_ns is None or self.captured_end_ns is None:
            return 0
        return self.captured_end_ns - self.captured_start_ns

    @property
    def analyzed_ns(self) -> int:
        if self.start_ns is None or self.end_ns is None:
            return 0
        return self.end_ns - self.start_ns

    @property
    def before_ns(self) -> int:
        """Captured time before the window (before its first step, warm-up steps included)."""
        start = self.first_step_start_ns if self.first_step_start_ns is not None else self.start_ns
        if start is None or self.captured_start_ns is None:
            return 0
        return max(0, start - self.captured_start_ns)

    @property
    def after_ns(self) -> int:
        if self.end_ns is None or self.captured_end_ns is None:
            return 0
        return max(0, self.captured_end_ns - self.end_ns)

    def describe(self) -> str:
        """One sentence for every report: captured, analyzed, left out and why."""
        from traceanalyzer.report._common import fmt_ns

        captured = f"{fmt_ns(self.captured_ns)} captured"
        if self.kind == "all":
            why = f" ({self.reason})" if self.reason else ""
            return f"{captured}; analyzed all of it{why}."
        took = self.steps_ns if self.steps_ns is not None else self.analyzed_ns
        analyzed = f"analyzed {self._what()}, {fmt_ns(took)}"
        if took and abs(self.analyzed_ns - took) > max(STEPS_WINDOW_TOLERANCE * took, 10_000):
            # The steps' own time and the window they span differ (the GPU still ran earlier
            # steps' work, or time passed between steps): give both, so that captured = left
            # out + analyzed holds on the page, and say what the rest of the window is.
            analyzed += f" of steps in a {fmt_ns(self.analyzed_ns)} window" + self._rest()
        left = []
        if self.before_ns > 0:
            before = "start-up before the first step" if self.kind == "steps" else "before it"
            left.append(f"{fmt_ns(self.before_ns)} {before}")
        if self.warmup:
            steps = _step_list([w["step"] for w in self.warmup])
            took = fmt_ns(sum(w["duration_ns"] for w in self.warmup))
            if self.warmup_span_ns and abs(self.warmup_span_ns - sum(
                    w["duration_ns"] for w in self.warmup)) > max(0.002 * self.captured_ns, 1_000):
                # The warm-up's stretch of the capture (its CPU start to the window's) is not
                # its step time: name both, so that the sentence adds up.
                left.append(f"{fmt_ns(self.warmup_span_ns)} of warm-up, {steps} (step time "
                            f"{took}, over {WARMUP_FACTOR:g}x the median step)")
            else:
                left.append(f"{steps} ({took}) as warm-up, over {WARMUP_FACTOR:g}x the median "
                            "step")
        if self.after_ns > 0 and self.cut_short and self.kind == "steps":
            steps = _step_list([c["step"] for c in self.cut_short])
            took = fmt_ns(sum(c["duration_ns"] for c in self.cut_short))
            left.append(f"{fmt_ns(self.after_ns)} after the last analyzed step, {steps} "
                        f"({took}) in it, cut short by the end of the capture: no GPU work "
                        "recorded and shorter than the median step")
        elif self.after_ns > 0:
            left.append(f"{fmt_ns(self.after_ns)} after the last step" if self.kind == "steps"
                        else f"{fmt_ns(self.after_ns)} after it")
        tail = f"; left out {', '.join(left)}" if left else ""
        why = f" ({self.reason})" if self.reason else ""
        return f"{captured}; {analyzed}{tail}{why}."

    def _rest(self) -> str:
        """What the window holds besides the steps' time (lead_ns, tail_ns and what remains),
        as a clause of the window sentence."""
        from traceanalyzer.report._common import fmt_ns

        took = self.steps_ns or 0
        small = max(0.002 * self.analyzed_ns, 1_000)
        parts = []
        if self.others_lead_ns > small:
            parts.append(f"{fmt_ns(self.others_lead_ns)} before this rank's first step, from "
                         "the other ranks' first steps")
        if self.lead_ns > small and self.lead_after_step is not None:
            parts.append(f"{fmt_ns(self.lead_ns)} of it from step {self.first_step}'s CPU start "
                         f"to the end of warm-up step {self.lead_after_step}, whose GPU work "
                         "(left out) still ran")
        elif self.lead_ns > small:
            first = f"step {self.first_step}"
            where = ("to the start of its GPU work" if self.lead_to_gpu_start else
                     "to the start of its counted time (a first step counts the longer of its "
                     "CPU range and its GPU work, back from its end)")
            gpu = ""
            if self.lead_unlaunched_ns > small:
                gpu = (f", while the GPU ran {fmt_ns(self.lead_unlaunched_ns)} of work launched "
                       "before the capture began")
            elif self.lead_gpu_busy_ns > small:
                gpu = f", the GPU busy {fmt_ns(self.lead_gpu_busy_ns)} of it"
            elif self.lead_gpu_busy_ns == 0 and self.lead_queued_ns >= max(
                    QUEUED_LEAD_SHARE * self.lead_ns, MIN_QUEUED_NS):
                gpu = (", with no GPU work recorded, yet the step's first GPU work started "
                       f"{fmt_ns(self.lead_queued_ns)} after its launch call: the GPU (or its "
                       "stream) was busy with work the trace does not hold")
            elif self.lead_gpu_busy_ns == 0:
                gpu = ", the GPU idle"
            parts.append(f"{fmt_ns(self.lead_ns)} of it from {first}'s CPU start {where}{gpu}")
        if self.tail_ns > small:
            parts.append(f"{fmt_ns(self.tail_ns)} after this rank's last step, until the other "
                         "ranks' steps end")
        rest = self.analyzed_ns - took - self.others_lead_ns - self.lead_ns - self.tail_ns
        if abs(rest) > small:
            parts.append(f"{fmt_ns(rest)} between steps" if rest > 0 else
                         f"the steps' times overlapping by {fmt_ns(-rest)}")
        return (": " + "; ".join(parts)) if parts else ""

    def _what(self) -> str:
        if self.kind in ("steps", "selection") and self.steps_analyzed:
            first, last = self.first_step, self.last_step
            span = f"step {first}" if first == last else f"steps {first}-{last}"
            if self.step_source == "inferred":
                span += " (inferred from a repeating kernel sequence)"
            return span
        if self.kind == "profiler-range":
            return "the profiler's capture range"
        return "the selected window"

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["description"] = self.describe()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Window:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _step_list(steps: list[int]) -> str:
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    return "steps " + ", ".join(map(str, steps))


def parse_window(text: str | None) -> str:
    """``steps`` (default), ``all``, ``profiler-range`` or ``START:END`` (checked here)."""
    if text is None or text == "":
        return "steps"
    if text in WINDOW_CHOICES:
        return text
    if ":" in text:
        parse_time_window(text)
        return text
    raise UsageError(f"--window {text!r}: expected steps, all, profiler-range or START:END "
                     "(e.g. 100ms:2s)")


def choose_window(trace: Trace, requested: str = "steps",
                  selection: Selection | None = None) -> Trace:
    """``trace`` narrowed to the window asked for, with the :class:`Window` in
    ``meta.extra["window"]``. An explicit ``selection`` (steps, time, ranks) takes precedence
    over ``requested`` and is applied as :func:`narrow` does.

    The window is found with :class:`~traceanalyzer.analysis.views.StepViews` (steps and the
    times of the work in them), not with the analysis' views of the whole trace: those are
    built afterwards, on the window only."""
    from traceanalyzer.analysis.views import StepViews

    captured = _extent(trace)
    captured_rows = {"cpu": trace.cpu.height, "gpu": trace.gpu.height,
                     "cpu_api": int(trace.cpu["kind"].is_in(API_KINDS).sum())
                     if trace.cpu.height else 0}
    meta = dataclasses.replace(trace.meta, extra=dict(trace.meta.extra),
                               warnings=list(trace.meta.warnings))
    trace = Trace(meta=meta, **trace.frames())
    window = Window(kind=requested, requested=requested, captured_start_ns=captured[0],
                    captured_end_ns=captured[1], captured_rows=captured_rows)
    if selection is not None and not selection.empty:
        trace = narrow(trace, selection)
        window.kind = "selection"
        _fill_steps(window, StepViews(trace), None)
        _fill_bounds(window, trace)
    elif requested == "all":
        _fill_bounds(window, trace)
    elif requested == "profiler-range":
        bounds = _profiler_range(trace)
        if bounds is None:
            window.reason = "the trace is the profiler's capture range: no cudaProfilerStart/Stop in it"
            _fill_bounds(window, trace)
        else:
            trace = narrow_to(trace, bounds)
            _fill_bounds(window, trace)
    elif requested != "steps":  # START:END
        window.kind = "time"
        trace = narrow(trace, Selection(time_window_ns=parse_time_window(requested)))
        _fill_bounds(window, trace)
    else:
        views = StepViews(trace)
        steps = views.steps
        if steps.is_empty():
            window.kind = "all"
            window.reason = ("an Nsight Compute report: its profiled launches back to back, no steps"
                             if trace.meta.source_format == "ncu" else "no steps found")
            _fill_bounds(window, trace)
        else:
            steps, other_windows = _one_recording_window(steps)
            if other_windows:
                window.reason = (f"the trace holds {other_windows + 1} profiler windows "
                                 "(a schedule with repeat=); analyzed the one with the most steps")
            kept, cut, warmup, median = _steady_steps(steps, meta.rank)
            bounds = kept.group_by("rank").agg(lo=pl.col("start_ns").min(),
                                               hi=pl.col("wall_end_ns").max())
            if cut.height:
                # The window ends where a step cut short begins, as --steps ends a step at the
                # next one's CPU start: the CPU runs ahead of the GPU.
                cut_at = cut.group_by("rank").agg(cut_ns=pl.col("start_ns").min())
                bounds = bounds.join(cut_at, on="rank", how="left").select(
                    "rank", "lo", hi=pl.min_horizontal("hi", "cut_ns"))
                window.cut_short = [
                    {"step": int(r["step"]), "duration_ns": int(r["duration_ns"])}
                    for r in headline_rows(cut, meta.rank).iter_rows(named=True)]
            first = steps.group_by("rank").agg(lo=pl.col("start_ns").min())
            window.warmup = warmup
            window.median_step_ns = median
            window.startup = start_up(views, first, meta.rank)
            if warmup:
                lo = int(bounds["lo"].min())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
                window.warmup_span_ns = max(0, lo - int(first["lo"].min()))  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            window.first_step_start_ns = int(first["lo"].min())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            trace = narrow_to(trace, bounds)
            keep_inferred_steps(trace, kept, views.step_source)
            _fill_steps(window, views, kept)
            window.start_ns, window.end_ns = int(bounds["lo"].min()), int(bounds["hi"].max())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            mine = headline_rows(kept, meta.rank)
            window.steps_ns = int((mine["wall_end_ns"] - mine["wall_start_ns"]).sum())
            _fill_rest(window, trace, mine, steps)
    trace.meta.warnings.extend(_not_what_it_seems(trace, window))
    trace.meta.extra["window"] = window.to_dict()
    return trace


#: A single GPU idle gap this large a share of the span makes the span mostly one wait.
LONE_GAP_SHARE = 0.5
CAPTURE_BEGIN = r"^(cuda|hip)StreamBeginCapture"


def _not_what_it_seems(trace: Trace, window: Window) -> list[str]:
    """Warnings for traces whose headline would mislead: the capture of a CUDA/HIP graph
    (launches recorded while capturing run no kernel), and a span that is mostly one gap (one
    early kernel long before the rest)."""
    from traceanalyzer.report._common import fmt_ns

    out = []
    # The columns it reads, before filtering: a filter copies every column (stacks, shapes).
    calls = trace.cpu.select("kind", "rank", "name", "correlation").filter(
        pl.col("kind").is_in(API_KINDS))
    begins = calls.filter(pl.col("name").str.contains(CAPTURE_BEGIN))
    if begins.height:
        launches = calls.filter(pl.col("name").str.contains(LAUNCH_CALLS),
                                pl.col("correlation").is_not_null())
        ran = trace.gpu.select("rank", "correlation").unique()
        idle = launches.join(ran, on=["rank", "correlation"], how="anti").height
        graphs = calls.filter(pl.col("name").str.contains(r"GraphLaunch")).height
        out.append(f"the trace records the capture of a CUDA/HIP graph: {idle} of "
                   f"{launches.height} kernel launches were captured and ran no kernel; what ran "
                   f"is {graphs} graph launch{'es' if graphs != 1 else ''} and the work outside "
                   "the graph. Profile the replays (steps after the capture) to judge the loop")
    # Per rank: the ranks of one file (processes of one export) need not run at the same time,
    # and the gap between two of them is no rank's idle time.
    gaps = (
        trace.gpu.select("rank", "start_ns", "end_ns").sort("rank", "start_ns")
        .with_columns(gap=(pl.col("start_ns") - pl.col("end_ns").cum_max().shift(1))
                      .over("rank").clip(lower_bound=0).fill_null(0),
                      before=pl.int_range(pl.len()).over("rank"))
        .group_by("rank")
        .agg(span=pl.col("end_ns").max() - pl.col("start_ns").min(), worst=pl.col("gap").max(),
             before=pl.col("before").sort_by("gap").last(), count=pl.len())
        .filter(pl.col("count") >= 2, pl.col("span") > 0,
                pl.col("worst") >= LONE_GAP_SHARE * pl.col("span"))
        .sort("rank")
    )
    several = trace.gpu["rank"].n_unique() > 1 if trace.gpu.height else False
    for rank, span, worst, before, count in gaps.select(
            "rank", "span", "worst", "before", "count").iter_rows():  # one row per rank
        whose = f"rank {rank}: " if several else ""
        out.append(f"{whose}one GPU idle gap of {fmt_ns(worst)} is {100 * worst / span:.0f}% of "
                   f"the GPU span ({before} GPU activit{'y' if before == 1 else 'ies'} before "
                   f"it, {count - before} after): the span's busy and idle figures mostly "
                   "measure that wait; --window START:END judges one side of it")
    return out


def _one_recording_window(steps: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The steps of one profiler window, and how many other windows were left out.

    A torch.profiler schedule with ``repeat=`` (and ``acc_events=True``) records several windows
    of consecutive ``ProfilerStep`` numbers with unrecorded steps between them; their gaps are
    not the program's idle time. The window with the most steps is kept (ties: the last)."""
    numbered = steps.sort("rank", "step").with_columns(
        group=(pl.col("step").diff().over("rank").fill_null(1) != 1).cum_sum().over("rank"))
    groups = numbered.filter(pl.col("rank") == numbered["rank"].min()).group_by("group").agg(
        n=pl.len()).sort(["n", "group"], descending=True)
    if groups.height <= 1:
        return steps, 0
    best = int(groups["group"][0])
    kept = numbered.filter(pl.col("group") == best).drop("group").sort("rank", "start_ns")
    # The window's first step follows an unrecorded gap: it starts as a rank's first step does
    # (analysis.steps.with_wall_times).
    first = pl.int_range(pl.len()).over("rank") == 0
    alone = pl.col("wall_end_ns") - pl.max_horizontal(pl.col("end_ns") - pl.col("start_ns"),
                                                      pl.col("gpu_end_ns") - pl.col("gpu_start_ns"))
    kept = kept.with_columns(wall_start_ns=pl.when(first).then(alone)
                             .otherwise(pl.col("wall_start_ns")))
    return kept, groups.height - 1


def headline_rows(frame: pl.DataFrame, rank: int | None) -> pl.DataFrame:
    """The rows of the headline rank, as Views.metrics picks it: ``rank`` (the trace's own)
    where the frame holds it, else the lowest rank."""
    ranks = frame["rank"]
    own = rank if rank is not None and (ranks == rank).any() else ranks.min()
    return frame.filter(pl.col("rank") == own)


def _steady_steps(steps: pl.DataFrame, rank: int | None = None
                  ) -> tuple[pl.DataFrame, pl.DataFrame, list[dict[str, int]], int | None]:
    """Steps without the leading warm-up ones (slower than WARMUP_FACTOR x the rank's median,
    on ranks with at least MIN_STEPS_FOR_WARMUP steps) and without the trailing ones cut short
    (:func:`_cut_short`); those cut short (rank, step, start_ns, duration_ns); the warm-up
    steps of the lowest rank, and that rank's median step time (of the steps not cut short)."""
    timed = steps.sort("rank", "start_ns").with_columns(
        duration_ns=pl.col("wall_end_ns") - pl.col("wall_start_ns"))
    timed = timed.with_columns(cut=_cut_short())
    whole = ~pl.col("cut")
    timed = timed.with_columns(
        median_ns=pl.col("duration_ns").filter(whole).median().over("rank"),
        whole_steps=whole.sum().over("rank"))
    slow = pl.col("duration_ns") > WARMUP_FACTOR * pl.col("median_ns")
    timed = timed.with_columns(
        # A step is warm-up while every step before it on its rank was too; one step stays.
        warmup=(slow.not_().cum_sum().over("rank") == 0)
        & (pl.int_range(pl.len()).over("rank") < pl.col("whole_steps") - 1)
        & (pl.col("whole_steps") >= MIN_STEPS_FOR_WARMUP))
    kept = timed.filter(~pl.col("warmup"), whole).drop("cut", "whole_steps")
    cut = timed.filter(pl.col("cut")).select("rank", "step", "start_ns", "duration_ns")
    mine = headline_rows(timed, rank)
    warmup = [{"step": int(r["step"]), "duration_ns": int(r["duration_ns"])}
              for r in mine.filter(pl.col("warmup")).iter_rows(named=True)]
    median = mine["median_ns"][0] if mine.height else None
    return kept, cut, warmup, int(median) if median is not None else None


def _cut_short() -> pl.Expr:
    """Per step (sorted by rank and start): whether it is a trailing step that the capture cut
    short: no GPU work recorded in it or in any later step of its rank, on a rank whose earlier
    steps launched some, and shorter than the rank's median step with GPU work. The profiler
    stops inside the step that its last ``step()`` opened (HTA's MI250 trace: 86 µs after a
    9.3 ms step); counting it would halve the mean step time. A long step without GPU work
    stays: the GPU idling for a whole step is what the analysis should report."""
    has_gpu = pl.col("gpu_start_ns").is_not_null()
    later_gpu = has_gpu.cast(pl.Int32).cum_sum(reverse=True).over("rank")
    gpu_median = pl.col("duration_ns").filter(has_gpu).median().over("rank")
    return ((later_gpu == 0) & has_gpu.any().over("rank")
            & (pl.col("duration_ns") < gpu_median)).fill_null(False)


def _fill_steps(window: Window, views: Any, kept: pl.DataFrame | None) -> None:
    steps = views.steps
    rank = views.meta.rank
    window.step_source, window.step_label = views.step_source, views.step_label
    window.steps_found = headline_rows(steps, rank).height if steps.height else 0
    kept = steps if kept is None else kept
    if kept.is_empty():
        return
    mine = headline_rows(kept, rank)
    window.steps_analyzed = mine.height
    window.first_step, window.last_step = int(mine["step"].min()), int(mine["step"].max())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype


def _fill_rest(window: Window, trace: Trace, mine: pl.DataFrame, steps: pl.DataFrame) -> None:
    """The window's time besides the headline rank's steps (``mine``, in the narrowed
    ``trace``; ``steps``: all the steps found, warm-up included): Window.lead_ns and what the
    GPU did then, and Window.tail_ns."""
    from traceanalyzer.analysis import intervals

    if window.start_ns is None or window.end_ns is None or mine.is_empty():
        return
    first = mine.sort("start_ns").row(0, named=True)
    before = steps.filter(pl.col("rank") == first["rank"], pl.col("start_ns") < first["start_ns"])
    if not before.is_empty():
        window.lead_after_step = int(before.sort("start_ns")["step"][-1])
    lead_end = int(first["wall_start_ns"])
    own_start = max(window.start_ns, min(int(first["start_ns"]), lead_end))
    window.others_lead_ns = own_start - window.start_ns
    window.lead_ns = max(0, lead_end - own_start)
    window.tail_ns = max(0, window.end_ns - int(mine["wall_end_ns"].max()))  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    window.lead_to_gpu_start = first["gpu_start_ns"] is not None and lead_end == first["gpu_start_ns"]
    if window.lead_ns == 0:
        return
    gpu = trace.gpu.filter(pl.col("rank") == first["rank"]).select(
        "start_ns", "end_ns", "correlation")
    ran = intervals.clip(gpu, own_start, lead_end)
    window.lead_gpu_busy_ns = (int(intervals.union_length(ran.select("start_ns", "end_ns")))
                               if ran.height else 0)
    # The rank's launch calls: GPU work without one was launched before the capture began.
    calls = trace.cpu.filter(pl.col("rank") == first["rank"], pl.col("kind").is_in(API_KINDS),
                             pl.col("correlation").is_not_null()).select("correlation", "start_ns")
    unlaunched = ran.join(calls, on="correlation", how="anti") if ran.height else ran
    window.lead_unlaunched_ns = (int(intervals.union_length(unlaunched.select("start_ns", "end_ns")))
                                 if unlaunched.height else 0)
    if window.lead_gpu_busy_ns == 0 and window.lead_to_gpu_start:
        # How long the step's first GPU work waited after its launch call started.
        opening = gpu.filter(pl.col("start_ns") == lead_end).select("correlation")
        called = calls.join(opening, on="correlation", how="semi")["start_ns"].min()
        if called is not None:
            window.lead_queued_ns = max(0, lead_end - int(called))  # type: ignore[arg-type]  # Polars: scalar typed for any dtype


def _fill_bounds(window: Window, trace: Trace) -> None:
    window.start_ns, window.end_ns = _extent(trace)


def _extent(trace: Trace) -> tuple[int | None, int | None]:
    """First start and last end over the trace's timed events."""
    frames = [f for f in (trace.gpu, trace.cpu, trace.annotations) if not f.is_empty()]
    if not frames:
        return None, None
    lo = min(int(f["start_ns"].min()) for f in frames)  # type: ignore[arg-type]
    hi = max(int(f["end_ns"].max()) for f in frames)  # type: ignore[arg-type]
    return lo, hi


def _profiler_range(trace: Trace) -> pl.DataFrame | None:
    """Per rank, from the end of the first cudaProfilerStart to the start of the last
    cudaProfilerStop, where the trace holds them."""
    calls = trace.cpu.filter(pl.col("kind").is_in(API_KINDS))
    starts = calls.filter(pl.col("name").str.contains(PROFILER_START)).group_by("rank").agg(
        lo=pl.col("end_ns").min())
    stops = calls.filter(pl.col("name").str.contains(PROFILER_STOP)).group_by("rank").agg(
        hi=pl.col("start_ns").max())
    if starts.is_empty():
        return None
    bounds = starts.join(stops, on="rank", how="left").with_columns(
        hi=pl.coalesce("hi", pl.lit(_extent(trace)[1])))
    return bounds.filter(pl.col("hi") > pl.col("lo"))


def narrow_to(trace: Trace, bounds: pl.DataFrame) -> Trace:
    """``trace`` cut to ``[lo, hi)`` per rank (``bounds``: rank, lo, hi); ranks without bounds
    keep all their events. Events are kept whole. GPU work counts where it was launched: work
    launched inside the window is kept even when it ran after it, and work launched before the
    window (a warm-up step's queue) is left out even when it ran inside it."""
    bounds = bounds.select(pl.col("rank").cast(pl.Int32), pl.col("lo").cast(pl.Int64),
                           pl.col("hi").cast(pl.Int64))

    # Each rank's bounds looked up per row (a small mapping), not joined onto the frame: a join
    # would copy every column of the frame before the filter drops most rows.
    lo = pl.col("rank").replace_strict(bounds["rank"], bounds["lo"], default=None,
                                       return_dtype=pl.Int64)
    hi = pl.col("rank").replace_strict(bounds["rank"], bounds["hi"], default=None,
                                       return_dtype=pl.Int64)

    def within(frame: pl.DataFrame, column: str) -> pl.DataFrame:
        if frame.is_empty():
            return frame
        return kept_rows(frame, frame.select(
            lo.is_null() | pl.col(column).is_between(lo, hi, closed="left")).to_series())

    launch_at = trace.cpu.select("rank", "correlation", "kind", _at="start_ns").filter(
        pl.col("kind").is_in(API_KINDS), pl.col("correlation").is_not_null()).drop("kind")
    if not unique_calls(launch_at):
        launch_at = launch_at.group_by("rank", "correlation").agg(pl.col("_at").min())
    gpu = trace.gpu
    if not gpu.is_empty():
        # The launch times joined onto the three key columns, not onto the frame: the filter
        # then copies only the rows it keeps.
        keep = (
            join_calls(gpu.select("rank", "correlation", "start_ns"), launch_at)
            .select(lo.is_null() | pl.coalesce("_at", "start_ns").is_between(lo, hi, closed="left"))
            .to_series()
        )
        gpu = kept_rows(gpu, keep)
    frames = {
        "gpu": gpu,
        "cpu": within(trace.cpu, "start_ns"),
        "annotations": within(trace.annotations, "start_ns"),
        "syncs": within(trace.syncs, "start_ns"),
        "counters": within(trace.counters, "ts_ns"),
        "memory": within(trace.memory, "ts_ns"),
    }
    return Trace(meta=trace.meta, **frames)


def kept_rows(frame: pl.DataFrame, keep: pl.Series) -> pl.DataFrame:
    """``frame.filter(keep)``; where the rows kept are one run of at least half the frame (a
    window in a frame sorted by time, as most are), a slice of it instead, which shares the
    frame's memory: a filter copies every column of every row kept."""
    keep = keep.fill_null(False)
    count = int(keep.sum())
    if count == frame.height:
        return frame
    if 2 * count >= frame.height:
        first = int(keep.arg_max() or 0)
        if keep.slice(first, count).all():
            return frame.slice(first, count)
    return frame.filter(keep)


def start_up(views: Any, bounds: pl.DataFrame, rank: int) -> dict[str, Any]:
    """What the headline rank did before its window: how long, the GPU's busy time, its kernels
    and copies (count, bytes, time), and the CPU time with no GPU work (imports, model
    building, compilation and autotuning)."""
    from traceanalyzer.analysis import intervals

    mine = bounds.filter(pl.col("rank") == rank)
    if mine.is_empty():
        mine = bounds.sort("rank").head(1)
        rank = int(mine["rank"][0])
    lo = int(mine["lo"][0])
    launches = views.launches.filter(pl.col("rank") == rank)
    cpu = views.cpu.filter(pl.col("rank") == rank)
    starts = [int(f["start_ns"].min()) for f in (launches, cpu) if not f.is_empty()]
    origin = min(starts) if starts else lo
    before = launches.filter(pl.col("start_ns") < lo)
    busy = intervals.union_length(intervals.clip(before, origin, lo)) if before.height else 0
    copies = before.filter(pl.col("kind") == "memcpy")
    return {
        "rank": rank,
        "duration_ns": max(0, lo - origin),
        "gpu_busy_ns": int(busy),
        "kernels": before.filter(pl.col("kind") == "kernel").height,
        "kernel_ns": int((before.filter(pl.col("kind") == "kernel")
                          .select((pl.col("end_ns") - pl.col("start_ns")).sum()).item()) or 0),
        "copies": copies.height,
        "copy_bytes": int(copies["bytes"].sum() or 0),
        "copy_ns": int((copies.select((pl.col("end_ns") - pl.col("start_ns")).sum()).item()) or 0),
        "pageable_copies": copies.filter((pl.col("src_kind") == "pageable")
                                         | (pl.col("dst_kind") == "pageable")).height,
    }


def window_of(trace_meta_extra: dict[str, Any]) -> Window | None:
    """The Window recorded by :func:`choose_window`, if any."""
    data = trace_meta_extra.get("window")
    return Window.from_dict(data) if isinstance(data, dict) else None
