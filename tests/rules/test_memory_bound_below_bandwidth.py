"""memory-bound-below-bandwidth on small synthetic traces."""

from __future__ import annotations

import pytest

from tests.support.paths import REPO, SAMPLES
from tests.support.synth import US, Synth, run

DIMS = [[64, 1024, 1024], [64, 1024, 1024], []]
TYPES = ["c10::BFloat16", "c10::BFloat16", "Scalar"]
BYTES = 3 * 64 * 1024 * 1024 * 2  # two inputs read, one output written: 402.7 MB
#: The H200's reachable bandwidth: 90% of its 4800 GB/s datasheet figure (devices.py).
REACHABLE_GBPS = 0.9 * 4800
AT_BANDWIDTH_US = BYTES / (REACHABLE_GBPS * 1e9) * 1e6  # 93.2 µs


def build(kernel_us: float, *, dims: object = DIMS) -> Synth:
    s = Synth()
    t = 0.0
    for i in range(8):
        s.op("aten::add", t, 20, ext=200 + i, dims=dims, types=TYPES)
        s.kernel(
            "vectorized_elementwise_kernel<4, CUDAFunctor_add>",
            t + 30,
            kernel_us,
            launch=t + 5,
            ext=200 + i,
            op="aten::add",
        )
        t += kernel_us + 40
    return s


def test_fires_on_a_slow_memory_bound_kernel():
    findings, _ = run(build(600))
    f = findings["memory-bound-below-bandwidth"]
    assert f.impact_ns == pytest.approx(8 * (600 - AT_BANDWIDTH_US) * US, rel=1e-6)
    assert "1 memory-bound operator" in f.message
    assert "the 4320 GB/s that streaming kernels reach" in f.message
    assert "(4800 GB/s on its datasheet)" in f.message
    gbps = BYTES / 600e-6 / 1e9
    assert f"at {gbps:.0f} GB/s ({100 * gbps / REACHABLE_GBPS:.0f}%)" in f.message  # 16%
    assert f.evidence[0]["op_class"] == "elementwise"


def test_quiet_near_bandwidth_and_threshold_changes_the_verdict():
    assert "memory-bound-below-bandwidth" not in run(build(100))[0]  # 93% of reachable
    assert "memory-bound-below-bandwidth" not in run(build(150))[0]  # 62%
    over = {"memory-bound-below-bandwidth": {"max_bandwidth_pct": 90}}
    assert "memory-bound-below-bandwidth" in run(build(150), **over)[0]


def test_judged_against_the_reachable_bandwidth_not_the_datasheet():
    # 100 µs: 4027 GB/s, 84% of the datasheet's 4800 but 93% of the 4320 a copy reaches.
    over = {"memory-bound-below-bandwidth": {"max_bandwidth_pct": 99, "min_impact_pct": 0}}
    f = run(build(100), **over)[0]["memory-bound-below-bandwidth"]
    assert f.impact_ns == pytest.approx(8 * (100 - AT_BANDWIDTH_US) * US, abs=1)
    assert f.evidence[0]["bandwidth_pct"] == pytest.approx(100 * AT_BANDWIDTH_US / 100, abs=1e-3)
    # 90 µs: 4474 GB/s, beyond what a copy reaches: nothing to lose, whatever the threshold.
    over = {"memory-bound-below-bandwidth": {"max_bandwidth_pct": 100, "min_impact_pct": 0}}
    assert "memory-bound-below-bandwidth" not in run(build(90), **over)[0]


def test_not_applicable_without_shapes():
    _, outcomes = run(build(600, dims=None))
    assert outcomes["memory-bound-below-bandwidth"].status == "not_applicable"


def _detect(path):
    """The rule's detection on a recorded trace, over its steps (None: quiet)."""
    import yaml

    import traceanalyzer
    from traceanalyzer.analysis.views import Views
    from traceanalyzer.analysis.window import choose_window, parse_window
    from traceanalyzer.rules.detectors.memory_bound_below_bandwidth import (
        memory_bound_below_bandwidth,
    )

    if not path.is_file():
        pytest.skip(f"{path.name} is not in this checkout")
    rule = yaml.safe_load((REPO / "rules" / "memory-bound-below-bandwidth.yaml").read_text())
    params = {k: v["default"] for k, v in rule["parameters"].items()}
    trace = choose_window(traceanalyzer.load(path, use_cache=False), parse_window("steps"))
    return memory_bound_below_bandwidth(Views(trace), params)


