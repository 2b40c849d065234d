"""Built-in detectors: pure functions from derived views to a measured :class:`Detection`.

A detector is registered by name with the parameters it reads and the fields it measures, so the
engine can check a rule file against it (a rule's ``parameters`` must match the detector's, and a
message template may only name measured fields or parameters). Detectors never format text for
users: the engine owns severity, messages and units.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

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


@dataclass(frozen=True)
class DetectorSpec:
    name: str
    func: Callable[[Any, Params], Detection | None]
    params: tuple[str, ...]
    fields: tuple[str, ...]


DETECTORS: dict[str, DetectorSpec] = {}


def detector(
    name: str, *, params: tuple[str, ...], fields: tuple[str, ...]
) -> Callable[[Callable[[Any, Params], Detection | None]], Callable[[Any, Params], Detection | None]]:
    """Register a detector under ``name``; ``params`` and ``fields`` are its contract with YAML."""

    def register(func: Callable[[Any, Params], Detection | None]):
        if name in DETECTORS:
            raise ValueError(f"detector {name!r} registered twice")
        DETECTORS[name] = DetectorSpec(name, func, tuple(params), tuple(fields))
        return func

    return register


def get_detector(name: str) -> DetectorSpec | None:
    _load_builtin()
    return DETECTORS.get(name)


def all_detectors() -> dict[str, DetectorSpec]:
    _load_builtin()
    return dict(DETECTORS)


_loaded = False


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # Imported for their @detector side effect.
    from traceanalyzer.rules.detectors import (  # noqa: F401
        comm,
        gemm,
        idle,
        kernels,
        sync,
    )
