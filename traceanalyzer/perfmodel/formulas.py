"""FLOPs and bytes of one operator call from its recorded shapes and dtypes (docs/perf-model.md).

Everything works on the *distinct signatures* of a trace, (name, input_dims, input_types): a
training step repeats a few hundred of them thousands of times, so the formulas run once per
signature as Polars expressions, never once per event.

Two kinds of operator are modelled:

- **Model-FLOP operators** (:data:`FLOP_OPS`): matrix multiplies, attention and convolution,
  counted at the level ``torch.utils.flop_counter.FlopCounterMode`` counts them (``aten::mm``,
  not the ``aten::linear`` or ``aten::matmul`` around it), forward and backward. Their FLOPs are
  the model FLOPs of MFU.
- **Memory operators** (norms, softmax, cross-entropy, embedding, reductions, copies,
  elementwise): counted at the innermost operator that launched the kernel; their bytes are an
  estimate of the HBM traffic (inputs read, output written) and their FLOPs a small count per
  element that never enters ``flops_per_step``.
"""

from __future__ import annotations

import polars as pl

#: Bytes per element of each Kineto ``Input type``; anything else (Scalar, ScalarList, "",
#: TensorList) is not a tensor and moves no bytes here.
ELEMENT_BYTES: dict[str, int] = {
    "double": 8,
    "float": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::complex<float>": 8,
}
#: Which peak an operator's first tensor input selects (devices.Peaks field names).
PRECISION: dict[str, str] = {
    "c10::BFloat16": "bf16",
    "c10::Half": "bf16",
    "float": "fp32",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
}

#: Kernel names that say an FP32 operator ran on TF32 tensor cores (docs/perf-model.md,
#: "TF32"). torch's ``allow_tf32`` is not in the trace: the kernel's name is the evidence.
#: - ``tf32``: cuBLAS's and cuDNN's xmma kernels name their math type
#:   (``sm80_xmma_gemm_f32f32_tf32f32_f32_...``, ``..._fprop_implicit_gemm_..._tf32f32_...``);
#: - ``tensorop_s1688`` / ``s16816``: CUTLASS's single-precision tensor-op GEMMs, whose
#:   16x8x8 and 16x8x16 MMA shapes take 32-bit operands only as TF32 (an A100 trace's
#:   ``cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4``);
#: - ``nvjet`` / ``wgmma`` / ``gmma``: Hopper-and-later cuBLASLt and CUTLASS 3 kernels, which run
#:   on warpgroup MMA, and wgmma has no FP32 operand type (PTX ISA: f16, bf16, tf32, e4m3/e5m2,
#:   s8/u8), so a float32 GEMM in one is TF32. On the H200 with TF32 off, cuBLAS ran
#:   ``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`` and ``cutlass_80_simt_sgemm_...``
#:   (gpt_fp32_torch, bert_fp32_train), never nvjet.
TF32_KERNEL = r"(?i)tf32|tensorop_s1688|tensorop_s16816|s1688gemm|s16816gemm|nvjet|wgmma|gmma"
#: ...and names that say FP32 on the CUDA cores (``ffma``, SIMT, sgemm) or FP32 emulated with
#: three TF32 products (``3xtf32``, the FP32-accurate path), which override the above.
FP32_KERNEL = r"(?i)3xtf32|ffma|simt|sgemm"


def kernel_precision(precision: pl.Expr, kernel: pl.Expr) -> pl.Expr:
    """The precision a kernel ran at: ``tf32`` for a ``fp32`` operator's kernel whose name says
    TF32 tensor cores (:data:`TF32_KERNEL`, not :data:`FP32_KERNEL`), else the operator's."""
    tf32 = (
        (precision == "fp32") & kernel.str.contains(TF32_KERNEL) & ~kernel.str.contains(FP32_KERNEL)
    )
    return pl.when(tf32).then(pl.lit("tf32")).otherwise(precision)


