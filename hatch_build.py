"""Build hook: compile the C extensions: the Kineto event decoder
(``traceanalyzer/ingest/_eventdecode.c``), its reduction (``_eventreduce.c``) and a small trace's
assembly (``_eventassemble.c``), and the Perfetto packet walker (``_perfettowalk.c``).

Optional by design. Without a C compiler or the Python headers the package installs without
them: Kineto ingest decodes every chunk with Polars' NDJSON reader (the same frames, at about
2.5x the CPU), or reduces decoded chunks with Polars alone, and Perfetto ingest walks packets
with the Python decoder (the same tables, at 3-5x the time).
``traceanalyzer.ingest.eventdecode.AVAILABLE``, ``eventreduce.AVAILABLE`` and
``traceanalyzer.ingest.perfetto_decode.WALKER_AVAILABLE`` tell which ones a process uses.
Their headers lie next to them: ``_stringview.h``, ``_ascii.h``, ``_heldcolumn.h``,
``_arrowstream.h``, ``_hugearena.h`` and ``_regexlite.h``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = (Path("traceanalyzer") / "ingest" / "_eventdecode.c",
           Path("traceanalyzer") / "ingest" / "_eventreduce.c",
           Path("traceanalyzer") / "ingest" / "_eventassemble.c",
           Path("traceanalyzer") / "ingest" / "_perfettowalk.c")


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
        "-O2", "-DNDEBUG", f"-I{sysconfig.get_paths()['include']}",
        str(root / source), "-o", str(tmp),
    ]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.name == "nt":
            return
        root = Path(self.root)
        fallbacks = {"_eventdecode": "Kineto ingest will use Polars alone",
                     "_eventreduce": "Kineto ingest will reduce decoded events with Polars",
                     "_eventassemble": "Kineto ingest will assemble small traces with Polars",
                     "_perfettowalk": "Perfetto ingest will use the Python decoder"}
        for source in SOURCES:
            try:
                target = compile_extension(root, source)
            except (OSError, subprocess.CalledProcessError) as exc:
                detail = getattr(exc, "stderr", "") or str(exc)
                self.app.display_warning(
                    f"traceanalyzer: {source.name} was not built; {fallbacks[source.stem]} "
                    f"(same results, slower): {detail.strip()[:500]}"
                )
                continue
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            if version != "editable":  # an editable install imports it from the source tree
                build_data["force_include"][str(target)] = str(target.relative_to(root))
