"""unfused-attention on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import US, Synth, run


def _attention(s: Synth, fused: bool, layers: int = 4) -> None:
    t = 0.0
    for _ in range(layers):
        if fused:
            s.kernel("flash_fwd_kernel", t, 100, launch=t - 10)
            t += 102
            continue
        for name, dur in (("ampere_bf16_s16816gemm_bf16_128x64", 50),
                          ("vectorized_elementwise_kernel<mul>", 20),
                          ("cunn_SoftMaxForward<8, c10::BFloat16>", 60),
                          ("ampere_bf16_s16816gemm_bf16_64x64", 50)):
            s.kernel(name, t, dur, launch=t - 10)
            t += dur + 2


def test_unfused_attention_fires_on_gemm_softmax_gemm():
    s = Synth()
    _attention(s, fused=False)
    f = run(s)[0]["unfused-attention"]
    assert "4 attention blocks" in f.message
    assert f.impact_ns == 4 * 80 * US  # the scale and softmax kernels between the GEMMs


def test_unfused_attention_quiet_on_flash_and_on_loss_softmax():
    s = Synth()
    _attention(s, fused=True)
    assert "unfused-attention" not in run(s)[0]
    s = Synth()  # LM head -> log-softmax -> NLL: no GEMM after the softmax
    t = 0.0
    for _ in range(3):
        for name in ("sm90_xmma_gemm_bf16", "cunn_SoftMaxForward<LogSoftMaxForwardEpilogue>",
                     "nll_loss_forward_reduce_cuda_kernel", "reduce_kernel", "reduce_kernel",
                     "reduce_kernel"):
            s.kernel(name, t, 50, launch=t - 10)
            t += 52
    assert "unfused-attention" not in run(s)[0]


def test_unfused_attention_ignores_the_loss_log_softmax_in_training():
    # Linear -> log-softmax (bf16 warp kernel with is_log_softmax=true) -> NLL -> backward GEMM
    s = Synth()
    t = 0.0
    for _ in range(3):
        for name, op in (("sm90_xmma_gemm_bf16bf16", "aten::addmm"),
                         ("softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, true, false>",
                          "aten::_log_softmax"),
                         ("nll_loss_forward_reduce_cuda_kernel_2d", "aten::nll_loss_forward"),
                         ("nll_loss_backward_reduce_cuda_kernel_2d", "aten::nll_loss_backward"),
                         ("sm90_xmma_gemm_bf16bf16", "aten::mm")):
            s.kernel(name, t, 50, launch=t - 10, op=op)
            t += 52
    assert "unfused-attention" not in run(s)[0]


def test_unfused_attention_counts_a_block_with_two_softmax_kernels_once():
    # A softmax that runs as two kernels between the same two GEMMs is one attention block.
    s = Synth()
    t = 0.0
    for _ in range(4):
        for name, dur in (("ampere_bf16_s16816gemm_bf16_128x64", 50),
                          ("softmax_max_kernel", 30),
                          ("softmax_sum_kernel", 30),
                          ("ampere_bf16_s16816gemm_bf16_64x64", 50)):
            s.kernel(name, t, dur, launch=t - 10)
            t += dur + 2
    f = run(s)[0]["unfused-attention"]
    assert "4 attention blocks" in f.message
    assert f.impact_ns == 4 * 60 * US
