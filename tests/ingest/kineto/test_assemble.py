"""The compiled assembly of a one-group trace gives the Polars assembly's frames, or None."""

from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tests.support.paths import REPO, public_kineto
from traceanalyzer.categories import KERNEL_PATTERNS
from traceanalyzer.ingest.kineto import assemble, decode, read_kineto
from traceanalyzer.model import COPY_KINDS, FRAME_SCHEMAS, MEMORY_KINDS

pytestmark = pytest.mark.skipif(
    not (decode.AVAILABLE and assemble.AVAILABLE),
    reason="the C event decoder, reduction or assembly is not built (no compiler at install)",
)


def read_both_ways(path, monkeypatch) -> tuple[list[bool], object]:
    """Read ``path`` as it is and with the Polars assembly; check they agree. Returns what the
    compiled assembly answered each time it was asked (True: frames, False: declined)."""
    answers = []
    compiled = assemble.compiled_frames

    def spy(*args):
        out = compiled(*args)
        answers.append(out is not None)
        return out

    monkeypatch.setattr(assemble, "compiled_frames", spy)
    fast = read_kineto(path)
    monkeypatch.setattr(assemble, "compiled_frames", lambda *args: None)
    reference = read_kineto(path)
    monkeypatch.setattr(assemble, "compiled_frames", compiled)
    for name in FRAME_SCHEMAS:
        assert_frame_equal(getattr(fast, name), getattr(reference, name), check_exact=True)
    assert fast.meta == reference.meta
    return answers, fast


SAMPLES = sorted((REPO / "sample_traces" / "torch").glob("*.json.gz"))
PROBES = sorted((REPO / "tests" / "traces").glob("*.json.gz"))


@pytest.mark.parametrize("path", SAMPLES + PROBES, ids=lambda p: p.name)
def test_sample_traces_assemble_exactly_as_polars_and_never_decline(path, monkeypatch):
    answers, _ = read_both_ways(path, monkeypatch)
    assert False not in answers  # asked once for a one-group trace (a larger one: never)


@pytest.mark.slow
@pytest.mark.parametrize("path", public_kineto(), ids=lambda p: p.name)
def test_public_traces_assemble_exactly_as_polars_and_never_decline(path, monkeypatch):
    answers, _ = read_both_ways(path, monkeypatch)
    assert False not in answers


def write_trace(path, events: list[dict]) -> None:
    # One event per line, as Kineto writes them: the path the mapped runs take.
    path.write_text(json.dumps({"traceEvents": events}, indent=1, ensure_ascii=False))


def op(name="aten::mm", ts=10, ext=1, **args):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": ts, "dur": 5,
            "args": {"External id": ext, **args}}


def call(name="cudaLaunchKernel", ts=11, corr=7, ext=1, cat="cuda_runtime"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 2, "ts": ts, "dur": 1,
            "args": {"correlation": corr, "External id": ext}}


def gpu(name="sm90_xmma_gemm_bf16", ts=20, corr=7, cat="kernel", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 3,
            "args": {"correlation": corr, "device": 0, "stream": 7, **args}}