def test_fires_on_a_strided_add_and_not_on_the_same_add_made_contiguous():
    """The same-program pair recorded on the H200 (sample_traces/README.md, strided_elementwise):
    a bf16 add of two 8192 x 8192 tensors whose second operand is a transposed view runs at
    866 GB/s, 20% of the 4320 GB/s a copy reaches; transposed once before the steps it is fast."""
    bad = _detect(SAMPLES / "torch" / "strided_elementwise_bad.json.gz")
    assert bad is not None
    assert bad.fields["top_op"] == "aten::add" and bad.fields["op_count"] == 1
    assert bad.fields["top_shape"] == "[[8192, 8192], [8192, 8192], []]"
    assert 15 < bad.fields["top_bandwidth_pct"] < 25
    assert _detect(SAMPLES / "torch" / "strided_elementwise_good.json.gz") is None


#: PyTorch's strided TensorIterator kernel for a bf16 add of two tensors (as demangled in the
#: H200 traces): 128 threads a block, 4 elements each.
STRIDED_ADD = (
    "void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast"
    "<at::native::CUDAFunctor_add<c10::BFloat16>>(at::TensorIteratorBase &, const T1 &)::"
    "[lambda(int) (instance 1)]>(int, T3)"
)


def build_unshaped(kernel_us: float, name: str = STRIDED_ADD) -> Synth:
    """The adds of :func:`build` without shapes, as Nsight Systems records them: the kernel
    name and its grid (64 x 1024 x 1024 elements over 128 x 4 a block)."""
    s = Synth()
    t = 0.0
    for _ in range(8):
        s.kernel(
            name,
            t + 30,
            kernel_us,
            launch=t + 5,
            grid=(64 * 1024 * 1024 // 512, 1, 1),
            block=(128, 1, 1),
        )
        t += kernel_us + 40
    return s


#: The same kernel as torch.profiler's CUPTI demangles it.
STRIDED_ADD_KINETO = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<"
    "c10::BFloat16> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<"
    "at::native::CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::"
    "CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1})"
)


@pytest.mark.parametrize("name", [STRIDED_ADD, STRIDED_ADD_KINETO], ids=["nsys", "kineto"])
def test_without_shapes_a_strided_kernel_is_judged_by_its_grid(name: str) -> None:
    # The same bytes as the shaped test: 3 operands of 64 Mi bf16 elements.
    findings, _ = run(build_unshaped(600, name))
    f = findings["memory-bound-below-bandwidth"]
    assert f.impact_ns == pytest.approx(8 * (600 - AT_BANDWIDTH_US) * US, rel=1e-6)
    assert f.evidence[0]["op"] == "CUDAFunctor_add<c10::BFloat16> (strided elementwise kernel)"
    assert f.evidence[0]["mbytes"] == pytest.approx(8 * BYTES / 1e6)
    assert "memory-bound-below-bandwidth" not in run(build_unshaped(100, name))[0]


def test_without_shapes_unknown_functors_and_vectorized_kernels_are_not_judged():
    # A functor whose operand count the name does not give (a where of three tensors here),
    # and the contiguous path's vectorized kernel: neither is judged, however slow.
    where = STRIDED_ADD.replace(
        "at::native::CUDAFunctor_add<c10::BFloat16>", "at::native::where_kernel_impl<c10::BFloat16>"
    )
    vectorized = (
        "void at::native::vectorized_elementwise_kernel<(int)8, at::native::"
        "CUDAFunctor_add<c10::BFloat16>, std::array<char *, (unsigned long)3>>(int, T2, T3)"
    )
    for name in (where, vectorized):
        _, outcomes = run(build_unshaped(600, name))
        assert outcomes["memory-bound-below-bandwidth"].status == "quiet", name


def test_fires_under_nsight_systems_on_the_strided_add_only():
    """The strided_elementwise pair under Nsight Systems (no shapes): 891 GB/s from the grid,
    against 866 GB/s from the torch.profiler trace's shapes."""
    bad = _detect(SAMPLES / "nsys" / "strided_elementwise_bad.sqlite")
    assert bad is not None and bad.fields["op_count"] == 1
    assert bad.fields["top_op"].startswith("CUDAFunctor_add<c10::BFloat16>")
    assert 15 < bad.fields["top_bandwidth_pct"] < 25
    assert _detect(SAMPLES / "nsys" / "strided_elementwise_good.sqlite") is None