#: Matrix multiplies: name -> (position of A, position of B, batched).
GEMM_OPS: dict[str, tuple[int, int, bool]] = {
    "aten::mm": (0, 1, False),
    "aten::addmm": (1, 2, False),
    "aten::_scaled_mm": (0, 1, False),
    "aten::_addmm_activation": (1, 2, False),
    "aten::bmm": (0, 1, True),
    "aten::baddbmm": (1, 2, True),
}
_ATTENTION = (
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_fused_attention_overrideable",
)
#: Fused attention, forward: q, k, v are inputs 0, 1, 2 ([B, H, S, D]).
ATTENTION_FWD = frozenset(_ATTENTION)
#: Fused attention, backward: grad_out, q, k, v are inputs 0, 1, 2, 3.
ATTENTION_BWD = frozenset(f"{n}_backward" for n in _ATTENTION)
#: Where ``is_causal`` is among each fused attention op's arguments (its ``Concrete Inputs``
#: position, from the signatures in ATen's native_functions.yaml; checked against the H200
#: traces' cuDNN forward, index 6, and backward, index 14).
IS_CAUSAL_AT: dict[str, int] = {
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_flash_attention_backward": 11,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_efficient_attention_backward": 11,
    "aten::_scaled_dot_product_cudnn_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention_backward": 14,
    "aten::_scaled_dot_product_fused_attention_overrideable": 5,
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": 13,
}
CONV_FWD = frozenset({"aten::convolution"})
CONV_BWD = frozenset({"aten::convolution_backward"})
FLOP_OPS = frozenset(GEMM_OPS) | ATTENTION_FWD | ATTENTION_BWD | CONV_FWD | CONV_BWD
#: The classes whose FLOPs are model FLOPs (flops_per_step).
FLOP_CLASSES = ("gemm", "attention", "conv")

#: Memory operators by name (checked in order; the first match wins), and what they cost.
_MEMORY_CLASSES: tuple[tuple[str, str], ...] = (
    ("norm", r"(layer|rms|batch|group|instance)_norm"),
    ("softmax", r"softmax"),
    ("cross_entropy", r"nll_loss|cross_entropy"),
    ("embedding", r"embedding"),
    (
        "reduction",
        r"^aten::(sum|mean|amax|amin|max|min|norm|linalg_vector_norm|var|std|"
        r"var_mean|prod|argmax|argmin|cumsum|logsumexp|all|any)$",
    ),
    ("optimizer", r"_foreach_|_fused_adam|_fused_sgd"),
    (
        "copy",
        r"^aten::(copy_|_to_copy|clone|contiguous|cat|stack|index_select|index|gather|"
        r"scatter|scatter_add_|index_put_|_unsafe_index|repeat|flip|roll)$",
    ),
    ("elementwise", r"^aten::"),
)

#: FLOPs per element of the first input for memory operators (the order of magnitude only).
FLOPS_PER_ELEMENT = {
    "norm": 8,
    "softmax": 5,
    "cross_entropy": 1,
    "reduction": 1,
    "elementwise": 1,
    "embedding": 0,
    "copy": 0,
    "optimizer": 0,
}

SIGNATURE = ("name", "input_dims", "input_types")
_INT = r"\s*-?[0-9]{1,18}\s*"
_DIMS_TEXT = rf"^\[\s*(\[({_INT}(,{_INT})*)?\]\s*(,\s*\[({_INT}(,{_INT})*)?\]\s*)*)?\]$"
_TYPES_TEXT = r'^\[\s*("[^"\\]*"\s*(,\s*"[^"\\]*"\s*)*)?\]$'


def op_class(name: pl.Expr) -> pl.Expr:
    """The operator class of each name: gemm, attention, conv, or a memory class (else null)."""
    expr = pl.lit(None, pl.String)
    for cls, pattern in reversed(_MEMORY_CLASSES):
        expr = pl.when(name.str.contains(pattern)).then(pl.lit(cls)).otherwise(expr)
    return (
        pl.when(name.is_in(list(GEMM_OPS)))
        .then(pl.lit("gemm"))
        .when(name.is_in(list(ATTENTION_FWD | ATTENTION_BWD)))
        .then(pl.lit("attention"))
        .when(name.is_in(list(CONV_FWD | CONV_BWD)))
        .then(pl.lit("conv"))
        .otherwise(expr)
    )