def test_one_trace_of_every_join_and_name_rule(tmp_path, monkeypatch):
    events = [
        # The parent operator: the latest of those sharing the external id, the file's last
        # among equal starts; an id no call carries is no parent; a call with no id has none.
        op("aten::first", ts=1, ext=5), op("aten::tie_a", ts=3, ext=5), op("aten::tie_b", ts=3, ext=5),
        op("aten::later_id", ts=4, ext=6), call(ts=6, corr=1, ext=5), call(ts=6, corr=2, ext=None),
        call("cudaMemcpyAsync", ts=7, corr=3, ext=9),
        # The launch: the first in time decides (a graph launch here, in any case).
        call("CUDAGraphLaunch", ts=8, corr=4, ext=5), call("cudaLaunchKernel", ts=9, corr=4, ext=5),
        call("cuGraphLaunch", ts=2, corr=5, ext=None, cat="cuda_driver"),
        gpu("void flash_fwd_kernel<128>", ts=30, corr=1),
        gpu("ncclDevKernel_AllReduce_Sum_bf16", ts=30, corr=4),  # equal starts keep file order
        gpu("elementwise_kernel", ts=29, corr=5), gpu("lamb", ts=31, corr=None),
        gpu("lambda_kernel", ts=32, corr=99),  # launched before profiling: no call
        gpu("Memcpy HtoD (Pinned -> Device)", ts=33, corr=3, cat="gpu_memcpy", bytes=64),
        gpu("Memcpy Foo (Bar -> Device)", ts=34, corr=3, cat="gpu_memcpy"),
        gpu("CopyHostToDevice", ts=35, corr=3, cat="Memcpy"),
        gpu("Memset (Device)", ts=36, corr=3, cat="gpu_memset"),
        gpu("my_kernel Memcpy DtoD (Device -> Managed)", ts=37, corr=3),
        gpu("sm90_xyz_tn_kernel", ts=38, corr=3), gpu("bmm", ts=39, corr=3),
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 2,
         "ts": 5, "dur": 40},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "forward", "pid": 0, "tid": 7,
         "ts": 5, "dur": 40},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 1, "tid": 2, "ts": 39,
         "dur": 1, "args": {"stream": 7, "correlation": 3}},
    ]
    path = tmp_path / "every_rule.json"
    write_trace(path, events)
    answers, trace = read_both_ways(path, monkeypatch)
    assert answers == [True]
    cpu = trace.cpu.filter(pl.col("kind") == "runtime")
    assert cpu["parent_op"].to_list() == ["aten::tie_b", None, None, "aten::tie_b",
                                           "aten::tie_b"]
    by_name = {row["name"]: row for row in trace.gpu.iter_rows(named=True)}
    assert by_name["void flash_fwd_kernel<128>"]["graph_launched"] is False
    assert by_name["ncclDevKernel_AllReduce_Sum_bf16"]["graph_launched"] is True
    assert by_name["lambda_kernel"]["graph_launched"] is None
    assert by_name["ncclDevKernel_AllReduce_Sum_bf16"]["category"] == "communication"
    assert by_name["Memcpy Foo (Bar -> Device)"]["copy_kind"] is None
    assert by_name["Memcpy Foo (Bar -> Device)"]["dst_kind"] == "device"
    assert by_name["CopyHostToDevice"]["copy_kind"] == "HtoD"
    assert by_name["my_kernel Memcpy DtoD (Device -> Managed)"]["src_kind"] == "device"
    assert trace.meta.extra["gpu_without_launch"] == 2
    assert trace.gpu["name"].to_list()[:3] == ["elementwise_kernel", "void flash_fwd_kernel<128>",
                                               "ncclDevKernel_AllReduce_Sum_bf16"]


@pytest.mark.parametrize("odd", [
    gpu("n\u00facleo_gemm"),  # Unicode lowercasing is Polars' business
    gpu("sm90_xmma_gemm_bf16", ts=20),  # the same five numbers as another row: maybe a copy
])
def test_declines_what_it_cannot_promise_and_polars_assembles_it(tmp_path, monkeypatch, odd):
    path = tmp_path / "odd.json"
    write_trace(path, [op(), call(), gpu(), odd])
    answers, trace = read_both_ways(path, monkeypatch)
    assert answers == [False]
    assert trace.gpu.height >= 1


def test_a_category_pattern_it_cannot_parse_is_left_to_polars(tmp_path, monkeypatch):
    monkeypatch.setattr(assemble, "KERNEL_PATTERNS",
                        (("gemm", r"gemm(?=_bf16)"), *KERNEL_PATTERNS))
    path = tmp_path / "t.json"
    write_trace(path, [op(), call(), gpu()])
    kineto_tables = []
    monkeypatch.setattr(assemble, "assemble_compiled",
                        lambda tables, meta: kineto_tables.append(tables) or None)
    read_kineto(path)
    assert assemble.compiled_frames(kineto_tables[0], 0) is None


def test_compiled_patterns_follow_the_tuple_they_are_given(tmp_path, monkeypatch):
    # The patterns are compiled once per tuple and kept for the next reads of the process.
    path = tmp_path / "t.json"
    write_trace(path, [op(), call(), gpu("xyz_kernel")])
    tables = []
    monkeypatch.setattr(assemble, "assemble_compiled",
                        lambda tables_, meta: tables.append(tables_) or None)
    read_kineto(path)

    def category(patterns) -> str:
        monkeypatch.setattr(assemble, "KERNEL_PATTERNS", patterns)
        return assemble.compiled_frames(tables[0], 0)[1]["gpu"]["category"][0]

    assert category(KERNEL_PATTERNS) == "other"
    assert category((("gemm", "xyz"), *KERNEL_PATTERNS)) == "gemm"
    assert category(KERNEL_PATTERNS) == category(KERNEL_PATTERNS) == "other"


