"""Helpers shared by the report writers: atomic writes, number formatting, finding order."""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import polars as pl

from traceanalyzer.devices import identified
from traceanalyzer.errors import UsageError
from traceanalyzer.findings import SHARE_LABEL, Finding, severity_rank


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write`` on a temp file beside ``path``, then rename it over ``path``.

    A crash or an exception leaves no partial report behind: either the old file or the new one.
    """
    target = Path(path)
    if target.is_symlink() and (target.is_file() or not target.exists()):
        target = Path(os.path.realpath(target))  # write the file it names: keep the link
    directory = target.parent if str(target.parent) else Path(".")
    if target.exists() and not target.is_file():
        # /dev/stdout, a FIFO, a device: write through it; renaming over it would replace it.
        try:
            with open(target, "wb") as fh:
                write(fh)
        except OSError as exc:
            raise UsageError(f"{target}: cannot write ({exc.strerror or exc})") from None
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:  # no such folder, no permission: the user's to fix, one line
        raise UsageError(f"{target}: cannot write here ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):  # disk full, target is a folder, ...
            raise UsageError(f"{target}: cannot write ({exc.strerror or exc})") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    # A lone surrogate (from a file name, say) that a writer let through becomes "?", not an
    # encoding error: the writers escape them (textsafe), this is the last line of defence.
    data = text.encode("utf-8", "replace")
    atomic_write(path, lambda fh: fh.write(data))


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most costly first; ties by severity (worst first), then slug and rank, so order is stable."""
    return sorted(
        findings,
        key=lambda f: (-int(f.impact_ns or 0), -_sev(f.severity), f.slug, f.rank or 0, f.rule_id),
    )


def _sev(severity: str) -> int:
    try:
        return severity_rank(severity)
    except ValueError:
        return -1