def signature_costs(signatures: pl.DataFrame) -> pl.DataFrame:
    """``signatures`` (distinct name, input_dims, input_types) with ``op_class``, ``flops``,
    ``bytes``, ``precision`` (bf16, fp8, fp32 or null) and ``assumption`` (what the formula had to
    assume, or null). Signatures nothing is known of get null flops and bytes."""
    sig = signatures.select(SIGNATURE).unique().with_columns(op_class=op_class(pl.col("name")))
    # TensorList inputs nest one level deeper; their sizes are not modelled (the optimizer).
    decodable = (
        pl.col("input_dims").is_not_null()
        & pl.col("input_types").is_not_null()
        & ~pl.col("input_dims").str.contains(r"\[\s*\[\s*\[")
        & pl.col("op_class").is_not_null()
        # The optimizer's TensorLists are recorded without their shapes ([] per list): its
        # bytes would be those of its scalars, so it is not modelled at all.
        & (pl.col("op_class") != "optimizer")
        & ~pl.col("input_types").str.contains('"TensorList"', literal=True)
    )
    # Text from the trace is untrusted: only lists of lists of (at most 18-digit) integers and
    # lists of plain strings are decoded, so a malformed value cannot fail the whole column.
    well_formed = pl.col("input_dims").str.contains(_DIMS_TEXT) & pl.col(
        "input_types"
    ).str.contains(_TYPES_TEXT)
    todo = sig.filter(decodable & well_formed).with_columns(
        dims=pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))),
        types=pl.col("input_types").str.json_decode(pl.List(pl.String)),
    )
    # As many types as shapes (a trace may disagree with itself): the shorter list decides.
    n = pl.min_horizontal(pl.col("dims").list.len(), pl.col("types").list.len())
    todo = todo.with_columns(dims=pl.col("dims").list.head(n), types=pl.col("types").list.head(n))
    if todo.is_empty():
        return _empty(sig)
    per_input = (
        todo.select(*SIGNATURE, "dims", "types")
        .with_row_index("_sig")
        .explode("dims", "types")
        .with_columns(
            _esize=pl.col("types").replace_strict(ELEMENT_BYTES, default=0, return_dtype=pl.Int64),
            _numel=pl.col("dims")
            .list.eval(pl.element().cast(pl.Float64))
            .list.eval(pl.element().product())
            .list.first()
            .fill_null(1.0),
        )
        .with_columns(_bytes=pl.col("_numel") * pl.col("_esize"))
        .group_by("_sig", maintain_order=True)
        .agg(
            *[pl.col(c).first() for c in SIGNATURE],
            numels=pl.col("_numel"),
            esizes=pl.col("_esize"),
            in_bytes=pl.col("_bytes").sum(),
            max_bytes=pl.col("_bytes").max(),
            precision=pl.col("types").filter(pl.col("_esize") > 0).first(),
        )
    )
    costed = todo.join(per_input.drop("_sig"), on=list(SIGNATURE), how="left").join(
        conv_output_spatial(sig), on="input_dims", how="left"
    )
    costed = costed.with_columns(_costs(costed)).with_columns(
        precision=pl.col("precision").replace_strict(
            PRECISION, default=None, return_dtype=pl.String
        )
    )
    out = costed.select(
        *SIGNATURE, "op_class", "flops", "bytes", "precision", "assumption", "causal_fraction"
    )
    rest = sig.join(out, on=list(SIGNATURE), how="anti", nulls_equal=True)
    return pl.concat([out, _empty(rest)], how="vertical_relaxed")


def _empty(sig: pl.DataFrame) -> pl.DataFrame:
    return sig.select(*SIGNATURE, "op_class").with_columns(
        flops=pl.lit(None, pl.Float64),
        bytes=pl.lit(None, pl.Float64),
        precision=pl.lit(None, pl.String),
        assumption=pl.lit(None, pl.String),
        causal_fraction=pl.lit(None, pl.Float64),
    )


def is_causal(name: pl.Expr, concrete: pl.Expr) -> pl.Expr:
    """Whether a fused attention call was causal, from its ``Concrete Inputs`` (JSON text):
    True or False where the argument at :data:`IS_CAUSAL_AT` reads "True" or "False", else null
    (not attention, not recorded, or a layout this table does not know). Text from the trace
    is untrusted: only a list of plain strings is decoded."""
    position = name.replace_strict(IS_CAUSAL_AT, default=None, return_dtype=pl.Int64)
    values = (
        pl.when(position.is_not_null() & concrete.str.contains(_TYPES_TEXT))
        .then(concrete)
        .str.json_decode(pl.List(pl.String))
    )
    arg = values.list.get(position, null_on_oob=True)
    return pl.when(arg == "True").then(True).when(arg == "False").then(False)


def _dim(i: int, j: int) -> pl.Expr:
    """Dimension ``j`` (negative from the end) of input ``i``, as a float."""
    return (
        pl.col("dims").list.get(i, null_on_oob=True).list.get(j, null_on_oob=True).cast(pl.Float64)
    )


def _numel(i: int) -> pl.Expr:
    return pl.col("numels").list.get(i, null_on_oob=True)


def _nbytes(i: int) -> pl.Expr:
    return _numel(i) * pl.col("esizes").list.get(i, null_on_oob=True)


def _esize(i: int) -> pl.Expr:
    return pl.col("esizes").list.get(i, null_on_oob=True).cast(pl.Float64)


