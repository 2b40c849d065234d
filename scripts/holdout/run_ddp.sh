#!/usr/bin/env bash
# The held-out DDP program (ddp_gpt_train.py) on a machine with 2+ GPUs: its step time without a
# profiler (torchrun, --time), then one Nsight Systems run per rank (nsys_ranks). Its
# torch.profiler traces come from `torchrun --standalone --nproc-per-node N ddp_gpt_train.py`.
#   bash scripts/holdout/run_ddp.sh          # -> $OUT/holdout-ddp.tgz (nsys/*.sqlite, timing)
set -u
W=/tmp/holdout
# shellcheck source=../gpu_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_common.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPU=$(nvidia-smi -L | wc -l)
cd "$ROOT/scripts/holdout" || exit 2
timeout -k 5 240 torchrun --standalone --nproc-per-node "$NGPU" ddp_gpt_train.py --time 20 \
  2>&1 | grep "ms/step" | tee "$W/ddp_timing.txt"
nsys_ranks 240 ddp_gpt_train python3 ddp_gpt_train.py --profiler nsys
for p in "${pids[@]}"; do wait "$p"; done
tar -C "$W" -czf "$OUT/holdout-ddp.tgz" nsys ddp_timing.txt
ls -la "$W/nsys"
