"""The one table that maps Nsight Compute's metric names to ``kernel_metrics`` columns.

Each column lists the raw-page metric names that hold it, newest first; the first present in a
file is read, so a report of an older Nsight Compute whose names differ is read through its
own. Checked against Nsight Compute 2025.3.1 (the committed ``sample_traces/ncu`` reports, every
name below); the older stall-reason names (``smsp__warp_cycles_per_issue_stall_*``) are those of
the 2019 section files (``CPIStall*.py``, which read them for devices before Volta). ``details``
names the ``--page details`` row (``Metric Name``) with the same value, where there is one.

Values are converted to the column's unit from the unit that the file states (the raw page's
second row, the details page's ``Metric Unit``): :func:`unit_factor`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Metric:
    """One column of ``kernel_metrics`` read from one metric."""

    column: str
    dtype: pl.DataType
    #: Raw-page names, newest first.
    raw: tuple[str, ...]
    #: The column's unit: "ns", "byte", "hz", "byte/s" (or "" for counts, %, ratios).
    unit: str = ""
    #: The details page's ``Metric Name`` of the same value (None: the page does not show it).
    details: str | None = None


def _stall(reason: str, old: str | None = None) -> Metric:
    names: tuple[str, ...] = (f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio",)
    if old:
        names += (f"smsp__warp_cycles_per_issue_stall_{old}",)
    return Metric(f"stall_{reason}", pl.Float64(), names)


I64, I32, F64 = pl.Int64(), pl.Int32(), pl.Float64()

#: Every metric read from the raw page (columns of identity and launch come from the leading
#: columns: see :mod:`.csvpage`).
METRICS: tuple[Metric, ...] = (
    Metric("duration_ns", I64, ("gpu__time_duration.sum",), "ns", "Duration"),
    Metric("registers", I32, ("launch__registers_per_thread",), "", "Registers Per Thread"),
    Metric(
        "shared_mem_static",
        I64,
        ("launch__shared_mem_per_block_static",),
        "byte",
        "Static Shared Memory Per Block",
    ),
    Metric(
        "shared_mem_dynamic",
        I64,
        ("launch__shared_mem_per_block_dynamic",),
        "byte",
        "Dynamic Shared Memory Per Block",
    ),
    Metric(
        "sm_count", I32, ("launch__sm_count", "device__attribute_multiprocessor_count"), "", "# SMs"
    ),
    Metric("waves_per_sm", F64, ("launch__waves_per_multiprocessor",), "", "Waves Per SM"),
    Metric("sm_clock_hz", F64, ("sm__cycles_elapsed.avg.per_second",), "hz", "SM Frequency"),
    # Speed of Light
    Metric(
        "sm_throughput_pct",
        F64,
        ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
        "",
        "Compute (SM) Throughput",
    ),
    Metric(
        "memory_throughput_pct",
        F64,
        ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
        "",
        "Memory Throughput",
    ),
    Metric(
        "dram_throughput_pct",
        F64,
        (
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        ),
        "",
        "DRAM Throughput",
    ),
    Metric(
        "l1_throughput_pct",
        F64,
        ("l1tex__throughput.avg.pct_of_peak_sustained_active",),
        "",
        "L1/TEX Cache Throughput",
    ),
    Metric(
        "l2_throughput_pct",
        F64,
        ("lts__throughput.avg.pct_of_peak_sustained_elapsed",),
        "",
        "L2 Cache Throughput",
    ),
    Metric("l1_hit_rate_pct", F64, ("l1tex__t_sector_hit_rate.pct",), "", "L1/TEX Hit Rate"),
    Metric("l2_hit_rate_pct", F64, ("lts__t_sector_hit_rate.pct",), "", "L2 Hit Rate"),
    Metric("dram_bytes_read", I64, ("dram__bytes_read.sum",), "byte"),
    Metric("dram_bytes_write", I64, ("dram__bytes_write.sum",), "byte"),
    Metric("dram_peak_bytes_per_cycle", F64, ("dram__bytes.sum.peak_sustained",), "byte"),
    Metric("dram_clock_hz", F64, ("dram__cycles_elapsed.avg.per_second",), "hz", "DRAM Frequency"),
    # Occupancy
    Metric(
        "achieved_occupancy_pct",
        F64,
        ("sm__warps_active.avg.pct_of_peak_sustained_active",),
        "",
        "Achieved Occupancy",
    ),
    Metric(
        "theoretical_occupancy_pct",
        F64,
        ("sm__maximum_warps_per_active_cycle_pct",),
        "",
        "Theoretical Occupancy",
    ),
    Metric(
        "block_limit_registers",
        I32,
        ("launch__occupancy_limit_registers",),
        "",
        "Block Limit Registers",
    ),
    Metric(
        "block_limit_shared_mem",
        I32,
        ("launch__occupancy_limit_shared_mem",),
        "",
        "Block Limit Shared Mem",
    ),
    Metric("block_limit_warps", I32, ("launch__occupancy_limit_warps",), "", "Block Limit Warps"),
    Metric("block_limit_sm", I32, ("launch__occupancy_limit_blocks",), "", "Block Limit SM"),
    Metric(
        "block_limit_barriers",
        I32,
        ("launch__occupancy_limit_barriers",),
        "",
        "Block Limit Barriers",
    ),
    # Global memory coalescing
    Metric("global_load_requests", I64, ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",)),
    Metric("global_load_sectors", I64, ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",)),
    Metric("global_store_requests", I64, ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",)),
    Metric("global_store_sectors", I64, ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",)),
    Metric(
        "global_load_bytes_per_sector",
        F64,
        ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",),
    ),
    Metric(
        "global_store_bytes_per_sector",
        F64,
        ("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",),
    ),
    # Shared memory
    Metric("shared_load_requests", I64, ("smsp__sass_inst_executed_op_shared_ld.sum",)),
    Metric("shared_store_requests", I64, ("smsp__sass_inst_executed_op_shared_st.sum",)),
    Metric(
        "shared_load_wavefronts", I64, ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",)
    ),
    Metric(
        "shared_store_wavefronts", I64, ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",)
    ),
    Metric(
        "shared_load_bank_conflicts",
        I64,
        ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",),
    ),
    Metric(
        "shared_store_bank_conflicts",
        I64,
        ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",),
    ),
    # Local memory (register spills)
    Metric("local_load_sectors", I64, ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",)),
    Metric("local_store_sectors", I64, ("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",)),
    Metric(
        "spill_requests",
        I64,
        ("derived__local_spilling_requests",),
        "",
        "Local Memory Spilling Requests",
    ),
    Metric(
        "spill_requests_pct",
        F64,
        ("derived__local_spilling_requests_pct",),
        "",
        "Local Memory Spilling Request Overhead",
    ),
    # Warp stalls: cycles per issued instruction, by reason
    Metric(
        "warp_cycles_per_issue",
        F64,
        ("smsp__average_warp_latency_per_inst_issued.ratio",),
        "",
        "Warp Cycles Per Issued Instruction",
    ),
    _stall("long_scoreboard", "long_scoreboard"),
    _stall("short_scoreboard", "short_scoreboard"),
    _stall("barrier", "barrier"),
    _stall("membar", "membar"),
    _stall("mio_throttle", "mio_throttle"),
    _stall("lg_throttle", "lg_throttle"),
    _stall("tex_throttle", "tex_throttle"),
    _stall("math_pipe_throttle", "pipe_busy"),
    _stall("wait", "wait"),
    _stall("not_selected", "not_selected"),
    _stall("selected"),
    _stall("no_instruction", "no_instructions"),
    _stall("branch_resolving", "branch_resolving"),
    _stall("dispatch_stall", "dispatch_stall"),
    _stall("drain", "drain"),
    _stall("imc_miss", "imc_miss"),
    _stall("sleeping", "sleeping"),
    _stall("gmma"),
    _stall("misc", "misc"),
    # Tensor cores and FLOPs
    Metric(
        "tensor_pipe_pct",
        F64,
        (
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        ),
    ),
    Metric(
        "fadd_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "fmul_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "ffma_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "ffma_peak_per_cycle",
        F64,
        ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",),
    ),
    Metric(
        "dadd_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "dmul_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "dfma_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "dfma_peak_per_cycle",
        F64,
        ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained",),
    ),
    Metric(
        "hadd_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_hadd_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "hmul_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_hmul_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "hfma_per_cycle",
        F64,
        ("smsp__sass_thread_inst_executed_op_hfma_pred_on.sum.per_cycle_elapsed",),
    ),
    Metric(
        "hfma_peak_per_cycle",
        F64,
        ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained",),
    ),
)

#: Tensor-core operations per second, summed over the data types of the path (2025.3.1 names;
#: the paths count dense and sparse ops alike).
TENSOR_OPS = tuple(
    f"sm__ops_path_tensor_src_{t}.sum.per_second"
    for t in (
        "bf16_dst_fp32",
        "fp16",
        "tf32_dst_fp32",
        "fp64",
        "fp8_sparsity_off",
        "fp8_sparsity_on",
        "int8",
        "int1",
    )
)

_PREFIX = {
    "": 1.0,
    "k": 1e3,
    "m": 1e6,
    "g": 1e9,
    "t": 1e12,
    "p": 1e15,
    "ki": 2.0**10,
    "mi": 2.0**20,
    "gi": 2.0**30,
    "ti": 2.0**40,
}
_TIME = {
    "ns": 1.0,
    "nsecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "second": 1e9,
}
_UNIT = re.compile(r"^(k|m|g|t|p|ki|mi|gi|ti)?(byte|hz)$")


def unit_factor(unit: str, target: str) -> float | None:
    """The factor that turns a value in ``unit`` (as Nsight Compute writes it: ``Kbyte``,
    ``Mbyte/s``, ``Ghz``, ``usecond``, ``Kbyte/block``) into ``target`` ("ns", "byte", "hz",
    "byte/s"; "" for a count, %, ratio: any unit, factor 1). None when ``unit`` cannot be
    turned into ``target`` (a file whose units are not what the metric is)."""
    if target == "":
        return 1.0
    u = unit.strip().lower()
    head, _, per = u.partition("/")
    if target == "ns":
        return _TIME.get(u)
    if target in ("byte", "hz"):
        if per not in ("", "block", "cycle", "sm"):  # bytes per block or per cycle: still bytes
            return None
        m = _UNIT.match(head)
        if m is None or m.group(2) != target:
            return None
        return _PREFIX[m.group(1) or ""]
    if target == "byte/s":
        m = _UNIT.match(head)
        if m is None or m.group(2) != "byte" or per not in ("s", "second"):
            return None
        return _PREFIX[m.group(1) or ""]
    return None