def _costs(frame: pl.DataFrame) -> list[pl.Expr]:
    """flops, bytes and assumption for every class, as one when/then chain each."""
    name, cls = pl.col("name"), pl.col("op_class")
    flops: list[tuple[pl.Expr, pl.Expr]] = []
    nbytes: list[tuple[pl.Expr, pl.Expr]] = []
    assume: list[tuple[pl.Expr, pl.Expr]] = []
    # Matrix multiplies: 2*m*n*k (times the batch); the bias or C of addmm/baddbmm is not
    # counted, as FlopCounterMode does not count it. Bytes: A and B read, C (and bias) read,
    # the m x n output written in A's dtype (bf16 for _scaled_mm, whose output type is not
    # recorded).
    for op, (a, b, batched) in GEMM_OPS.items():
        off = 1 if batched else 0
        m, k, n = _dim(a, off), _dim(a, off + 1), _dim(b, off + 1)
        batch = _dim(a, 0) if batched else pl.lit(1.0)
        out_esize = pl.lit(2.0) if op == "aten::_scaled_mm" else _esize(a)
        flops.append((name == op, 2.0 * batch * m * n * k))
        nbytes.append((name == op, pl.col("in_bytes") + batch * m * n * out_esize))
    # Attention (fused kernels): forward 2*B*H*Sq*Sk*(D + Dv) (Q K^T and P V), backward
    # 2*B*H*Sq*Sk*(3D + 2Dv) (the recomputed Q K^T, dV, dP, dQ, dK); causal masking is NOT
    # halved (the trace does not record is_causal in Input Dims, and FlopCounterMode, the
    # usual MFU convention, counts the full square).
    for names, q in ((ATTENTION_FWD, 0), (ATTENTION_BWD, 1)):
        is_op = name.is_in(list(names))
        bh_sq_sk = _dim(q, 0) * _dim(q, 1) * _dim(q, 2) * _dim(q + 1, 2)
        d, dv = _dim(q, 3), _dim(q + 2, 3)
        qkvo = _nbytes(q) + _nbytes(q + 1) + _nbytes(q + 2) + _nbytes(q)
        if q == 0:
            flops.append((is_op, 2.0 * bh_sq_sk * (d + dv)))
            nbytes.append((is_op, qkvo))
        else:  # reads q, k, v, out, grad_out; writes dq, dk, dv
            flops.append((is_op, 2.0 * bh_sq_sk * (3.0 * d + 2.0 * dv)))
            nbytes.append((is_op, 2.0 * qkvo))
    # Convolution: 2 * N * Cout * prod(out spatial) * (Cin/groups) * prod(kernel) forward; the
    # backward computes the input and the weight gradients, each as dear as the forward. The
    # weight's shape [Cout, Cin/groups, *k] carries the groups. The forward's output size comes
    # from the backward of the same input and weight when the trace has it (conv_outputs), else
    # stride 1 and "same" padding are assumed.
    w_elems = (
        pl.col("dims")
        .list.get(1, null_on_oob=True)
        .list.eval(pl.element().cast(pl.Float64))
        .list.eval(pl.element().product())
        .list.first()
    )
    batch = _dim(0, 0)
    flops.append((name.is_in(list(CONV_FWD)), 2.0 * batch * w_elems * pl.col("_out_spatial")))
    nbytes.append(
        (
            name.is_in(list(CONV_FWD)),
            _nbytes(0) + _nbytes(1) + batch * _dim(1, 0) * pl.col("_out_spatial") * _esize(0),
        )
    )
    assume.append(
        (
            name.is_in(list(CONV_FWD)) & pl.col("_out_assumed"),
            pl.lit("output size assumed equal to the input's (stride 1, same padding)"),
        )
    )
    gw_elems = (
        pl.col("dims")
        .list.get(2, null_on_oob=True)
        .list.eval(pl.element().cast(pl.Float64))
        .list.eval(pl.element().product())
        .list.first()
    )
    grad_spatial = _numel(0) / (_dim(0, 0) * _dim(0, 1))
    flops.append((name.is_in(list(CONV_BWD)), 2.0 * 2.0 * _dim(0, 0) * gw_elems * grad_spatial))
    nbytes.append((name.is_in(list(CONV_BWD)), _nbytes(0) + 2.0 * _nbytes(1) + 2.0 * _nbytes(2)))
    assume.append(
        (
            name.is_in(list(CONV_BWD)),
            pl.lit("both gradients computed (output_mask is not recorded)"),
        )
    )
    # Memory operators: bytes read plus bytes written; see docs/perf-model.md.
    inplace = name.str.ends_with("_") & ~name.str.contains(r"copy_$")
    write_only = name.str.contains(r"::(fill_|zero_|normal_|uniform_|bernoulli_|random_)$")
    emb_rows = _numel(1) * _dim(0, -1)
    memory_bytes = (
        pl.when(cls == "embedding")
        .then(
            pl.when(name.str.contains("backward"))
            .then(2.0 * _nbytes(0) + _nbytes(1))
            .otherwise(2.0 * emb_rows * _esize(0) + _nbytes(1))
        )
        .when(cls == "cross_entropy")
        .then(
            pl.when(name.str.contains("backward"))
            .then(_nbytes(1) + _nbytes(2))
            .otherwise(_nbytes(1) + _numel(1) * _esize(0))
        )
        .when(cls.is_in(["reduction"]))
        .then(pl.col("in_bytes"))
        .when(write_only)
        .then(_nbytes(0))
        .when(inplace)
        .then(pl.col("in_bytes") + _nbytes(0))
        .when(cls.is_in(["norm", "softmax"]))
        .then(pl.col("in_bytes") + _nbytes(0))
        .when(cls == "copy")
        .then(
            pl.when(name == "aten::copy_")
            .then(pl.col("in_bytes"))
            .otherwise(2.0 * pl.col("in_bytes"))
        )
        .when(cls == "elementwise")
        .then(pl.col("in_bytes") + pl.col("max_bytes"))
    )
    per_element = cls.replace_strict(FLOPS_PER_ELEMENT, default=None, return_dtype=pl.Float64)
    memory_flops = pl.when(cls == "embedding").then(0.0).otherwise(per_element * _numel(0))

    def chain(cases: list[tuple[pl.Expr, pl.Expr]], default: pl.Expr) -> pl.Expr:
        expr = default
        for cond, value in reversed(cases):
            expr = pl.when(cond).then(value).otherwise(expr)
        return expr

    del frame
    # Causal attention (is_causal, top-left aligned as torch's: query i sees keys 0..i) keeps
    # sum over i of min(i + 1, Sk) of the Sq x Sk scores: the share its kernels compute.
    fractions: list[tuple[pl.Expr, pl.Expr]] = []
    for names, q in ((ATTENTION_FWD, 0), (ATTENTION_BWD, 1)):
        sq, sk = _dim(q, 2), _dim(q + 1, 2)
        kept = (
            pl.when(sq <= sk)
            .then(sq * (sq + 1.0) / 2.0)
            .otherwise(sk * (sk + 1.0) / 2.0 + (sq - sk) * sk)
        )
        fractions.append((name.is_in(list(names)), kept / (sq * sk)))
    return [
        chain(fractions, pl.lit(None, pl.Float64)).cast(pl.Float64).alias("causal_fraction"),
        chain(flops, memory_flops).cast(pl.Float64).alias("flops"),
        chain(nbytes, memory_bytes).cast(pl.Float64).alias("bytes"),
        chain(assume, pl.lit(None, pl.String)).alias("assumption"),
    ]


