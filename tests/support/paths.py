"""Paths to the repository's traces, and bench/ scripts as modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
PUBLIC = REPO.parent / "shared" / "traces" / "public"
SAMPLES = REPO / "sample_traces"


def bench_module(name: str, module_name: str | None = None) -> ModuleType:
    """A script of bench/ as a module (bench/ is not a package; its scripts import each other)."""
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    module_name = module_name or name
    spec = importlib.util.spec_from_file_location(module_name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before running it: dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def public_kineto() -> list[Path]:
    folder = PUBLIC / "kineto"
    return sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
