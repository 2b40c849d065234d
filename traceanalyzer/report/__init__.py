"""Reports: turn an :class:`~traceanalyzer.analysis.result.AnalysisResult` into HTML, JSON,
Markdown, an annotated trace, or a before/after diff. Reports never read trace files themselves
(the annotated export copies the original bytes, but never parses them into objects)."""