def test_layouts_are_the_canonical_schemas():
    empty = [(layout, []) for layout in ("tllltlllttttl", "ilttlllliiiiiiill", "llttlll",
                                         "lliltlll")]
    without_launch, tables = assemble._eventassemble.assemble(
        *empty, 0, KERNEL_PATTERNS, COPY_KINDS, MEMORY_KINDS)
    assert without_launch == 0
    assert [t[1] for t in tables] == [assemble.layout(n) for n in assemble.FRAMES]
    frames = assemble.compiled_frames(empty, 0)[1]
    for name, frame in frames.items():
        assert frame.schema == FRAME_SCHEMAS[name]


def test_bad_buffers_are_an_error_not_a_crash():
    good = (1, (b"\0" * 16, b"\1", None))
    cpu_cols = [good[1], *[(b"\0" * 8, b"\1")] * 3, good[1], *[(b"\0" * 8, b"\1")] * 3,
                good[1], good[1], good[1], good[1], (b"\0" * 8, b"\1")]
    call_it = assemble._eventassemble.assemble
    rest = [("ilttlllliiiiiiill", []), ("llttlll", []), ("lliltlll", []), 0, KERNEL_PATTERNS,
            COPY_KINDS, MEMORY_KINDS]
    assert call_it(("tllltlllttttl", [(1, tuple(cpu_cols))]), *rest) is not None
    with pytest.raises(ValueError):  # a row more than its buffers hold
        call_it(("tllltlllttttl", [(2, tuple(cpu_cols))]), *rest)
    with pytest.raises(ValueError):  # not the reduction's layout
        call_it(("tlll", [(1, tuple(cpu_cols[:4]))]), *rest)
    forged = bytearray(16)
    forged[0:4] = (1000).to_bytes(4, "little")  # a long text past the end of its data
    with pytest.raises(ValueError):
        call_it(("tllltlllttttl", [(1, ((bytes(forged), b"\1", b"abc"), *cpu_cols[1:]))]), *rest)


# Random traces: names from every category pattern and copy rule, and few distinct times and
# ids, so that ties, shared ids and repeated correlations are common.
KERNELS = ["ncclKernel_x", "void nccl_y", "fmha_fwd", "softmax_warp_forward", "adam_kernel",
           "lamb", "lambda", "multi_tensor_apply_kernel", "rms_norm", "sm80_xmma_gemm",
           "sm90_abc_tn", "nvjet_tst_128x8", "mm", "a mm b", "gemv2T_kernel", "reduce_kernel",
           "vectorized_elementwise_kernel<4>", "triton_poi_fused_add_0", "unknown_kernel",
           "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)",
           "Memcpy PtoP (Device -> Device)", "Memcpy Odd (X -> Y)", "Memcpy HtoD(Device)",
           "CopyDeviceToHost", "copyhosttodevice_x", "Memset (Device)", "x" * 40 + "gemm",
           "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"]
CALLS = ["cudaLaunchKernel", "cudaGraphLaunch", "cuGraphLaunch", "CUDAGRAPHLAUNCH",
         "cudaMemcpyAsync", "hipLaunchKernel"]
small = st.integers(0, 6)
maybe = small | st.none()
times = st.sampled_from([0, 1, 2.5, 3, 1000.25])
random_gpu = st.builds(
    lambda name, cat, ts, corr, device, stream: {
        "ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": 1,
        "args": {"correlation": corr, "device": device, "stream": stream}},
    st.sampled_from(KERNELS), st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "Memcpy"]),
    times, maybe, st.sampled_from([0, 1]), st.sampled_from([7, 8]))
random_cpu = st.builds(
    lambda name, cat, ts, corr, ext: {
        "ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 2, "ts": ts, "dur": 2,
        "args": {"correlation": corr, "External id": ext}},
    st.sampled_from(CALLS + ["aten::mm", "aten::add", "aten::copy_"]),
    st.sampled_from(["cpu_op", "cuda_runtime", "cuda_driver", "python_function"]),
    times, maybe, maybe)
random_other = st.builds(
    lambda name, cat, ts: {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 2, "ts": ts,
                           "dur": 3, "args": {"stream": 7}},
    st.sampled_from(["ProfilerStep#1", "ProfilerStep#2", "fwd", "Stream Sync", "Event Sync"]),
    st.sampled_from(["user_annotation", "gpu_user_annotation", "cuda_sync"]), times)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(random_gpu | random_cpu | random_other, min_size=1, max_size=150))
def test_random_traces_assemble_as_polars(tmp_path_factory, events):
    path = tmp_path_factory.mktemp("random") / "t.json"
    write_trace(path, events)
    with pytest.MonkeyPatch.context() as mp:
        # Chunks of a few KB: the rows of a table come from several chunks' buffers.
        mp.setattr("traceanalyzer.ingest.kineto.jsonscan.DEFAULT_CHUNK_BYTES", 4 << 10)
        read_both_ways(path, mp)
