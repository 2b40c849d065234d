"""Annotated Perfetto output: findings track, refusal to overwrite, and round trips."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as TraceProto
from polars.testing import assert_frame_equal

from tests.support.paths import public_kineto
from traceanalyzer.errors import UsageError
from traceanalyzer.findings import Finding
from traceanalyzer.ingest.perfetto import read_perfetto
from traceanalyzer.model import FRAME_SCHEMAS, Trace, TraceMeta, conform
from traceanalyzer.report.perfetto_writer import FINDINGS_TRACK, write_perfetto_annotated


def _trace(path: str = "/nonexistent/input.json") -> Trace:
    gpu = conform(
        pl.DataFrame(
            {
                "rank": [3, 3, 3, 3],
                "device": [0, 0, 0, 1],
                "stream": [7, 7, 7, 20],
                "kind": ["kernel", "kernel", "memcpy", "memset"],
                "name": ["sm90_xmma_gemm", "flash_fwd_kernel", "Memcpy HtoD (Pinned -> Device)",
                         "Memset (Device)"],
                "category": ["gemm", "attention", "memcpy", "memset"],
                "start_ns": [1_000, 1_500, 3_000, 3_000],  # the second kernel overlaps the first
                "end_ns": [2_000, 2_500, 3_400, 3_100],
                "correlation": [11, 12, 13, 14],
                "external_id": [1, 2, None, None],
                "grid_x": [132, 64, None, None],
                "grid_y": [1, 2, None, None],
                "grid_z": [1, 1, None, None],
                "block_x": [384, 128, None, None],
                "block_y": [1, 1, None, None],
                "block_z": [1, 1, None, None],
                "registers": [168, 255, None, None],
                "shared_mem": [232_448, 0, None, None],
                "bytes": [None, None, 1 << 20, 4096],
                "copy_kind": [None, None, "HtoD", None],
                "src_kind": [None, None, "pinned", None],
                "dst_kind": [None, None, "device", "device"],
                "graph_launched": [False, True, None, None],
            }
        ),
        "gpu",
    )
    cpu = conform(
        pl.DataFrame(
            {
                "rank": [3, 3, 3],
                "pid": [100, 100, 100],
                "tid": [101, 101, 102],
                "kind": ["op", "runtime", "python"],
                "name": ["aten::mm", "cudaLaunchKernel", "model.py(12): forward"],
                "start_ns": [500, 600, 400],
                "end_ns": [900, 700, 950],
                "correlation": [None, 11, None],
                "external_id": [1, 1, None],
                "input_dims": ["[[8, 16], [16, 32]]", None, None],
                "input_types": ['["float", "float"]', None, None],
                "call_stack": [None, None, "model.py(12): forward"],
                "parent_op": [None, "aten::mm", None],
            }
        ),
        "cpu",
    )
    annotations = conform(
        pl.DataFrame(
            {"rank": [3], "pid": [100], "tid": [101], "kind": ["step"], "name": ["ProfilerStep#4"],
             "start_ns": [300], "end_ns": [3_500], "step": [4], "domain": [None]}
        ),
        "annotations",
    )
    syncs = conform(
        pl.DataFrame(
            {"rank": [3], "pid": [100], "tid": [101], "device": [0], "stream": [7],
             "sync_type": ["stream"], "start_ns": [2_600], "end_ns": [2_700],
             "correlation": [15]}
        ),
        "syncs",
    )
    counters = conform(
        pl.DataFrame(
            {"rank": [3, 3], "pid": [100, 100], "device": [0, 0],
             "name": ["allocated_bytes", "allocated_bytes"], "ts_ns": [800, 900],
             "value": [1024.0, 2048.0]}
        ),
        "counters",
    )
    meta = TraceMeta(path=path, source_format="kineto", rank=3, world_size=8)
    return Trace(meta=meta, gpu=gpu, cpu=cpu, annotations=annotations, syncs=syncs,
                 counters=counters)


def _finding() -> Finding:
    return Finding(
        slug="gpu-idle-gaps", rule_id="TA001", severity="high", title="GPU idle",
        message="GPU idle 40% of the step", fix="overlap", impact_ns=500, impact_pct=12.5,
        evidence=[
            {"start_ns": 2_500, "end_ns": 3_000, "stream": 7, "gap_ns": 500},
            {"start_ns": 2_600, "end_ns": 2_800, "stream": 7},  # overlaps the first
            {"kernel": "no time range, not drawn"},
        ],
    )


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def _assert_same_frames(a: Trace, b: Trace) -> None:
    # The annotated Perfetto trace does not carry allocation events (yet): memory is left out.
    for name in (n for n in FRAME_SCHEMAS if n != "memory"):
        assert_frame_equal(_sorted(getattr(a, name)), _sorted(getattr(b, name)))


def test_round_trip_gives_identical_frames(tmp_path: Path) -> None:
    trace = _trace()
    out = tmp_path / "annotated.pftrace"
    write_perfetto_annotated(trace, [_finding()], out)
    back = read_perfetto(out)
    back.validate()
    _assert_same_frames(trace, back)
    assert back.meta.rank == 3
    assert back.meta.world_size == 8
    assert back.meta.warnings == []


def test_findings_track_has_one_slice_per_timed_evidence_row(tmp_path: Path) -> None:
    out = tmp_path / "annotated.pftrace"
    write_perfetto_annotated(_trace(), [_finding()], out)
    proto = TraceProto.FromString(out.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor.name
              for p in proto.packet if p.HasField("track_descriptor")}
    names: dict[int, str] = {}
    for p in proto.packet:
        for entry in p.interned_data.event_names:
            names[entry.iid] = entry.name
    on_findings = [
        (names[p.track_event.name_iid], p.timestamp)
        for p in proto.packet
        if p.HasField("track_event") and p.track_event.type == 1
        and tracks.get(p.track_event.track_uuid, "").startswith(FINDINGS_TRACK)
    ]
    assert sorted(on_findings) == [
        ("gpu-idle-gaps: GPU idle 40% of the step", 2_500),
        ("gpu-idle-gaps: GPU idle 40% of the step", 2_600),
    ]


def test_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    src = tmp_path / "input.pftrace"
    src.write_bytes(b"original")
    trace = _trace(str(src))
    with pytest.raises(UsageError, match="refusing to overwrite"):
        write_perfetto_annotated(trace, [], src)
    with pytest.raises(UsageError):
        write_perfetto_annotated(trace, [], tmp_path / "sub" / ".." / "input.pftrace")
    assert src.read_bytes() == b"original"


def test_writing_a_perfetto_input_round_trips(tmp_path: Path) -> None:
    first = tmp_path / "one.pftrace"
    write_perfetto_annotated(_trace(), [_finding()], first)
    trace = read_perfetto(first)  # the findings track is not read back as activity
    second = tmp_path / "two.pftrace"
    write_perfetto_annotated(trace, [], second)
    _assert_same_frames(trace, read_perfetto(second))


@pytest.mark.slow
@pytest.mark.parametrize("path", public_kineto(), ids=lambda p: p.name)
def test_public_kineto_traces_round_trip(tmp_path: Path, path: Path) -> None:
    from traceanalyzer.ingest.kineto import read_kineto

    trace = read_kineto(path)
    out = tmp_path / "t.pftrace"
    write_perfetto_annotated(trace, [], out)
    _assert_same_frames(trace, read_perfetto(out))


def _gpu_rows(intervals: list[tuple[int, int, int]]) -> pl.DataFrame:
    return conform(
        pl.DataFrame(
            {
                "rank": [0] * len(intervals),
                "device": [0] * len(intervals),
                "stream": [s for s, _, _ in intervals],
                "kind": ["kernel"] * len(intervals),
                "name": [f"k{i % 3}" for i in range(len(intervals))],
                "category": ["other"] * len(intervals),
                "start_ns": [a for _, a, _ in intervals],
                "end_ns": [a + d for _, a, d in intervals],
                "correlation": list(range(len(intervals))),
            }
        ),
        "gpu",
    )


def test_overlapping_equal_and_zero_length_slices_round_trip(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from traceanalyzer.model import empty_frame

    interval = st.tuples(st.integers(0, 2), st.integers(0, 50), st.integers(0, 20))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(interval, min_size=1, max_size=40))
    def check(intervals: list[tuple[int, int, int]]) -> None:
        gpu = _gpu_rows(intervals)
        trace = Trace(
            meta=TraceMeta(path="/nonexistent/in.json", source_format="kineto"),
            gpu=gpu, cpu=empty_frame("cpu"), annotations=empty_frame("annotations"),
            syncs=empty_frame("syncs"), counters=empty_frame("counters"),
        )
        out = tmp_path / "prop.pftrace"
        write_perfetto_annotated(trace, [], out)
        back = read_perfetto(out)
        assert_frame_equal(_sorted(back.gpu), _sorted(gpu))
        assert back.meta.warnings == []

    check()
