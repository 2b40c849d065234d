"""Steps: the repeating unit of work (a training or inference iteration) that metrics are split by.

Steps come, in order of preference, from

1. PyTorch's ``ProfilerStep#N`` ranges;
2. NVTX or user ranges that repeat under one name once their number is taken out (``step 12``,
   ``step_12``, ``iter 3``, ``Iteration 5``, ``train_step[7]``, ``batch 40``) or without a number
   (``train_step``), and the per-iteration ranges of serving loops (vLLM's ``execute_model`` and
   ``execute_<tokens>_context_<n>(...)``, SGLang's batch runs); where several such names repeat, the outermost (the one covering the
   most time) is the step;
3. else, what the GPU does: a sequence of kernels that repeats (a kernel that recurs every N
   kernels, N the largest such period) is taken as a step, and the steps say they were inferred.

docs/metrics.md ("Steps") states the rule.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.model import Trace

#: A step-like name once its number is taken out (``#``): a step word, maybe after a phase
#: (``train_step``), with no other word (``batch_norm`` and ``Optimizer.step#AdamW.step`` are
#: not steps).
STEP_NAME_PATTERN = (r"(?i)^[^a-z]*((train|training|eval|inference|decode|prefill|val|validation|"
                     r"test|micro)[_ ]?)?(profilerstep|step|iteration|iter|batch|microbatch)"
                     r"[^a-z]*$")
#: Per-iteration ranges of serving loops, which carry no number.
SERVING_PATTERN = (r"(?i)^(execute_model|execute_#_context_#|model_runner[._ ]forward|"
                   r"forward_batch_generation|run_batch|llm_engine[._ ]step|engine[._ ]step)$")

STEPS_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "name": pl.String,
                "start_ns": pl.Int64, "end_ns": pl.Int64}

#: How the steps of a trace were found (``Steps.source``).
SOURCE_PROFILER = "ProfilerStep"
SOURCE_RANGE = "range"
SOURCE_INFERRED = "inferred"

#: ``meta.extra`` key of the inferred steps a window was cut to (analysis.window
#: .keep_inferred_steps): rows of rank, step, CPU start and end.
INFERRED_STEPS = "inferred_steps"

#: A kernel sequence must repeat at least this many times to be taken as steps.
MIN_INFERRED_STEPS = 3


def find_steps(trace: Trace) -> tuple[pl.DataFrame, str | None, str | None]:
    """The annotated steps, how they were found and the name they share.

    Returns ``(steps, source, label)``: one row per step (rank, step, name, start_ns, end_ns:
    the CPU-side range), ``SOURCE_PROFILER`` or ``SOURCE_RANGE`` (None when no range is a
    step), and the name with its number taken out (``"step #"``).
    """
    ann = trace.annotations
    steps = ann.filter(pl.col("kind") == "step", pl.col("end_ns") > pl.col("start_ns"))
    if not steps.is_empty():
        return _numbered(steps), SOURCE_PROFILER, "ProfilerStep#"
    steps, label = _repeating_ranges(ann)
    if steps.is_empty():
        return pl.DataFrame(schema=STEPS_SCHEMA), None, None
    return _numbered(steps), SOURCE_RANGE, label


def _numbered(steps: pl.DataFrame) -> pl.DataFrame:
    return (
        steps.sort("rank", "start_ns")
        .with_columns(step=pl.coalesce("step", pl.int_range(pl.len()).over("rank")).cast(pl.Int64))
        # A step range recorded twice (CPU and GPU side, or nested copies) counts once.
        .unique(["rank", "step"], keep="first", maintain_order=True)
        .select(list(STEPS_SCHEMA))
        .cast(STEPS_SCHEMA)
        .sort("rank", "start_ns")
    )


def _repeating_ranges(ann: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """The ranges of the outermost repeating step-like name, with the number in the name as
    the step number where every one has a distinct number."""
    name = pl.col("name")
    candidates = (
        ann.filter(pl.col("kind").is_in(["user", "nvtx"]), pl.col("end_ns") > pl.col("start_ns"))
        .with_columns(
            # Every number out, and a serving iteration's batch description after its name.
            template=name.str.replace_all(r"\d+", "#").str.strip_chars()
            .str.replace(r"^(execute_#_context_#).*$", "${1}"),
            # The step's number, where the name holds exactly one.
            number=pl.when(name.str.count_matches(r"\d+") == 1)
            .then(name.str.extract(r"(\d+)", 1).cast(pl.Int64, strict=False)),
        )
        .filter(
            pl.col("template").str.contains(STEP_NAME_PATTERN)
            | pl.col("template").str.contains(SERVING_PATTERN)
        )
    )
    if candidates.is_empty():
        return candidates, None
    groups = (
        candidates.group_by("template")
        .agg(count=pl.len(), covered=(pl.col("end_ns") - pl.col("start_ns")).sum(),
             distinct=pl.col("number").n_unique(), numbered=pl.col("number").is_not_null().all())
        # Repeating names first; among them the one covering the most time is the outermost.
        .sort([pl.col("count") > 1, "covered", "template"], descending=[True, True, False])
    )
    best = groups.row(0, named=True)
    chosen = candidates.filter(pl.col("template") == best["template"])
    per_rank_unique = (
        chosen.group_by("rank").agg(ok=pl.col("number").n_unique() == pl.len())["ok"].all()
    )
    use_number = best["numbered"] and per_rank_unique
    chosen = chosen.with_columns(step=pl.col("number") if use_number else pl.lit(None, pl.Int64))
    return chosen.drop("template", "number"), str(best["template"])


def kept_steps(rows: list[Any]) -> pl.DataFrame:
    """The inferred steps a window kept (``meta.extra[INFERRED_STEPS]``) as a steps frame."""
    frame = pl.DataFrame([list(r) for r in rows], schema=["rank", "step", "start_ns", "end_ns"],
                         orient="row")
    return (frame.with_columns(name=pl.format("inferred step {}", pl.col("step")))
            .select(list(STEPS_SCHEMA)).cast(STEPS_SCHEMA).sort("rank", "start_ns"))


def infer_steps(raw_launches: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """Steps from a repeating sequence of kernels, per rank, for traces with no step ranges.

    On each rank, kernels in order of start; a kernel name whose occurrences are a constant
    number of kernels apart (at least ``MIN_INFERRED_STEPS`` times) marks a period. The largest
    such period is the step (smaller ones are layers inside it); of the kernels with that
    period, the one after the longest GPU gaps on average starts each step, so that step edges
    fall where the GPU waits for the next iteration. Each step is the CPU range from the launch
    of its first kernel to the launch of the next step's (the last: to the end of its work).
    Returns the steps and a label naming the anchor kernel, or an empty frame.
    """
    kernels = raw_launches.filter(pl.col("kind") == "kernel")
    if kernels.height < 2 * MIN_INFERRED_STEPS:
        return pl.DataFrame(schema=STEPS_SCHEMA), None
    seq = (
        kernels.sort("rank", "start_ns")
        .with_columns(
            index=pl.int_range(pl.len()).over("rank"),
            gap_before=(pl.col("start_ns") - pl.col("end_ns").cum_max().shift(1)).over("rank"),
            at=pl.coalesce("launch_start_ns", "start_ns"),
        )
    )
    periods = (
        seq.group_by("rank", "name")
        .agg(count=pl.len(), first=pl.col("index").min(),
             spacing=pl.col("index").diff().drop_nulls(),
             gap=pl.col("gap_before").mean(), total=pl.len())
        .filter(pl.col("count") >= MIN_INFERRED_STEPS)
        .with_columns(period=pl.col("spacing").list.first(),
                      regular=pl.col("spacing").list.n_unique() == 1)
        .filter(pl.col("regular"), pl.col("period") >= 2)
        .join(seq.group_by("rank").agg(n=pl.len()), on="rank")
        # The repeats must cover most of the rank's kernels, not one corner of the trace.
        .filter(pl.col("count") * pl.col("period") >= 0.5 * pl.col("n"))
        .sort(["rank", "period", "gap", "name"], descending=[False, True, True, False],
              nulls_last=True)
        .unique("rank", keep="first", maintain_order=True)
    )
    if periods.is_empty():
        return pl.DataFrame(schema=STEPS_SCHEMA), None
    ends = seq.group_by("rank").agg(last_end=pl.coalesce("launch_end_ns", "end_ns").max(),
                                    n=pl.len())
    steps = (
        seq.join(periods.select("rank", "name", "period"), on=["rank", "name"], how="semi")
        .join(periods.select("rank", "period"), on="rank")
        .sort("rank", "index")
        # Kernels of one CUDA graph launch share its launch time: one step starts per launch.
        .unique(["rank", "at"], keep="first", maintain_order=True)
        .join(ends, on="rank")
        .with_columns(
            start_ns=pl.col("at"),
            end_ns=pl.coalesce(pl.col("at").shift(-1).over("rank"), pl.col("last_end")),
            kernels=pl.coalesce(pl.col("index").shift(-1).over("rank"), pl.col("n"))
            - pl.col("index"),
        )
        # The trace's cut-off last step, with fewer kernels than a whole one, is not a step.
        .filter(pl.col("kernels") >= pl.col("period"), pl.col("end_ns") > pl.col("start_ns"))
        .with_columns(step=pl.int_range(pl.len()).over("rank").cast(pl.Int64))
        .filter(pl.len().over("rank") >= MIN_INFERRED_STEPS)
        .with_columns(name=pl.format("inferred step {}", pl.col("step")))
        .select(list(STEPS_SCHEMA))
        .cast(STEPS_SCHEMA)
    )
    if steps.is_empty():
        return pl.DataFrame(schema=STEPS_SCHEMA), None
    anchor = periods.sort("rank")["name"][0]
    period = int(periods.sort("rank")["period"][0])
    return steps, f"every {period} kernels, starting at {anchor}"


def with_wall_times(steps: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Add when each step's GPU work ran and the step's wall-clock range.

    A step annotation is a CPU-side range: the CPU queues the step's work and moves on, so the
    range can end long before the GPU finishes (a GPU-bound loop), or the GPU can wait on it (a
    CPU-bound loop). What a user measures with CUDA events is the cadence of completions, so:

    - ``gpu_start_ns``/``gpu_end_ns``: first start and last end of the GPU work launched in the step;
    - ``wall_end_ns`` = max(CPU end, GPU end): when the step is complete;
    - ``wall_start_ns`` = the previous step's ``wall_end_ns``, so consecutive steps tile the
      timeline and ``wall_end_ns - wall_start_ns`` is the step time. The first step of a rank has
      no previous completion: it lasts the longer of its CPU range and its GPU work (in a
      GPU-bound loop the CPU starts a step while the GPU still runs earlier work, which may not
      be in the trace; in a CPU-bound one the GPU waits on the CPU).
    """
    gpu = (
        launches.filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(gpu_start_ns=pl.col("start_ns").min(), gpu_end_ns=pl.col("end_ns").max())
    )
    return (
        steps.join(gpu, on=["rank", "step"], how="left")
        .sort("rank", "start_ns")
        .with_columns(wall_end_ns=pl.max_horizontal("end_ns", "gpu_end_ns"))
        .with_columns(
            wall_start_ns=pl.coalesce(
                pl.col("wall_end_ns").shift(1).over("rank"),
                pl.col("wall_end_ns") - pl.max_horizontal(
                    pl.col("end_ns") - pl.col("start_ns"),
                    pl.col("gpu_end_ns") - pl.col("gpu_start_ns")),
            )
        )
        # Overlapping step annotations (nested or duplicated) must not give negative times.
        .with_columns(wall_start_ns=pl.min_horizontal("wall_start_ns", "wall_end_ns"))
    )
