"""What the Kineto reader reads from each event, and the names it maps.

Times: Chrome trace ``ts``/``dur`` are microseconds (floats in traces with ns resolution). The
decoder reads them as float64 µs; they become int64 ns by rounding the fractional part separately
from the integer part. That is exact for integer µs (up to 2**53), exact to the ns for
fractions while timestamps stay below 2**42 µs (4.4e12; recent Kineto writes timestamps relative
to ``baseTimeNanoseconds``, around 10**12 µs) and within a few ns up to 10**13 µs; absolute epoch
timestamps with ns fractions (~1.7e15 µs) resolve only to 0.25 µs.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.model import DType

ARG_FIELDS: dict[str, DType] = {
    "External id": pl.Int64,
    "correlation": pl.Int64,
    "device": pl.Int64,
    "stream": pl.Int64,
    # Lists as text: only kernels have them, and decoding them as lists is dear (bench/NOTES.md).
    "grid": pl.String,
    "block": pl.String,
    "registers per thread": pl.Int64,
    "shared memory": pl.Int64,
    "bytes": pl.Int64,
    "Input Dims": pl.String,
    "Input type": pl.String,
    "Call stack": pl.String,
    # Memory events ("[memory]" instants).
    "Total Allocated": pl.Int64,
    "Total Reserved": pl.Int64,
    "Device Id": pl.Int64,
    "Bytes": pl.Int64,  # signed: > 0 allocated, < 0 freed
    "Addr": pl.Int64,
    # Operators, with record_shapes=True: the scalar arguments as text (a list of strings, ""
    # for a tensor); with with_flops=True: the FLOPs torch counted for the call.
    "Concrete Inputs": pl.String,
    "flops": pl.Int64,
}

EVENT_SCHEMA: dict[str, DType] = {
    "ph": pl.String,
    "cat": pl.String,
    "name": pl.String,
    "pid": pl.String,  # an int in most events, a string ("Spans", "") in some
    "tid": pl.String,
    "ts": pl.Float64,
    "dur": pl.Float64,
    "args": pl.Struct(ARG_FIELDS),
}

# Matched lowercased. PyTorch 1.8's Kineto named them "Operator", "Runtime", "Python", "Kernel",
# "Memcpy" and "Memset" (the TensorBoard plugin reads both); _eventreduce.c keeps the same lists.
GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
                  "memcpy": "memcpy", "memset": "memset"}
CPU_CATEGORIES = {
    "cpu_op": "op",
    "operator": "op",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "python_function": "python",
    "runtime": "runtime",
    "python": "python",
}
STEP_PATTERN = r"^ProfilerStep#([0-9]+)$"
#: The phases read: complete events and instants; flows, counters and metadata are dropped early.
KEPT_PHASES = ["X", "i", "I"]


#: GPU columns that follow from (kind, name) alone: computed once per distinct name.
NAME_COLUMNS = ("category", "copy_kind", "src_kind", "dst_kind")
#: GPU columns the assembly adds (they need all events); a chunk's GPU rows leave them out.
ASSEMBLED_GPU_COLUMNS = ("graph_launched", *NAME_COLUMNS)
