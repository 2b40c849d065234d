"""Kernel categories on real kernel names: each name below was recorded in a trace of the kind
its comment says (the repository's H200 traces, the public A100/V100/H100/MI250/vLLM traces,
torchrec and FBGEMM kernels), with the category it must get. The same patterns run in C at
ingest (tests/ingest/kineto/test_regexlite.py checks the two matchers agree on these names too)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from traceanalyzer.categories import KERNEL_PATTERNS, kernel_category
from traceanalyzer.ingest.kineto import assemble as eventassemble

CASES: list[tuple[str, str]] = [
    # --- not GEMMs, though their names say fbgemm (torchrec / FBGEMM, A100 DLRM trace) --------
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)", "elementwise"),
    ("void fbgemm_gpu::permute_indices_weights_kernel<true, int, float>(int, int, int, int const*, "
     "float const*, int const*, int const*, int const*, int*, float*)", "elementwise"),
    ("void fbgemm_gpu::_offsets_range_cuda_kernel<long>(long, long, long const*, long*)", "elementwise"),
    ("void fbgemm_gpu::permute_2D_data_kernel<true, int, int, float>(int, int, int, int const*, "
     "float const*, int const*, int const*, int*, float*)", "elementwise"),
    ("void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, "
     "float*, long, long, long)", "elementwise"),
    ("void recat_copy_async_kernel<float>(long const*, long const*, float const*, float*, long, long, long)",
     "elementwise"),
    ("split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 2ul>"
     "(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)", "embedding"),
    ("split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<float, float, "
     "float, 2ul>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)", "embedding"),
    ("split_embedding_backward_codegen_adam_unweighted_kernel_warp_per_row_1<float, float, float, 1ul>"
     "(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)", "embedding"),
    # the rest of torchrec's table-batched embedding (the V100/A100 DLRM traces) and nn.Embedding's
    # backward (the held-out GPT traces): embedding lookups, gathers with a segment sum
    ("void split_embedding_codegen_grad_indice_weights_kernel<float, float, float, 1ul>"
     "(at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, int>)", "embedding"),
    ("split_embedding_backward_codegen_rowwise_adagrad_weighted_find_long_segments"
     "(at::GenericPackedTensorAccessor<int, 1ul, at::RestrictPtrTraits, int>)", "embedding"),
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>"
     "(long const*, float const*, float*, int, long, int)", "embedding"),
    ("bounds_check_indices_kernel<long>(at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>)",
     "elementwise"),
    ("void at::to_dense_representation_kernel<float>(long, long, long const*, float const*, long const*, float*)",
     "elementwise"),
    # FP8 quantization (FBGEMM's Triton kernel, vLLM's CUDA one): elementwise, not matrix math
    ("_kernel_quantize_fp8_row", "elementwise"),
    ("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>"
     "(c10::Float8_e4m3fn*, float*, c10::BFloat16 const*, float const*, int)", "elementwise"),
    # cuDNN kernels that take a cudnn::reduced_divisor argument are not reductions (HTA's AlexNet
    # trace, the held-out image-inference run); its layout changes are copies
    ("void fft2d_c2r_32x32<float, false, false, 0u, false, false>(float*, float2 const*, int, int, int, "
     "int, int, int, int, int, int, float, float, cudnn::reduced_divisor, bool, float*, float*, int2, "
     "int, int)", "gemm"),
    ("void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int, int, int, int, int, int, "
     "int, int, int, cudnn::reduced_divisor, bool, int2, int, int)", "gemm"),
    ("void nhwcAddPaddingKernel<__nv_bfloat16, __nv_bfloat16, float, true, (cudnnKernelDataType_t)0>(int, "
     "int, int, int, int, int, int, int, __nv_bfloat16 const*, __nv_bfloat16*, int, int, int, int, float, "
     "float, cudnn::reduced_divisor, cudnn::reduced_divisor, cudnn::reduced_divisor)", "elementwise"),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
     "(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", "elementwise"),
    ("void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float, true, false, "
     "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, __nv_bfloat16 "
     "const*, __nv_bfloat16*)", "elementwise"),
    # a binary search per element (the A100 DLRM trace), not a sort or a reduction
    ("void at::native::(anonymous namespace)::searchsorted_cuda_kernel<float, long>(long*, float const*, "
     "float const*, long const*, long, long, long, bool, bool)", "other"),
    ("void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int, int)",
     "reduction"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, float, int>::Policy800, "
     "false, long, float, int, int>(int*, int*, long const*, long*, float const*, float*, int, int, int)",
     "reduction"),
    # --- GEMMs ------------------------------------------------------------------------------------
    ("_kernel_matmul_fp8_row", "gemm"),
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "gemm"),
    ("volta_sgemm_128x32_nt", "gemm"),
    ("ampere_sgemm_128x64_nn", "gemm"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>"
     "(cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4::Params)", "gemm"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_ISA90a", "gemm"),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, "
     "false, false, cublasGemvParamsEx<int>>(cublasGemvParamsEx<int>)", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>"
     "(cublasLt::cublasSplitKParams<float>)", "gemm"),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "gemm"),
    # convolutions (implicit GEMM, cuDNN's Volta/Ampere kernels, Winograd): matrix math
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1"
     "_execute_segment_k_off_kernel__5x_cudnn", "gemm"),
    ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "gemm"),
    ("cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1", "gemm"),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>"
     "(cudnn::winograd_nonfused::WinogradDataParams<float, float>)", "gemm"),
    ("void wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, float*)",
     "gemm"),
    # --- attention --------------------------------------------------------------------------------
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
     "false, cutlass::bfloat16_t>>(pytorch_flash::Flash_fwd_params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     "attention"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "attention"),
    ("kernel_unified_attention_2d", "attention"),
    ("void ck_tile::kentry<1, ck_tile::FmhaFwdKernel<float>, ck_tile::FmhaFwdKernel<float>::Kargs>"
     "(ck_tile::FmhaFwdKernel<float>::Kargs)", "attention"),
    # softmax: a row reduction, in attention or in a loss alike
    ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, true, "
     "false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)", "reduction"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
     "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
     "reduction"),
    # --- communication ----------------------------------------------------------------------------
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "communication"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "communication"),
    ("void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 16, 4>(c10::BFloat16*, "
     "unsigned long, unsigned long, unsigned long)", "communication"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
     "vllm::Signal*, __nv_bfloat16*, int, int)", "communication"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)", "communication"),
    # --- norm, reduction, optimizer, elementwise ----------------------------------------------------
    # cuDNN's batch norm (HTA's ns-resolution ResNet trace, V100): bn_fw_tr_*, bn_bw_*
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float, float, "
     "cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, "
     "float const*, float*, float*, float const*, float const*, float)", "norm"),
    ("void cudnn::bn_bw_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_bw_1C11_args<float>)", "norm"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, "
     "float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, "
     "float*, float*, float, float)", "norm"),
    ("void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_fw_tr_1C11_args<float>)", "norm"),
    ("void at::native::batch_norm_backward_elemt_channels_last_kernel<4, c10::BFloat16, float, float>"
     "(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, float const*, float const*, "
     "float const*, c10::BFloat16*, int, int)", "norm"),
    # cuDNN's convolution backward-data engine (same trace): a convolution, matrix math
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, "
     "float const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, "
     "float, int, int, int)", "gemm"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>"
     "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
     "c10::BFloat16*)", "norm"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u, 32u, "
     "256u, false, true, false>(long, long, float const*, float const*, float const*, float const*, float*, "
     "float*)", "norm"),
    ("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassE", "norm"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
     "at::native::NormTwoOps<c10::BFloat16, float, c10::BFloat16>, unsigned int, c10::BFloat16, 4, 4> >"
     "(at::native::ReduceOp<c10::BFloat16, at::native::NormTwoOps<c10::BFloat16, float, c10::BFloat16>, "
     "unsigned int, c10::BFloat16, 4, 4>)", "reduction"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::BFloat16, int>(c10::BFloat16 "
     "const*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, c10::BFloat16*, "
     "long*)", "reduction"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)"
     "::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
     "(at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, "
     "float*>(long, at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>)", "optimizer"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, "
     "float, float, adamMode_t, float, int, int>(int, int volatile*, TensorListMetadata<4>)", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
     "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", "elementwise"),
    ("triton_poi_fused__to_copy_add_mul_0", "elementwise"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "reduction"),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, "
     "c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)", "elementwise"),
]


def categorize(names: list[str]) -> list[str]:
    return pl.DataFrame({"name": names}).select(kernel_category(pl.col("name")).alias("c"))["c"].to_list()


@pytest.mark.parametrize(("name", "expected"), CASES, ids=[n[:60] for n, _ in CASES])
def test_real_kernel_names_get_their_category(name, expected):
    assert categorize([name]) == [expected]


@pytest.mark.skipif(not eventassemble.AVAILABLE, reason="the C assembly is not built")
def test_the_c_matcher_agrees_on_these_names():
    lowered = [n.lower() for n, _ in CASES]
    for _, pattern in KERNEL_PATTERNS:
        ours = eventassemble._eventassemble.search(pattern, lowered)
        assert ours is not None, f"the C matcher refuses {pattern!r}"
        assert ours == pl.Series(lowered).str.contains(pattern).to_list(), pattern


# --- on the traces that hold them: no cuDNN batch norm left uncategorised, no TBE kernel an
# elementwise op (which unfused-elementwise-chain would count as fusable) -----------------------

_PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "public" / "kineto"
BATCH_NORM_TRACES = [p for p in (_PUBLIC / "hta_ns_resolution.json.gz",) if p.exists()]
TBE_TRACES = [p for p in (_PUBLIC / "hta_v100_rank_of2_test.json.gz",
                          _PUBLIC / "hta_a100_rank3of8_control.json.gz") if p.exists()]


@pytest.mark.skipif(not BATCH_NORM_TRACES, reason="public traces absent")
@pytest.mark.parametrize("path", BATCH_NORM_TRACES, ids=lambda p: p.name)
def test_cudnn_batch_norm_kernels_are_norms_in_the_trace(path):
    from traceanalyzer import load

    gpu = load(path, use_cache=False).gpu
    bn = gpu.filter(pl.col("name").str.contains(r"cudnn::bn_(fw|bw)_"))
    assert bn.height > 0
    assert set(bn["category"].cast(pl.String).unique()) == {"norm"}
    # Nor is any of the trace's convolution backward kernels left as "other".
    dgrad = gpu.filter(pl.col("name").str.contains("dgrad_engine"))
    assert dgrad.height > 0 and set(dgrad["category"].cast(pl.String).unique()) == {"gemm"}


@pytest.mark.skipif(not TBE_TRACES, reason="public traces absent")
@pytest.mark.parametrize("path", TBE_TRACES, ids=lambda p: p.name)
def test_table_batched_embedding_kernels_are_embeddings_in_the_trace(path):
    from traceanalyzer import analyze

    result = analyze(path, use_cache=False)
    kernels = result.kernels
    tbe = kernels.filter(pl.col("name").str.contains("split_embedding"))
    assert tbe.height > 0
    assert set(tbe["category"].cast(pl.String).unique()) == {"embedding"}
    cats = {r["category"] for r in result.categories.to_dicts()}
    assert "embedding" in cats
    for finding in result.findings:
        if finding.slug == "unfused-elementwise-chain":
            assert finding.evidence and not any(
                "split_embedding" in str(row.get("kernel_names")) for row in finding.evidence)
