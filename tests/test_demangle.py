"""The pure-Python demangler against c++filt's answers on real kernel names (ROCm CK and
PyTorch's lambda kernels, cuDNN's CUTLASS convolutions) and on names g++ mangled."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from tests.support.paths import PUBLIC
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


def test_demangled_names_are_stored_once_and_match_per_row_demangling():
    """The names and categories are worked out per distinct name and gathered by row: the
    result is what demangling each row gives, and the names' data is one copy of each."""
    from tests.support.texts import text_data_bytes
    from traceanalyzer.categories import kernel_category
    from traceanalyzer.demangle import demangle_gpu, display_name
    from traceanalyzer.model import conform

    mangled = [m for m, _ in CASES][:6]
    names = [None if i % 11 == 0 else mangled[i % len(mangled)] if i % 3 else "plain_kernel_name"
             for i in range(3_000)]
    gpu = conform(pl.DataFrame({
        "rank": 0, "device": 0, "stream": 1, "kind": ["kernel" if i % 13 else "memcpy"
                                                      for i in range(len(names))],
        "name": names, "category": "other", "start_ns": range(len(names)),
        "end_ns": range(1, len(names) + 1),
    }), "gpu")
    out = demangle_gpu(gpu)
    expected = [display_name(n) if n else None for n in names]
    assert out["name"].to_list() == expected
    assert out["mangled_name"].to_list() == [n if n and display_name(n) != n else None
                                             for n in names]
    kernels = out.filter(pl.col("kind") == "kernel", pl.col("mangled_name").is_not_null())
    assert kernels["category"].cast(pl.String).to_list() == kernels.select(
        kernel_category(pl.col("name"))).to_series().to_list()
    assert out.filter(pl.col("kind") == "memcpy")["category"].cast(pl.String).unique().to_list() \
        == ["other"]
    distinct = int(out["name"].drop_nulls().unique().str.len_bytes().sum())
    assert text_data_bytes(out["name"]) <= distinct + 64


# -- at ingest, on real traces ---------------------------------------------------------------

ROCM_VLLM = PUBLIC / "kineto" / "tracelens_vllm_decode_cudagraph.json.gz"  # MI300X, vLLM decode
ROCM_MI250 = PUBLIC / "kineto" / "hta_mi250_rocm.json.gz"


@pytest.mark.skipif(not ROCM_VLLM.exists(), reason="public traces absent")
def test_rocm_kernel_names_are_demangled_at_ingest_and_keep_the_recorded_name():
    import traceanalyzer

    trace = traceanalyzer.load(ROCM_VLLM, use_cache=False)
    trace.validate()
    gpu = trace.gpu.filter(pl.col("kind") == "kernel")
    assert gpu.filter(pl.col("name").str.starts_with("_Z")).height == 0
    renamed = gpu.filter(pl.col("mangled_name").is_not_null())
    assert renamed.height == 49  # the ck_tile RMSNorm kernels, all of them
    assert renamed["mangled_name"].str.starts_with("_ZN7ck_tile6kentry").all()
    assert renamed["name"].str.starts_with("void ck_tile::kentry<1, ck_tile::Rmsnorm2dFwd<").all()
    assert set(renamed["category"].cast(pl.String)) == {"norm"}  # judged on the readable name
    # Every other kernel keeps its name, and no mangled_name.
    assert gpu.filter(pl.col("mangled_name").is_null()).height == gpu.height - 49


@pytest.mark.skipif(not ROCM_MI250.exists(), reason="public traces absent")
def test_a_rocm_trace_recorded_demangled_is_left_as_it_is():
    import traceanalyzer

    trace = traceanalyzer.load(ROCM_MI250, use_cache=False)
    assert trace.gpu["mangled_name"].is_null().all()
    assert trace.gpu.filter(pl.col("kind") == "kernel")["name"].str.starts_with("Cijk_").any()


def test_the_kineto_reader_demangles_names_once_per_distinct_name(tmp_path, monkeypatch):
    import json

    import traceanalyzer
    from traceanalyzer import demangle as module

    fmha = "_ZN7ck_tile6kentryILi2ENS_13FmhaFwdKernelIfEEJNS2_5KargsEiEEEvDpT1_"
    events = [{"ph": "X", "cat": "kernel", "name": fmha, "pid": 0, "tid": 7, "ts": 10.0 * i,
               "dur": 5.0, "args": {"device": 0, "stream": 7, "correlation": i}}
              for i in range(50)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    calls = []
    real = module.demangle.__wrapped__
    monkeypatch.setattr(module, "demangle", lambda n: calls.append(n) or real(n))
    gpu = traceanalyzer.load(path, use_cache=False).gpu
    assert calls == [fmha]
    assert gpu["category"].cast(pl.String).unique().to_list() == ["attention"]
    assert gpu["mangled_name"].unique().to_list() == [fmha]
