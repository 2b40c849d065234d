"""Built-in detectors: pure functions from derived views to a measured :class:`Detection`.

One module per built-in rule, named after the rule's slug (``gpu-idle-gaps`` ->
``gpu_idle_gaps.py``), holding one detector of that name; code several rules share lives in the
modules whose names start with ``_``. The modules are found by that convention (see
:func:`_load_builtin`), so a new rule adds a module and is never listed by hand.

A detector is registered with the parameters it reads and the fields it measures, so the engine
can check a rule file against it (a rule's ``parameters`` must match the detector's, and a
message template may only name measured fields or parameters). Detectors never format text for
users: the engine owns severity, messages and units.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

#: A rule's resolved parameters, by name.
Params = Mapping[str, float | int]


@dataclass
class Detection:
    """What a detector measured when it found a problem."""

    impact_ns: int  # estimated time lost over the analyzed window
    fields: dict[str, Any] = field(default_factory=dict)  # measured values for the message
    #: Top occurrences, most costly first; timeline rows carry start_ns/end_ns (+ stream).
    evidence: pl.DataFrame | None = None


class NotApplicable(Exception):  # noqa: N818 - a verdict, not an error
    """Raised by a detector that cannot judge this input; the message says what is missing."""


class Detector(Protocol):
    """The signature of every detector: the trace's views and the rule's parameters in, a
    :class:`Detection` out when it found a problem, None when it did not. It raises
    :class:`NotApplicable` when the trace lacks what it needs; any other exception is a bug,
    which the engine reports as the rule's ``error`` outcome."""

    __name__: str

    def __call__(self, views: Views, p: Params, /) -> Detection | None: ...


@dataclass(frozen=True)
class DetectorSpec:
    name: str
    func: Detector
    params: tuple[str, ...]
    fields: tuple[str, ...]
    #: Earlier names of the detector, still accepted in rule files.
    aliases: tuple[str, ...] = ()


#: Registered detectors by name; their earlier names are in :data:`ALIASES`.
DETECTORS: dict[str, DetectorSpec] = {}
#: Earlier name -> name, for user rule files written before detectors took their rule's name.
ALIASES: dict[str, str] = {}


def detector(
    *, params: tuple[str, ...], fields: tuple[str, ...], aliases: tuple[str, ...] = ()
) -> Callable[[Detector], Detector]:
    """Register the decorated function as a detector named after it; ``params`` and ``fields``
    are its contract with YAML, ``aliases`` the names it had before.

    A built-in detector's name is its module's, which is its rule's slug with ``_`` for ``-``.
    """

    def register(func: Detector) -> Detector:
        name = func.__name__
        module = getattr(func, "__module__", "")
        if module.startswith(__name__ + ".") and module.rpartition(".")[2] != name:
            raise ValueError(f"detector {name!r} must live in {__name__}.{name}, not {module}")
        for key in (name, *aliases):
            if key in DETECTORS or key in ALIASES:
                raise ValueError(f"detector {key!r} registered twice")
        DETECTORS[name] = DetectorSpec(name, func, tuple(params), tuple(fields), tuple(aliases))
        ALIASES.update(dict.fromkeys(aliases, name))
        return func

    return register


def get_detector(name: str) -> DetectorSpec | None:
    """The detector registered as ``name`` or under an earlier name; None if there is none."""
    _load_builtin()
    return DETECTORS.get(ALIASES.get(name, name))


def all_detectors() -> dict[str, DetectorSpec]:
    """Every registered detector by name (earlier names left out)."""
    _load_builtin()
    return dict(DETECTORS)


def aliases() -> dict[str, str]:
    """Earlier names of the registered detectors -> their names."""
    _load_builtin()
    return dict(ALIASES)


def builtin_modules() -> list[str]:
    """The names of the detector modules, one per built-in rule (the shared ``_`` ones left
    out)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


_loaded = False


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in builtin_modules():  # imported for their @detector side effect
        importlib.import_module(f"{__name__}.{name}")
