"""Issue 29.7: the library API shows its options: typed keyword arguments, docstrings, no
``**kwargs``."""

from __future__ import annotations

import inspect
import typing

import traceanalyzer

KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY


def _check(func, expected: dict[str, object], returns: str) -> None:
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    assert params[0].name == "path" and params[0].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind == KEYWORD_ONLY for p in params[1:])  # options by name only
    assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params)
    assert {p.name: p.default for p in params[1:]} == expected
    assert all(p.annotation is not inspect.Parameter.empty for p in params)
    assert sig.return_annotation == returns
    from traceanalyzer.analysis.result import AnalysisResult
    from traceanalyzer.model import Trace
    from traceanalyzer.rules import RuleConfig

    names = {"Trace": Trace, "AnalysisResult": AnalysisResult, "RuleConfig": RuleConfig}
    hints = typing.get_type_hints(func, localns=names)  # the annotations resolve
    assert set(hints) == {p.name for p in params} | {"return"}
    doc = inspect.getdoc(func) or ""
    for name in expected:
        assert f"``{name}``" in doc, f"{func.__name__}: {name} undocumented"


def test_load_signature() -> None:
    _check(traceanalyzer.load, {"use_cache": True, "cache_dir": None, "trace_processor": None},
           "Trace")


def test_analyze_signature() -> None:
    _check(traceanalyzer.analyze, {"rule_config": None, "rules": True, "window": "steps",
                                   "use_cache": True, "cache_dir": None,
                                   "trace_processor": None}, "AnalysisResult")


def test_public_names() -> None:
    assert traceanalyzer.__all__ == ["__version__", "analyze", "load"]
