"""Kernel categories from kernel names, as a Polars expression shared by every ingestor.

The patterns are checked in order and the first match wins, so the more specific families
(communication, attention, optimizer) come before the generic ones (gemm, elementwise).
``tests/test_categories.py`` holds real kernel names from every kind of trace the project has
with the category each must get; the C reader compiles the same patterns (``_regexlite.h``'s
subset: no look-around), so an exclusion is written as a character class (``fbgemm`` is not a
GEMM: ``(^|[^b]|[^f]b)gemm``; torchrec's fused embedding backward ``..._codegen_adam_...`` is
not an optimizer step: ``(^|[^_]|[^n]_)adam``).
Communication follows HTA's convention (``^nccl``, ``ncclKernel``, ``ncclDevKernel``, ``^hccl``,
``^rccl``) so that communication time agrees with HTA on the same trace.
"""

from __future__ import annotations

import polars as pl

# (category, case-insensitive regex). Order matters: first match wins. Classes are ASCII
# (``[0-9]``, ``(?-u:\b)``): Unicode ones cost milliseconds to compile in every process, and a
# Unicode ``\b`` keeps the regex engine off its fast path for every name.
KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    ("communication", r"^nccl|ncclkernel|nccldevkernel|^hccl|^rccl|^void nccl|cross_device_reduce|all_?reduce_kernel|allgather|reduce_?scatter|all_?to_?all|alltoall|deep_ep"),
    ("attention", r"flash|fmha|attention|attn|sdpa|mha_|_mha|xformers|cutlass.*mem_eff"),
    # Embedding lookups and their backward: torchrec/FBGEMM's table-batched kernels
    # (split_embedding_*: a gather and a pooled sum per bag, the backward with its fused
    # optimizer update), EmbeddingBag and nn.Embedding's backward. Gathers and segment sums,
    # neither pointwise (they do not fuse into an elementwise chain) nor matrix math.
    ("embedding", r"split_embedding|embedding_bag|embeddingbag|embedding_backward|embedding_dense|batched_embedding|embedding_forward|embedding_codegen|^tbe_"),
    ("optimizer", r"(^|[^_]|[^n]_)adam|(^|[^_]|[^n]_)sgd_|lamb([^d]|$)|_foreach_|multi_tensor_apply|fused_optimizer|optimizer|rmsprop"),
    # cuDNN's batch norm kernels are named bn_fw_tr_*, bn_fw_inf_*, bn_bw_* (cudnn::bn_bw_1C11...).
    ("norm", r"norm([^iot]|$)|rms|welford|gammabeta|(^|[^a-z0-9])bn_(fw|bw)_"),
    # Convolutions count as matrix math: implicit GEMM, Winograd, and cuDNN's FFT convolution
    # (fft2d_r2c/fft2d_c2r around a complex GEMM).
    ("gemm", r"(^|[^b]|[^f]b)gemm|nvjet|matmul|xmma|cutlass|cublas|sm[0-9]+_.*_tn|sm[0-9]+_.*_nt|wgmma|gemv|dot_kernel|_mm_|bmm|hipblaslt|tensile|^cijk_|(?-u:\b)mm(?-u:\b)|triton_tem|scudnn|winograd|wgrad_alg|dgrad_engine|dgrad_alg|dgrad2d|(^|[^a-z])fft[123]d_[rc]2[rc]"),
    # Not cuDNN's ``reduced_divisor`` argument (its FFT and padding kernels take one), nor
    # searchsorted (a binary search per element).
    ("reduction", r"reduce([^d]|d[^_]|d?$)|reduction|sum_kernel|argmax|argmin|cumsum|scan|topk|(^|[^h])sort|triton_red|triton_per|softmax|max_?pool|avg_?pool|average_?pool"),
    # cuDNN's layout changes (nchwToNhwc, nhwcToNchw, nhwcAddPadding) are copies.
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|triton_poi|copy|fill|nchwtonhwc|nhwctonchw|nhwcaddpadding|cat_?array|catarray|index|gather|scatter|where|gelu|silu|relu|sigmoid|tanh|dropout|add|mul|div|sub|exp|cast|neg|clamp|pow|sqrt|distribution|embedding|swiglu|permute|transpose|bucketize|jagged|quant|fbgemm|offsets_range|bounds_check|to_dense"),
)


def kernel_category(name: pl.Expr) -> pl.Expr:
    """Category of a kernel from its name, as a String expression ('other' when nothing matches)."""
    lowered = name.str.to_lowercase()
    expr: pl.Expr = pl.lit("other")
    for category, pattern in reversed(KERNEL_PATTERNS):
        expr = pl.when(lowered.str.contains(pattern)).then(pl.lit(category)).otherwise(expr)
    return expr


def activity_category(kind: pl.Expr, name: pl.Expr) -> pl.Expr:
    """Category of any GPU activity: memcpy and memset by kind, kernels by name."""
    return (
        pl.when(kind == "memcpy")
        .then(pl.lit("memcpy"))
        .when(kind == "memset")
        .then(pl.lit("memset"))
        .otherwise(kernel_category(name))
    )
