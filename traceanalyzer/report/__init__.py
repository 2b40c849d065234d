"""Reports: turn an :class:`~traceanalyzer.analysis.result.AnalysisResult` into terminal text
(:mod:`.terminal`), HTML, JSON, Markdown, an annotated trace, or a before/after diff; and a trace's
canonical frames into ``nsys stats``-like tables (:mod:`.stats`). Reports never read trace files
themselves (the annotated export copies the original bytes, but never parses them into objects)."""
