"""The rules on held-out real traces (sample_traces/holdout): ordinary programs, profiled on an
H200 under both profilers, with the verdicts written down before they ran (expectations.yaml)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO
from traceanalyzer.analysis.views import Views
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import read_any
from traceanalyzer.rules import RuleConfig, evaluate

HOLDOUT = REPO / "sample_traces" / "holdout"
EXPECTED = yaml.safe_load((HOLDOUT / "expectations.yaml").read_text())["programs"]
TRACES = [(program, HOLDOUT / name) for program, expected in EXPECTED.items()
          for name in expected.get("files", [f"torch/{program}.json.gz", f"nsys/{program}.sqlite.gz"])]

pytestmark = pytest.mark.slow


@functools.cache
def fired(path: Path) -> frozenset[str]:
    findings, outcomes = evaluate(Views(choose_window(read_any(path))), RuleConfig())
    assert not [o for o in outcomes if o.status == "error"]
    return frozenset(f.slug for f in findings)


def test_every_program_has_both_traces():
    assert all(path.exists() for _, path in TRACES)
    assert len(EXPECTED) == 10


@pytest.mark.parametrize("program,path", TRACES, ids=[p.name for _, p in TRACES])
def test_holdout_verdicts(program, path):
    expected = EXPECTED[program]
    slugs = fired(path)
    must_fire = set(expected["must_fire"])
    if path.name.endswith(".json.gz"):  # torch.profiler: input shapes were recorded
        must_fire |= set(expected.get("must_fire_torch", []))
    known_wrong = set(expected.get("known_wrong", []))
    assert must_fire - known_wrong <= slugs, (program, sorted(slugs))
    assert not (set(expected["must_not_fire"]) - known_wrong) & slugs, (program, sorted(slugs))


KNOWN_WRONG = [(program, path, slug) for program, path in TRACES
               for slug in EXPECTED[program].get("known_wrong", [])]


@pytest.mark.parametrize("program,path,slug", KNOWN_WRONG,
                         ids=[f"{p.name}:{slug}" for _, p, slug in KNOWN_WRONG])
def test_known_wrong_verdicts_are_still_wrong(program, path, slug):
    # A verdict expectations.yaml records as wrong, with why. When this fails, the rule has been
    # fixed: take the slug out of known_wrong, and the expectation holds again.
    expected = EXPECTED[program]
    wrong = (slug in fired(path)) if slug in expected["must_not_fire"] else (slug not in fired(path))
    assert wrong, f"{slug} on {path.name} is right now: remove it from known_wrong"
