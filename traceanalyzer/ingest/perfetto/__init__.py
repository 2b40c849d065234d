"""Perfetto protobuf traces: the built-in streaming reader (:mod:`.decode` into raw tables,
:mod:`.map` into canonical frames) and the optional trace_processor route (:mod:`.tp`)."""

from traceanalyzer.ingest.perfetto.reader import TRACE_PROCESSOR_ENV, read_perfetto

__all__ = ["TRACE_PROCESSOR_ENV", "read_perfetto"]
