"""The what-if table every report shows (docs/critical-path.md, "Ranking"): the findings ranked
by the step time their fix is predicted to save, the rule's own impact beside it, which of the
two the ranking follows, what the prediction assumed, and "all of the above".

The terminal, Markdown and HTML writers and the JSON's ``what_if.ranking`` all read
:func:`whatif_view`, so their figures, labels and order agree; only the markup differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from traceanalyzer.analysis.path_ranks import MAX_RANKS

if TYPE_CHECKING:
    from traceanalyzer.analysis.result import AnalysisResult
    from traceanalyzer.findings import Finding

#: The rule's impact and the prediction "differ" where one is more than this many times the
#: other (both per step; 1 ns is added to each so that two near-zero figures agree).
DIFFER_FACTOR = 2.0
#: The row that applies every modelled fix at once.
ALL_LABEL = "all of the above"
#: What a finding is ranked by: its predicted saving where it has one, else its rule's impact.
BY_PREDICTION = "prediction"
BY_RULE = "rule's impact"
#: The mark beside a rule's impact that differs from the prediction by more than DIFFER_FACTOR.
DIFFERS_MARK = "*"
#: Column labels, in order (the HTML and Markdown add ASSUMES_LABEL as a last column; the
#: terminal lists the assumptions under its table).
RANK_LABEL = "rank"
COLUMNS = ("finding", "step time fixed", "saving / step", "rule's impact / step", "ranked by")
ASSUMES_LABEL = "assumes"
TITLE = "What-if: findings ranked by predicted saving per step"
#: Said for a finding whose rank has no replayed graph: no GPU work, or a rank past the bound
#: on ranks whose critical path is computed (analysis.path_ranks.MAX_RANKS).
NO_RANK_PATH = (
    "no prediction: this finding's rank has no critical path (no GPU work, or past the first "
    f"{MAX_RANKS} ranks whose graphs are replayed)"
)


def fmt_ms(ns: Any) -> str:
    """A what-if time: milliseconds to the microsecond, "–" where there is none."""
    return "–" if ns is None else f"{ns / 1e6:,.3f} ms"


@dataclass(frozen=True)
class Row:
    """One line of the table: a finding (``finding`` set) or "all of the above" of a rank."""

    label: str
    rank: int | None
    step_time_ns: int | None
    saving_ns: int | None
    rule_ns: int | None
    differs: bool
    ranked_by: str
    assumes: str
    finding: Finding | None = None

    def cells(self, multi_rank: bool) -> list[str]:
        """The row's cells under :data:`COLUMNS` (a rank first where the table has several)."""
        rule = "" if self.finding is None else fmt_ms(self.rule_ns)
        if self.differs:
            rule += f" {DIFFERS_MARK}"
        out = [self.label, fmt_ms(self.step_time_ns), fmt_ms(self.saving_ns), rule, self.ranked_by]
        if multi_rank:
            out.insert(0, "-" if self.rank is None else str(self.rank))
        return out


@dataclass(frozen=True)
class WhatIfView:
    """The table: ``rows`` in ranked order, then ``totals`` ("all of the above")."""

    now_ns: int | None
    rank: int
    rows: list[Row]
    totals: list[Row]
    multi_rank: bool
    judged: dict[str, Any] | None = None  # what_if.judged_steps
    #: Each rank's mean step time now, for the ranks with a prediction (the headline's alone
    #: on a trace of one rank).
    now_by_rank: dict[int, int | None] = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        return ([RANK_LABEL] if self.multi_rank else []) + list(COLUMNS)

    @property
    def any_differs(self) -> bool:
        return any(r.differs for r in self.rows)

    def intro(self) -> str:
        """What the table is and how it is ranked, in words (plain text), with the steps judged
        where the graph judged fewer than the window's (:func:`judged_note`)."""
        judged = judged_note(self.judged)
        return self._intro() + (" " + judged if judged else "")

    def _intro(self) -> str:
        others = {r: t for r, t in self.now_by_rank.items() if r != self.rank}
        if others:
            now = (
                f"Mean step time now {fmt_ms(self.now_ns)} on rank {self.rank}, "
                + ", ".join(f"{fmt_ms(t)} on rank {r}" for r, t in sorted(others.items()))
                + " (each finding's prediction is on its own rank's graph)"
            )
        elif self.multi_rank:
            now = (
                f"Mean step time now {fmt_ms(self.now_ns)} (rank {self.rank}; each finding's "
                "prediction is on its own rank's graph)"
            )
        else:
            now = f"Mean step time now {fmt_ms(self.now_ns)}"
        return (
            f"{now}. Each finding's fix replayed on "
            "the step's dependency graph gives the step time with it fixed; the findings "
            "are ranked by that predicted saving per step, not by the rule's own impact "
            "(shown beside it). Findings without a prediction come last, by their rule's "
            "impact."
        )

    def differs_note(self) -> str:
        """Said under the table where a rule's impact and its prediction part."""
        if not self.any_differs:
            return ""
        return (
            f"{DIFFERS_MARK} the rule's impact and the prediction differ by more than "
            f"{DIFFER_FACTOR:g}×; the ranking follows the prediction: it counts what the "
            "fix changes on the critical path, the rule's figure the time the problem takes "
            "wherever it falls."
        )


