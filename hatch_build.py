"""Build hook: compile the C extensions of the ingest layer, each next to its source.

- ``traceanalyzer/ingest/kineto/_native/``: the Kineto event decoder (``_eventdecode.c``), its
  reduction (``_eventreduce.c``), a small trace's assembly (``_eventassemble.c``) and the guard of
  the scanner's memory maps (``_mapguard.c``);
- ``traceanalyzer/ingest/perfetto/_native/``: the Perfetto packet walker (``_perfettowalk.c``);
- ``traceanalyzer/ingest/nsys/_native/``: the SQLite page reader (``_sqlitescan.c``).

Their shared headers (``_stringview.h``, ``_ascii.h``, ``_heldcolumn.h``, ``_arrowstream.h``,
``_hugearena.h``, ``_regexlite.h``, ``_columnkinds.h``) lie in ``traceanalyzer/ingest/_native/``,
which is on the include path. They are compiled with ``-Wall -Wextra``.

Optional by design. Without a C compiler or the Python headers the package installs without
them: Kineto ingest decodes every chunk with Polars' NDJSON reader (the same frames, at about
2.5x the CPU), or reduces decoded chunks with Polars alone, and Perfetto ingest walks packets
with the Python decoder (the same tables, at 3-5x the time); Nsight Systems ingest reads every
table through SQLite (connectorx or sqlite3: the same frames, at ~3x the time).
``traceanalyzer.ingest.kineto.decode.AVAILABLE``, ``kineto.reduce.AVAILABLE``,
``kineto.assemble.AVAILABLE``, ``kineto.mapguard.AVAILABLE``,
``traceanalyzer.ingest.perfetto.decode.WALKER_AVAILABLE`` and
``traceanalyzer.ingest.nsys.sqlite_pages.AVAILABLE`` tell which ones a process uses.

``compile_extension`` needs only the standard library (``python -c "import hatch_build as h,
pathlib; [h.compile_extension(pathlib.Path('.'), s) for s in h.SOURCES]"`` rebuilds them in a
source tree); hatchling is needed only for the hook itself.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # compile_extension alone, outside a build
    BuildHookInterface = object  # type: ignore[misc,assignment]

INGEST = Path("traceanalyzer") / "ingest"
#: Each extension's source, and what ingest does without it.
EXTENSIONS = {
    INGEST / "kineto" / "_native" / "_eventdecode.c": "Kineto ingest will use Polars alone",
    INGEST / "kineto" / "_native" / "_eventreduce.c":
        "Kineto ingest will reduce decoded events with Polars",
    INGEST / "kineto" / "_native" / "_eventassemble.c":
        "Kineto ingest will assemble small traces with Polars",
    INGEST / "kineto" / "_native" / "_mapguard.c":
        "Kineto ingest will read files instead of mapping them",
    INGEST / "perfetto" / "_native" / "_perfettowalk.c":
        "Perfetto ingest will use the Python decoder",
    INGEST / "nsys" / "_native" / "_sqlitescan.c":
        "Nsight Systems ingest will read every table through SQLite",
}
SOURCES = tuple(EXTENSIONS)
#: Folders of the headers the sources share.
INCLUDE_DIRS = (INGEST / "_native",)
WARNINGS = ("-Wall", "-Wextra")


def compile_extension(root: Path, source: Path = SOURCES[0]) -> Path:
    """Compile one extension next to its source; raises OSError/CalledProcessError on failure."""
    target = root / source.with_name(source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    # LDSHARED is the compiler with the platform's flags for a loadable module (-shared, or
    # -bundle on macOS); like setuptools, the environment may override it.
    ldshared = os.environ.get("LDSHARED") or sysconfig.get_config_var("LDSHARED") or "cc -shared"
    # Built beside the target and renamed over it: a process that has the old module loaded
    # keeps its file (overwriting a loaded shared library in place crashes that process).
    tmp = target.with_name(target.name + ".tmp")
    cmd = [
        *shlex.split(ldshared), *shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC"),
        "-O2", "-DNDEBUG", *WARNINGS, f"-I{sysconfig.get_paths()['include']}",
        *(f"-I{root / folder}" for folder in INCLUDE_DIRS),
        str(root / source), "-o", str(tmp),
    ]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


class CustomBuildHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.name == "nt":
            return
        root = Path(self.root)
        for source, fallback in EXTENSIONS.items():
            try:
                target = compile_extension(root, source)
            except (OSError, subprocess.CalledProcessError) as exc:
                detail = getattr(exc, "stderr", "") or str(exc)
                self.app.display_warning(
                    f"traceanalyzer: {source.name} was not built; {fallback} "
                    f"(same results, slower): {detail.strip()[:500]}"
                )
                continue
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            if version != "editable":  # an editable install imports it from the source tree
                build_data["force_include"][str(target)] = str(target.relative_to(root))
