"""C source of the Perfetto packet walker (``_perfettowalk``) and the extension built from it.

Optional: without it, :mod:`traceanalyzer.ingest.perfetto.decode` reads every stream with the
Python reference decoder.
"""
