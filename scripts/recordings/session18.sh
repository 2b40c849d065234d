#!/usr/bin/env bash
# The recordings of 2026-12-02 on the lent H200, in one call:
#   bash scripts/recordings/session18.sh     (writes $OUT/*.tgz)
# - the reachable HBM bandwidth (scripts/measure/hbm_bandwidth.py);
# - the strided_elementwise pair and fp32_matmul's tf32 variant through gpu_corpus.sh (torch
#   and nsys);
# - the bf16 GPT step under torch.profiler with with_flops=True (the trace's own FLOPs), and
#   the FP32 GPT step with TF32 allowed (torch.profiler, and unprofiled for its step time).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT" || exit 2
export OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT" /tmp/s18/torch /tmp/s18/records
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
python3 scripts/measure/hbm_bandwidth.py "$OUT/hbm_bandwidth_h200.json"
WORK=/tmp/ta-corpus bash scripts/gpu_corpus.sh torch strided_elementwise fp32_matmul
WORK=/tmp/ta-corpus NSYS_DEADLINE=${NSYS_DEADLINE:-400} bash scripts/gpu_corpus.sh nsys strided_elementwise fp32_matmul
T="python3 scripts/recordings/train.py"
G="--model gpt --dtype bf16 --size d_model=2048,layers=8,heads=16,seq=1024,batch=16"
timeout -k 5 150 $T $G --step-name "step {i}" --profiler torch --with-flops --out /tmp/s18/torch --name gpt_bf16_flops_torch
timeout -k 5 150 $T --model gpt --dtype fp32 --tf32 --time --flops --out /tmp/s18/records --name gpt_tf32_unprofiled
timeout -k 5 150 $T --model gpt --dtype fp32 --tf32 --profiler torch --with-flops --out /tmp/s18/torch --name gpt_tf32_torch
mv /tmp/s18/torch/*.record.json /tmp/s18/records/ 2>/dev/null
tar czf "$OUT/session18.tgz" -C /tmp/s18 torch records
ls -la "$OUT" /tmp/s18/torch /tmp/s18/records