def finite(x: Any) -> float | None:
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def fmt_ns(ns: Any) -> str:
    """A duration for people: 850 ns, 12.3 µs, 4.56 ms, 1.23 s."""
    v = finite(ns)
    if v is None:
        return "–"
    a = abs(v)
    if a < 1e3:
        return f"{v:.0f} ns"
    if a < 1e6:
        return f"{v / 1e3:.3g} µs" if a < 1e5 else f"{v / 1e3:.0f} µs"
    if a < 1e9:
        return f"{v / 1e6:.3g} ms" if a < 1e8 else f"{v / 1e6:.0f} ms"
    return f"{v / 1e9:.3g} s"


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``n`` with ``word`` in the number it takes: "1 step", "3 steps", "1 of 1 step"."""
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def fmt_bytes(n: Any) -> str:
    """Bytes in binary units (1.97 GiB), as the memory figures are shown everywhere."""
    x = finite(n)
    if x is None:
        return "–"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(x) >= size:
            return f"{x / size:.2f} {unit}"
    return f"{int(x)} B"


def fmt_flops(n: Any, unit: str = "FLOP") -> str:
    """FLOPs (or FLOP/s with ``unit="FLOP/s"``) in decimal prefixes: 4.40 TFLOP, 651 MFLOP/s; a
    small count keeps its digits instead of reading 0.00 TFLOP."""
    x = finite(n)
    if x is None:
        return "–"
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {prefix}{unit}" if x / size < 100 else f"{x / size:.0f} {prefix}{unit}"
    return f"{x:.0f} {unit}"


def fmt_pct(p: Any, digits: int = 1) -> str:
    v = finite(p)
    return "–" if v is None else f"{v:.{digits}f}%"


def pct_of(part: Any, whole: Any) -> float | None:
    a, b = finite(part), finite(whole)
    if a is None or not b:
        return None
    return 100.0 * a / b


def safe_url(url: str) -> str | None:
    """``url`` if it is a plain http(s) link; anything else (javascript:, data:) is refused."""
    u = str(url).strip()
    return u if u.lower().startswith(("https://", "http://")) and not any(
        c in u for c in "\"'<> \n\r\t`") else None


def terminal_safe(text: Any) -> str:
    """Untrusted text for one terminal cell: no escape sequences, no newlines (visible escapes
    instead; :func:`traceanalyzer.report.textsafe.visible`)."""
    from traceanalyzer.report.textsafe import visible

    return visible(text)


_NOISE_PREFIXES = ("void ", "at::native::", "(anonymous namespace)::", "at::", "c10::",
                   "std::", "cutlass::", "cute::")


def short_kernel_name(name: Any, limit: int = 90) -> str:
    """A readable kernel name: parameter lists dropped, common namespaces removed, and template
    arguments elided below the deepest level that still fits in ``limit`` characters."""
    s = str(name).replace("(anonymous namespace)::", "")
    if "<" not in s and "(" not in s:  # plain names (most of them): nothing to elide
        s = " ".join(s.split())
        return s if len(s) <= limit else s[: limit - 1] + "…"
    for max_depth in (4, 3, 2, 1):
        short = _elide(s, max_depth)
        if len(short) <= limit:
            return short
    return short[: limit - 1] + "…"


def _elide(s: str, max_depth: int) -> str:
    out: list[str] = []
    depth = 0  # template depth
    paren = 0  # parentheses inside a template argument: kept if short ("(int)"), else "(…)"
    inner: list[str] = []
    for ch in s:
        if paren:
            paren += {"(": 1, ")": -1}.get(ch, 0)
            if paren:
                inner.append(ch)
            elif depth <= max_depth:
                text = "".join(inner)
                out.append(f"({text})" if len(text) <= 12 and "(" not in text else "(…)")
            continue
        if ch == "(":
            if depth == 0 and out and out[-1] != " ":  # the parameter list: drop it
                break
            if depth > 0:
                paren, inner = 1, []
                continue
            out.append(ch)
            continue
        if ch == "<":
            depth += 1
            if depth <= max_depth:
                out.append(ch)
            elif depth == max_depth + 1:
                out.append("…")
            continue
        if ch == ">":
            if depth <= max_depth:
                out.append(ch)
            depth = max(depth - 1, 0)
            continue
        if depth <= max_depth:
            out.append(ch)
    short = "".join(out)
    for prefix in _NOISE_PREFIXES:
        short = short.replace(prefix, "")
    return " ".join(short.split()) or s


#: What an informational finding (outside the window's time, such as the start-up) says
#: instead of a cost.
INFORMATIONAL = "informational: not a cost within the window"


def impact_text(finding: Finding) -> str:
    """A finding's impact as every report words it: its time and its share of the GPU's active
    span, the base every finding's share is of (findings.SHARE_BASE, docs/metrics.md)."""
    return f"{fmt_ns(finding.impact_ns)} ({fmt_pct(finding.impact_pct)} {SHARE_LABEL})"


def multi_rank(result: Any) -> bool:
    """Whether the analyzed file holds several ranks (each judged by the rules on its own)."""
    return result.ranks is not None and result.ranks.height > 1


