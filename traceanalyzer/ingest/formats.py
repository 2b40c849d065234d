"""The trace formats ingest reads: one descriptor each, and the one list of them.

Sniffing (:func:`traceanalyzer.ingest.sniff`), the reader dispatch
(:func:`traceanalyzer.ingest.read_any`), the memory check
(:data:`traceanalyzer.ingest.MEMORY_PER_BYTE`) and the result cache's code hash
(:func:`traceanalyzer.analysis.result_cache.code_hash`) all go through :data:`FORMATS`: a new
format is one more entry here and a package beside this module.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceanalyzer.demangle import demangle_gpu

if TYPE_CHECKING:
    from traceanalyzer.model import Trace

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
#: Environment variable naming a ``trace_processor_shell`` binary (same as ``--trace-processor``).
TRACE_PROCESSOR_ENV = "TRACEANALYZER_TRACE_PROCESSOR"

#: Kinds of source file whose edits can change what ingest (or an analysis) gives.
SOURCE_SUFFIXES = (".py", ".c", ".h")
#: What every format shares, relative to this package: its own top-level modules (not
#: recursive) and the C headers in ``_native/``.
SHARED_SOURCES = (".", "_native")
INGEST_DIR = Path(__file__).resolve().parent


def _json_start(head: bytes) -> bool:
    # A JSON object or array, after whitespace or a UTF-8 byte order mark.
    return head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] in (b"{", b"[")


def _packet_stream(head: bytes) -> bool:
    # A Perfetto trace is a stream of `Trace.packet` fields: field 1, wire type 2 (tag byte 0x0a).
    return head[:1] == b"\x0a"


@dataclass(frozen=True)
class Format:
    """One trace format: how it is recognised, what reads it, and what that costs."""

    #: The name :func:`~traceanalyzer.ingest.sniff` gives and ``TraceMeta.source_format`` holds.
    name: str
    #: What it is, for the message that lists the formats expected.
    description: str
    #: The reader, ``"module:function"``, imported at the first read of the format (its imports
    #: are what a process pays for) and looked up at each read.
    reader: str
    #: Folders of this package whose code the reader's output depends on (besides the shared).
    sources: tuple[str, ...]
    #: Peak memory of an analysis per byte of (uncompressed) input; None where unknown (an
    #: export's size is not known before it is made).
    memory_per_byte: float | None = None
    #: A file name ending that names the format whatever the bytes (checked first).
    suffix: str | None = None
    #: Leading bytes of the file as it lies on disk.
    magic: bytes | None = None
    #: Whether the reader also takes the file gzipped (``magic`` then leads the unpacked bytes).
    gzip_ok: bool = False
    #: A test of the first bytes, after gzip decompression for a gzipped file.
    looks_like: Callable[[bytes], bool] | None = None
    #: An environment variable that names an external program to read the format with instead
    #: of the built-in reader (as the reader's ``trace_processor`` option does).
    external_env: str | None = None
    #: Whether the reader keeps a cache of its own, which its ``use_cache=False`` bypasses.
    own_cache: bool = False

    def read(self, path: str | os.PathLike[str], **options: Any) -> Trace:
        """Read ``path`` with this format's reader."""
        module, _, function = self.reader.partition(":")
        reader: Callable[..., Trace] = getattr(importlib.import_module(module), function)
        trace = reader(path, **options)
        # Names are set at ingest: mangled kernel names (ROCm's, some CUDA traces') demangled
        # once per distinct name, so that categories, rules and reports read what they are.
        trace.gpu = demangle_gpu(trace.gpu)
        return trace

    def reads_externally(self, program: str | os.PathLike[str] | None = None) -> bool:
        """Whether an external program the user named reads it (``program``, or the format's
        environment variable). Such reads bypass the caches, whose entries hold what the
        built-in reader made."""
        return self.external_env is not None and bool(program or os.environ.get(self.external_env))

    def source_dirs(self, ingest_dir: Path = INGEST_DIR) -> tuple[Path, ...]:
        """The folders of this format's code."""
        return tuple(ingest_dir / folder for folder in self.sources)


# memory_per_byte: the measured peaks (bench/RESULTS.md, docs/perfetto.md; the figures are in
# bench/NOTES.md) with a margin for traces unlike the benchmark's.
KINETO = Format(
    name="kineto", description="Kineto/Chrome JSON",
    reader="traceanalyzer.ingest.kineto:read_kineto", sources=("kineto",),
    memory_per_byte=2.2, looks_like=_json_start,
)
NSYS = Format(
    name="nsys", description="an Nsight Systems SQLite export",
    reader="traceanalyzer.ingest.nsys:read_nsys", sources=("nsys",),
    memory_per_byte=3.5, magic=SQLITE_MAGIC, gzip_ok=True,
)
NSYS_REP = Format(
    name="nsys-rep", description="an .nsys-rep",
    reader="traceanalyzer.ingest.nsys:read_nsys_rep", sources=("nsys",),
    suffix=".nsys-rep", own_cache=True,
)
PERFETTO = Format(
    name="perfetto", description="a Perfetto protobuf trace",
    reader="traceanalyzer.ingest.perfetto:read_perfetto", sources=("perfetto",),
    memory_per_byte=12.0, looks_like=_packet_stream, external_env=TRACE_PROCESSOR_ENV,
)

#: Every format, in the order sniffing tries them (Kineto's test before Perfetto's: a JSON file
#: may start with a newline, the byte a packet stream starts with).
FORMATS: dict[str, Format] = {f.name: f for f in (KINETO, NSYS, NSYS_REP, PERFETTO)}


def expected() -> str:
    """The formats, as the message for a file that is none of them lists them."""
    names = [f.description for f in FORMATS.values()]
    return ", ".join(names[:-1]) + " or " + names[-1]


def ingest_sources(ingest_dir: Path = INGEST_DIR) -> list[Path]:
    """Every source file of the ingest package (``ingest_dir``) whose code shapes a reader's
    output: the shared modules and headers, and each format's folders (a test checks that
    nothing is left out)."""
    files: set[Path] = set()
    for folder in SHARED_SOURCES:
        files |= {f for f in (ingest_dir / folder).iterdir()
                  if f.suffix in SOURCE_SUFFIXES and f.is_file()}
    for fmt in FORMATS.values():
        for source_dir in fmt.source_dirs(ingest_dir):
            files |= {f for f in source_dir.rglob("*") if f.suffix in SOURCE_SUFFIXES}
    return sorted(files)