def judged_note(judged: dict[str, Any] | None) -> str:
    """What every report says when the critical path and the what-if judged only some of the
    window's steps (analysis.critical_path.judged_steps); "" when they judged all."""
    if not judged or not judged.get("bounded"):
        return ""
    if judged.get("start_ns") is not None:  # a window without steps, cut by time
        return (
            f"The critical path and the what-if judged the middle of the window, "
            f"{judged.get('nodes'):,} of its {judged.get('window_nodes'):,} graph nodes (the "
            f"budget is {judged.get('node_budget'):,}; the window has no steps)."
        )
    first, last = judged.get("first"), judged.get("last")
    which = f"step {first}" if first == last else f"steps {first}-{last}"
    return (
        f"The critical path and the what-if judged {which} ({judged.get('steps')} of the "
        f"window's {judged.get('of_steps')} steps, {judged.get('nodes'):,} of "
        f"{judged.get('window_nodes'):,} graph nodes; the budget is "
        f"{judged.get('node_budget'):,}): step times are their mean per step."
    )


def differs(saving: int | None, rule: int | None) -> bool:
    """Whether a prediction and a rule's impact (ns per step) differ by more than DIFFER_FACTOR."""
    if saving is None or rule is None or max(saving, rule) <= 0:
        return False
    ratio = (max(saving, 0) + 1) / (max(rule, 0) + 1)
    return not 1 / DIFFER_FACTOR <= ratio <= DIFFER_FACTOR


def ranked(findings: list[Finding]) -> list[Finding]:
    """Findings by predicted saving per step (what-if), largest first; those without a
    prediction after them, by their rule's impact; ties by slug, then rank."""

    def key(f: Finding) -> tuple[int, int, str, int]:
        saving = (f.what_if or {}).get("saving_ns")
        if saving is not None:
            return (0, -int(saving), f.slug, f.rank or 0)
        return (1, -int(f.impact_per_step_ns or f.impact_ns or 0), f.slug, f.rank or 0)

    return sorted(findings, key=key)


def whatif_view(result: AnalysisResult) -> WhatIfView | None:
    """The what-if table of ``result``; None without findings or a step time to replay."""
    summary = result.what_if or {}
    now = summary.get("step_time_ns")
    if not result.findings or now is None:
        return None
    rows = []
    for f in ranked(result.findings):
        w = f.what_if or {}
        saving = w.get("saving_ns")
        rule = None if f.impact_per_step_ns is None else int(f.impact_per_step_ns)
        assumes = w.get("assumes") or NO_RANK_PATH
        rows.append(
            Row(
                label=f.slug,
                rank=f.rank,
                step_time_ns=w.get("step_time_ns"),
                saving_ns=saving,
                rule_ns=rule,
                differs=differs(saving, rule),
                ranked_by=BY_RULE if saving is None else BY_PREDICTION,
                assumes=str(assumes),
                finding=f,
            )
        )
    totals = []
    per_rank = summary.get("ranks") or [summary]  # every rank with findings, else the headline
    for s in per_rank:
        everything = s.get("all")
        if everything:
            totals.append(
                Row(
                    label=ALL_LABEL,
                    rank=s.get("rank"),
                    step_time_ns=everything.get("step_time_ns"),
                    saving_ns=everything.get("saving_ns"),
                    rule_ns=None,
                    differs=False,
                    ranked_by="",
                    assumes=str(everything.get("assumes") or ""),
                )
            )
    multi = len({f.rank for f in result.findings if f.rank is not None}) > 1 or len(per_rank) > 1
    return WhatIfView(
        now_ns=now,
        rank=int(summary.get("rank", result.metrics.rank)),
        rows=rows,
        totals=totals,
        multi_rank=multi,
        judged=summary.get("judged_steps"),
        now_by_rank={int(s["rank"]): s.get("step_time_ns") for s in per_rank if "rank" in s},
    )


def ranking_dict(result: AnalysisResult) -> list[dict[str, Any]]:
    """The JSON's ``what_if.ranking``: the findings in the reports' what-if order, each with
    the two figures, whether they differ and which one it is ranked by."""
    view = whatif_view(result)
    if view is None:
        return []
    return [
        {
            "slug": r.label,
            "rank": r.rank,
            "saving_ns": r.saving_ns,
            "step_time_ns": r.step_time_ns,
            "rule_impact_per_step_ns": r.rule_ns,
            "differs": r.differs,
            "ranked_by": r.ranked_by,
        }
        for r in view.rows
    ]


#: The job's per-rank findings table: the column of each rank's predicted saving.
JOB_SAVING_LABEL = "saving / step (what-if, by rank)"
#: Ranks named in that column at most (the JSON's rank_findings has them all).
JOB_SAVING_RANKS = 5


def job_savings(by_rank: list[dict[str, Any]] | None) -> str:
    """A job's rule's predicted saving per step on each rank's graph
    (``rank_findings[].what_if_by_rank``), largest first: "rank 1 2.649 ms, rank 0 1.276 ms";
    "–" where no rank's finding has a prediction."""
    rows = [w for w in by_rank or [] if w.get("saving_ns") is not None]
    if not rows:
        return "–"
    rows.sort(key=lambda w: (-int(w["saving_ns"]), int(w["rank"])))
    text = ", ".join(f"rank {w['rank']} {fmt_ms(w['saving_ns'])}" for w in rows[:JOB_SAVING_RANKS])
    return text + (f", … ({len(rows)} ranks)" if len(rows) > JOB_SAVING_RANKS else "")