def findings_by_rule(findings: Iterable[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """Findings by rule, most costly first: each rule's costliest finding, and the same rule's
    findings on the file's other ranks (a file that holds several ranks), most costly first."""
    groups: dict[str, list[Finding]] = {}
    for f in sorted_findings(findings):
        groups.setdefault(f.slug, []).append(f)
    return [(first, rest) for first, *rest in groups.values()]


def other_ranks_text(others: list[Finding]) -> str:
    """"also on rank 1: 12 ms (4.1% ...), rank 3: ...": one rule's findings on other ranks."""
    return "also on " + ", ".join(f"rank {f.rank}: {impact_text(f)}" for f in others)


def costs_nothing(finding: Finding) -> bool:
    """An informational finding with no cost in the window (its impact says nothing)."""
    return finding.severity == "info" and not finding.impact_ns


#: The headline's label of ``metrics.exposed_transfer_ns`` (docs/metrics.md, "exposed transfer"),
#: the same in the terminal, Markdown and HTML reports.
EXPOSED_TRANSFER_LABEL = "exposed transfer (rank wait left out)"


def exposed_transfer(metrics: Any) -> int | None:
    """The exposed transfer to show beside the exposed communication, or None where it is not a
    separate figure (basis ``none``: whole durations count, the same number as "exposed")."""
    value = getattr(metrics, "exposed_transfer_ns", None)
    if value is None or getattr(metrics, "exposed_transfer_basis", None) in (None, "none"):
        return None
    return int(value)


def rank_rows(result: Any) -> list[dict[str, Any]]:
    """Per rank of a file that holds several (one process per GPU in one export): step time,
    busy, host wait, compute, communication and exposed communication (% of the rank's span)."""
    ranks = result.ranks
    if ranks is None or ranks.is_empty():
        return []
    out = []
    for r in ranks.sort("rank").to_dicts():
        span = r.get("span_ns") or 0
        out.append({"rank": r["rank"], "step_p50_ns": r.get("step_time_p50_ns"),
                    "busy_pct": pct_of(r.get("busy_ns"), span),
                    "host_wait_pct": pct_of(r.get("idle_host_wait_ns"), span),
                    "compute_pct": pct_of(r.get("compute_ns"), span),
                    "communication_pct": pct_of(r.get("communication_ns"), span),
                    "exposed_pct": pct_of(r.get("exposed_communication_ns"), span),
                    "headline": r["rank"] == result.metrics.rank})
    return out


#: Steps listed in the terminal and Markdown; the HTML and JSON list all of them.
MAX_STEP_ROWS = 20


def step_span(first: Any, last: Any) -> str:
    """How every report names a run of steps: by the number the trace gives them
    (``ProfilerStep#12`` is step 12), "step 12" or "steps 2-4"."""
    return f"step {first}" if first == last else f"steps {first}-{last}"


#: A step's name in the "steps" line, cut (with "…") past this many characters.
_STEP_NAME_CHARS = 60


def step_numbering(result: Any) -> str:
    """The headline rank's steps and where their numbers come from, for the reports' "steps"
    line: "3 (steps 2-4, numbered as the trace names them: ProfilerStep#2 to ProfilerStep#4)",
    so that a step number named anywhere in the report reads as the trace's own."""
    count = counted(result.metrics.step_count or 0, "step")
    steps = result.steps
    if steps is None or steps.is_empty() or "step" not in steps.columns:
        return count if result.metrics.step_count else "none found"
    if "rank" in steps.columns:
        mine = steps.filter(steps["rank"] == result.metrics.rank)
        steps = mine if not mine.is_empty() else steps
    steps = steps.filter(steps["step"].is_not_null()).sort("step")
    if steps.is_empty():
        return count
    first, last = steps.row(0, named=True), steps.row(-1, named=True)
    span = step_span(first["step"], last["step"])
    # Names come from the trace: cut (callers escape them).
    full = [str(n) for n in steps["name"].to_list()] if "name" in steps.columns else []
    names = [n if len(n) <= _STEP_NAME_CHARS else n[: _STEP_NAME_CHARS - 1] + "…" for n in full]
    source = getattr(getattr(result, "window", None), "step_source", None)
    if source == "inferred" or (names and names[0].startswith("inferred step")):
        how = "inferred from a repeating kernel sequence, numbered in order"
    elif full and all([int(d) for d in re.findall(r"[0-9]+", name)] == [n]
                      for n, name in zip(steps["step"].to_list(), full, strict=True)):
        # The step's number is the one number in its name (ProfilerStep#12, "step 12"), as
        # analysis.steps takes it: a serving range's batch sizes (execute_32_context_0(...))
        # do not number it.
        ends = names[0] if len(names) == 1 else f"{names[0]} to {names[-1]}"
        how = f"numbered as the trace names them: {ends}"
    else:
        how = (f"numbered in order: the trace's {names[0] if names else 'step'} ranges carry no "
               "step number")
    return f"{steps.height:,} ({span}, {how})"


def device_line(result: Any) -> str:
    """The GPUs the headline rank ran work on, each named: "NVIDIA H200" for one, "2 × NVIDIA
    H200 (GPUs 0, 1)" for a process that drove two, "NVIDIA H200 (GPU 0), NVIDIA A100 (GPU 1)"
    for unlike ones; and how many more the trace lists that ran none of it: an Nsight Systems
    export lists every GPU of the machine, not the ones the process used."""
    meta = result.meta
    if not meta.devices:
        return ""
    streams = getattr(result, "streams", None)
    used: set[int] = set()
    if streams is not None and not streams.is_empty() and "device" in streams.columns:
        mine = streams.filter(streams["rank"] == result.metrics.rank) if "rank" in streams.columns \
            else streams
        used = {int(d) for d in mine["device"].drop_nulls().to_list()}
    shown = sorted((d for d in meta.devices if d.id in used), key=lambda d: d.id) \
        or list(meta.devices)
    if len(shown) == 1:
        # A name that does not say which GPU it is: its properties may.
        name, which = shown[0].name, identified(shown[0])
        if name:
            line = f"{name} ({which})" if which else name
        else:
            line = f"GPU {shown[0].id} (its name not recorded{'; ' + which if which else ''})"
    else:
        groups: dict[str, list[int]] = {}
        for d in shown:
            groups.setdefault(d.name or "unnamed GPU", []).append(d.id)
        line = ", ".join(
            f"{name} (GPU {ids[0]})" if len(ids) == 1
            else f"{len(ids)} × {name} (GPUs {', '.join(str(i) for i in ids)})"
            for name, ids in groups.items())
    idle = len(meta.devices) - len(shown)
    if idle > 0:
        line += (f"; the trace lists {idle} more GPU{'s' if idle > 1 else ''} that ran none of "
                 "this rank's work")
    return line


#: The name the Nsight Systems reader gives a CUDA graph traced whole (ingest.nsys.frames).
_WHOLE_GRAPH = r"^\[CUDA graph \d+\]$"


def graph_note(result: Any) -> str | None:
    """Where the trace records CUDA graphs as one activity each (Nsight Systems'
    ``--cuda-graph-trace=graph``), a line that says the kernel counts count each graph once."""
    kernels = getattr(result, "kernels", None)
    if kernels is None or kernels.is_empty() or "name" not in kernels.columns:
        return None
    graphs = kernels.filter(kernels["name"].str.contains(_WHOLE_GRAPH))
    if graphs.is_empty():
        return None
    runs = int(graphs["instances"].sum()) if "instances" in graphs.columns else graphs.height
    verb, them = ("counts", "it") if runs == 1 else ("count", "them")
    return (f"{counted(runs, 'CUDA graph execution')} traced whole (nsys --cuda-graph-trace=graph) "
            f"{verb} as one kernel each; the kernels inside {them} are not in the trace")


@dataclass(frozen=True)
class HeaderNote:
    """One fact a report opens with: its label (``device``, ``window``, ``steps``, ``GPU
    span``, ``kernels``) and its text (plain: each writer escapes it for its format)."""

    label: str
    text: str

    @property
    def title(self) -> str:
        """The label with a capital first letter, for the Markdown and HTML reports."""
        return self.label[:1].upper() + self.label[1:]


def header_notes(result: Any) -> list[HeaderNote]:
    """The facts every report opens with, each only where it holds: the GPUs the headline rank
    used (and how many the trace lists that it did not), the window sentence, where the step
    numbers come from, the GPU's active span when it is much shorter than the window, and CUDA
    graphs traced as one activity. The terminal, Markdown and HTML reports all take them from
    here, so that none of them can lack one the others say."""
    notes = []
    if devices := device_line(result):
        notes.append(HeaderNote("device", devices))
    window = getattr(result, "window", None)
    if window is not None:
        notes.append(HeaderNote("window", window.describe()))
    if result.metrics.step_count:
        notes.append(HeaderNote("steps", step_numbering(result)))
    if (span := span_note(result)) is not None:
        notes.append(HeaderNote("GPU span", span))
    if (graphs := graph_note(result)) is not None:
        notes.append(HeaderNote("kernels", graphs))
    return notes


#: The GPU span is named beside the window when it is shorter than this share of it.
SPAN_NOTE_SHARE = 0.9


def span_note(result: Any) -> str | None:
    """Where the GPU's active span (first GPU activity to last, what every percentage and each
    finding's share is of: findings.SHARE_BASE) is much shorter than the analyzed window, a line
    that says so; else None."""
    window, span = getattr(result, "window", None), result.metrics.span_ns
    analyzed = window.analyzed_ns if window is not None else 0
    if not analyzed or not span or span >= SPAN_NOTE_SHARE * analyzed:
        return None
    return (f"{fmt_ns(span)} of the {fmt_ns(analyzed)} window, from its first GPU activity to "
            f"its last: every percentage, each finding's share included, is {SHARE_LABEL}, "
            "not of the window")


def step_rows(result: Any, limit: int | None = MAX_STEP_ROWS) -> tuple[list[dict[str, Any]], int]:
    """The per-step table every report shows, one dict per step of the headline rank: step,
    time, GPU busy %, idle by cause (% of the step), kernels, launches, and a mark ("slowest",
    "outlier"). Past ``limit`` steps, the slowest ``limit`` in step order. Returns the rows and
    the number of steps."""
    steps = result.steps
    if steps is None or steps.is_empty():
        return [], 0
    if "rank" in steps.columns:
        steps = steps.filter(steps["rank"] == result.metrics.rank)
    rows = steps.sort("step").to_dicts()
    if not rows:
        return [], 0
    slowest = max(rows, key=lambda r: r["duration_ns"])["step"]
    # A rank with no GPU activity (a CPU-only trace) has no busy or idle GPU to split: "-".
    gpu = bool(result.metrics.span_ns)
    out = []
    for r in rows:
        d = r["duration_ns"] or 0
        mark = "slowest" if r["step"] == slowest and len(rows) > 1 else ""
        if r.get("outlier"):
            mark = "outlier" + (", slowest" if mark else "")
        of = d if gpu else 0
        out.append({
            "step": r["step"], "name": r.get("name"), "duration_ns": d,
            "busy_pct": pct_of(r["busy_ns"], of),
            "host_wait_pct": pct_of(r["idle_host_wait_ns"], of),
            "kernel_wait_pct": pct_of(r["idle_kernel_wait_ns"], of),
            "other_pct": pct_of(r["idle_other_ns"], of), "kernels": r["kernel_count"],
            "launches": r.get("launch_count"), "mark": mark,
        })
    if limit is not None and len(out) > limit:
        keep = {r["step"] for r in sorted(out, key=lambda r: -r["duration_ns"])[:limit]}
        out = [r for r in out if r["step"] in keep]
    return out, len(rows)


#: Operators named in the terminal and Markdown memory sections.
MEMORY_HOLDERS_SHOWN = 3


def memory_lines(result: Any) -> list[str]:
    """The memory section of the terminal and Markdown reports, as plain text lines (callers
    escape them): per device of the headline rank its peaks, and who held the allocated peak."""
    summary = getattr(result, "memory", None)
    if summary is None or summary.is_empty():
        return []
    rank = result.metrics.rank
    out = []
    for r in summary.filter(pl.col("rank") == rank).iter_rows(named=True):
        parts = []
        for kind in ("allocated", "reserved"):
            peak = r[f"peak_{kind}_bytes"]
            if peak is None:
                continue
            share = f", {fmt_pct(r[f'peak_{kind}_pct'])} of the GPU" \
                if r[f"peak_{kind}_pct"] is not None else ""
            step = f", step {r[f'peak_{kind}_step']}" if r[f"peak_{kind}_step"] is not None else ""
            parts.append(f"peak {kind} {fmt_bytes(peak)}{share}{step}")
        source = "" if r["source"] == "allocator" else " (driver allocations)"
        # "GPU 0", as the header's device line names it
        line = f"GPU {r['device']}{source}: " + "; ".join(parts)
        holders = getattr(result, "memory_holders", None)
        if holders is not None and not holders.is_empty():
            held = holders.filter(pl.col("rank") == rank, pl.col("device") == r["device"]).head(
                MEMORY_HOLDERS_SHOWN)
            if held.height:
                line += "; held at the peak by " + ", ".join(
                    f"{h['operator']} {fmt_bytes(h['bytes'])}" for h in held.iter_rows(named=True))
        out.append(line)
    return out
