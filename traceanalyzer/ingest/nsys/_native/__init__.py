"""C source of the SQLite page reader (``_sqlitescan``) and the extension built from it.

Optional: without it, :mod:`traceanalyzer.ingest.nsys.sqlite_columns` reads every table through
connectorx or the standard library's sqlite3.
"""