def conv_output_spatial(signatures: pl.DataFrame) -> pl.DataFrame:
    """For each convolution forward signature, the product of its output's spatial sizes and
    whether it was assumed: taken from a ``convolution_backward`` whose input and weight have the
    forward's shapes (its grad_output is the forward's output), else the input's own spatial
    size (stride 1, same padding)."""
    dims = pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64)))
    fwd = (
        signatures.filter(
            pl.col("name").is_in(list(CONV_FWD)), pl.col("input_dims").str.contains(_DIMS_TEXT)
        )
        .select(
            "input_dims",
            _x=dims.list.get(0, null_on_oob=True),
            _w=dims.list.get(1, null_on_oob=True),
        )
        .unique("input_dims")
    )
    bwd = (
        signatures.filter(
            pl.col("name").is_in(list(CONV_BWD)), pl.col("input_dims").str.contains(_DIMS_TEXT)
        )
        .select(
            _x=dims.list.get(1, null_on_oob=True),
            _w=dims.list.get(2, null_on_oob=True),
            _gy=dims.list.get(0, null_on_oob=True),
        )
        .unique(["_x", "_w"])
    )

    def spatial(col: str) -> pl.Expr:
        return (
            pl.col(col)
            .list.slice(2)
            .list.eval(pl.element().cast(pl.Float64))
            .list.eval(pl.element().product())
            .list.first()
        )

    return fwd.join(bwd, on=["_x", "_w"], how="left").select(
        "input_dims",
        _out_spatial=pl.coalesce(spatial("_gy"), spatial("_x")),
        _out_assumed=pl.col("_gy").is_null(),
    )
