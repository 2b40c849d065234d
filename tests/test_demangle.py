"""The pure-Python demangler against c++filt's answers on real kernel names (ROCm CK and
PyTorch's lambda kernels, cuDNN's CUTLASS convolutions) and on names g++ mangled."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer.categories import kernel_category
from traceanalyzer.demangle import demangle, demangled, display_name

#: mangled name <TAB> what ``c++filt --no-recurse-limit`` prints (binutils 2.42).
TABLE = Path(__file__).parent / "support" / "mangled_kernel_names.tsv"
CASES = [tuple(line.split("\t")) for line in TABLE.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(("mangled", "expected"), CASES, ids=[m[:48] for m, _ in CASES])
def test_demangles_as_cxxfilt_does(mangled, expected):
    assert demangle(mangled) == expected


def test_a_rocm_composable_kernel_name():
    # vLLM's RMSNorm on an MI300 (Composable Kernel's ck_tile), as the ROCm profiler records it.
    name = next(m for m, _ in CASES if m.startswith("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwd"))
    text = demangle(name)
    assert text.startswith("void ck_tile::kentry<1, ck_tile::Rmsnorm2dFwd<ck_tile::Rmsnorm2dFwdPipeline")
    assert "std::bfloat16_t" in text and "(ck_tile::Rmsnorm2dFusedAddEnum)" in text
    assert text.endswith("::Kargs)")


@pytest.mark.parametrize("name", [
    "ampere_sgemm_128x64_nn",  # not mangled
    "_Z", "_ZN", "_ZN3foo", "_Z3fooILi1E", "_Z999foo", "_Z3fooS5_",  # cut short or broken
    "_ZN3FooC1Ev",  # a constructor: outside the subset
    "_Z" + "N3foo" * 5000 + "E",  # too long
])
def test_what_it_cannot_read_stays_as_recorded(name):
    assert demangle(name) is None
    assert display_name(name) == name


def test_the_column_helper_keeps_other_names_and_nulls():
    names = pl.DataFrame({"name": ["_Z5plainPfPKfl", "nvjet_sm90_tst_128x8", None, "_Zbroken"]})
    out = names.select(demangled(pl.col("name")))["name"].to_list()
    assert out == ["plain(float*, float const*, long)", "nvjet_sm90_tst_128x8", None, "_Zbroken"]


def test_demangled_names_get_the_category_of_what_they_are():
    pairs = {m: e for m, e in CASES}
    frame = pl.DataFrame({"name": list(pairs.values())}).with_columns(
        category=kernel_category(pl.col("name")))
    cats = dict(frame.iter_rows())
    assert {cats[e] for m, e in pairs.items() if "Rmsnorm2dFwd" in m} == {"norm"}
    assert {cats[e] for m, e in pairs.items() if "ImplicitGemmConvolution" in m} == {"gemm"}
    assert {cats[e] for m, e in pairs.items() if "FmhaFwdKernel" in m} == {"attention"}
    assert {cats[e] for m, e in pairs.items() if "vectorized_elementwise_kernel" in m} == {"elementwise"}


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt is not installed")
def test_the_table_is_what_cxxfilt_prints():
    mangled = [m for m, _ in CASES]
    out = subprocess.run(["c++filt", "--no-recurse-limit", *mangled], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == [e for _, e in CASES]


def test_a_gpu_frame_gets_demangled_names_and_their_categories():
    from traceanalyzer.demangle import demangle_gpu
    from traceanalyzer.model import conform

    fmha = "_ZN7ck_tile6kentryILi2ENS_13FmhaFwdKernelIfEEJNS2_5KargsEiEEEvDpT1_"
    gpu = conform(pl.DataFrame({
        "rank": [0, 0, 0], "device": [0, 0, 0], "stream": [1, 1, 1],
        "kind": ["kernel", "kernel", "memcpy"], "name": [fmha, "nvjet_sm90_tst", "Memcpy HtoD"],
        "category": ["other", "gemm", "memcpy"], "start_ns": [0, 10, 20], "end_ns": [5, 15, 25],
    }), "gpu")
    out = demangle_gpu(gpu)
    assert out.schema == gpu.schema and out.height == 3
    assert out["name"].to_list()[0].startswith("void ck_tile::kentry<2, ck_tile::FmhaFwdKernel<float>")
    assert out["category"].cast(pl.String).to_list() == ["attention", "gemm", "memcpy"]
    assert out["name"].to_list()[1:] == ["nvjet_sm90_tst", "Memcpy HtoD"]
    plain = gpu.filter(pl.col("kind") == "memcpy")
    assert demangle_gpu(plain) is plain
