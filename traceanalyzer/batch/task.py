"""One unit of batch work: analyze one trace and return its reports as text.

:func:`analyze_one` runs in a worker process (a local pool worker or a Dask worker). It gets a
path, never the trace's bytes, reads the trace itself and returns the JSON and HTML reports as
strings, so only the parent writes into the output folder (one writer, no races, and the output
folder need not be shared with remote workers). It never raises for a bad trace: the error comes
back as one line in the outcome.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from traceanalyzer import __version__


@dataclass(frozen=True)
class Settings:
    """What every task of one batch shares. Picklable: it travels to every worker."""

    rules: bool = True
    #: A ``traceanalyzer.rules.loader.RuleConfig`` (unresolved) or None for the built-in rules.
    rule_config: Any = None
    use_cache: bool = True
    cache_dir: str | None = None
    #: The analysis window of every trace (analysis.window.choose_window).
    window: str = "steps"
    #: Hash of the tool version and the rule configuration; part of every report's key.
    config_hash: str = ""


def report_key(content_key: str, settings: Settings) -> str:
    """The key that says whether a stored report is up to date with the trace and the settings."""
    return f"{content_key}-{settings.config_hash}"


def config_hash(rules: bool, rule_config: Any, window: str = "steps") -> str:
    """Hash of everything besides the trace that changes a report: the tool's code and rules.

    Rules are hashed by content (each active rule file's bytes and its resolved parameters), so
    editing a rule file invalidates the reports it shaped; the tool version, the Polars/NumPy
    versions and a hash of the package's source code are included, so editing a detector or a
    metric does too (the version alone did not change when the code did).
    """
    from traceanalyzer.analysis.result_cache import code_hash, rules_hash

    h = hashlib.blake2b(digest_size=8)
    h.update(f"traceanalyzer {__version__}\n{code_hash()}\nwindow={window}\n".encode())
    try:
        h.update(rules_hash(rules, rule_config).encode())
    except ImportError:  # rules engine not installed in this build
        h.update(b"rules-unavailable\n")
    return h.hexdigest()


def portable_rule_config(rule_config: Any) -> Any:
    """A copy of ``rule_config`` without its resolved rules: workers load the rule files again."""
    if rule_config is None:
        return None
    try:
        paths = [Path(p).absolute() for p in getattr(rule_config, "rule_paths", [])]
        return replace(rule_config, _resolved=None, rule_paths=paths)
    except (TypeError, ValueError):
        return rule_config


def analyze_one(path: str, prior_key: str | None, settings: Settings) -> dict[str, Any]:
    """Analyze the trace at ``path``; skip it if its key equals ``prior_key``.

    Returns a dict: path, status ("ok", "skipped" or "failed"), key, format, error, json, html,
    seconds. Only plain values, so it pickles cheaply for any executor.
    """
    started = time.perf_counter()
    out: dict[str, Any] = {"path": path, "status": "failed", "key": None, "format": None,
                           "error": None, "json": None, "html": None, "seconds": 0.0}
    try:
        _analyze_into(out, path, prior_key, settings)
    except MemoryError:
        out["error"] = f"{path}: out of memory while analyzing this trace"
    except Exception as exc:  # noqa: BLE001 - one bad trace must not stop a batch
        from traceanalyzer.errors import TraceAnalyzerError

        if isinstance(exc, TraceAnalyzerError):
            out["error"] = one_line(str(exc))
        else:
            out["error"] = one_line(f"{path}: internal error: {exc!r}")
    out["seconds"] = time.perf_counter() - started
    return out


def _analyze_into(out: dict[str, Any], path: str, prior_key: str | None,
                  settings: Settings) -> None:
    from traceanalyzer.ingest import sniff
    from traceanalyzer.ingest.cache import content_key

    out["format"] = sniff(path)
    try:
        key = report_key(content_key(path), settings)
    except OSError as exc:
        from traceanalyzer.errors import InputError

        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    out["key"] = key
    if prior_key is not None and key == prior_key:
        out["status"] = "skipped"
        return

    from traceanalyzer.analysis.result_cache import analyze_path
    from traceanalyzer.report.html import render_html
    from traceanalyzer.report.jsonout import render_json

    # Through the result cache too (when the cache is on): a --force re-run of unchanged traces
    # only renders the reports again.
    done = analyze_path(path, window=settings.window, rule_config=_rule_config(settings),
                        rules=settings.rules,
                        use_cache=settings.use_cache, cache_dir=settings.cache_dir)
    out["json"] = render_json(done.result)
    out["html"] = render_html(done.result, done.trace, timeline=done.timeline)
    out["status"] = "ok"


#: Resolved rule configurations of this worker process, by config hash.
_RESOLVED: dict[str, Any] = {}


def _rule_config(settings: Settings) -> Any:
    """The batch's rule configuration, loaded once per worker process.

    Settings arrive unpickled with each task, so their rule config has not read its rule files;
    reading and checking the YAML again for every trace cost more than analyzing a small trace.
    """
    if not settings.rules:
        return None
    config = _RESOLVED.get(settings.config_hash)
    if config is None:
        config = settings.rule_config
        if config is None:
            from traceanalyzer.rules.loader import RuleConfig

            config = RuleConfig()
        config.active()  # resolve now: this object serves every later trace
        _RESOLVED[settings.config_hash] = config
    return config


def one_line(text: str, limit: int = 500) -> str:
    """Untrusted text as one printable line (for the index, the summary and the terminal)."""
    line = "".join(ch if ch.isprintable() else "?" for ch in text.replace("\n", " "))
    return line if len(line) <= limit else line[: limit - 1] + "…"

