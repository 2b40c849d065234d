"""Nsight Systems: SQLite exports (:mod:`.reader`, with :mod:`.tables`, :mod:`.frames`,
:mod:`.meta` and :mod:`.sqlite_columns`) and ``.nsys-rep`` reports, exported by nsys itself
(:mod:`.rep`)."""

from traceanalyzer.ingest.nsys.reader import read_nsys, split_by_process
from traceanalyzer.ingest.nsys.rep import read_nsys_rep

__all__ = ["read_nsys", "read_nsys_rep", "split_by_process"]
