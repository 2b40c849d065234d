#!/usr/bin/env bash
# Run the held-out programs on the GPU machine under torch.profiler, then under Nsight Systems.
# Usage (repository root, with .gpu-libs/ as in ../shared/docs/GPU-TRACES.md):
#   bash scripts/holdout/run.sh            # -> $OUT/holdout.tgz (torch/*.json.gz, nsys/*.sqlite)
set -u
W=/tmp/holdout
# shellcheck source=../gpu_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_common.sh"
PROGRAMS=${PROGRAMS:-"gpt_decode resnet_amp_train bert_fp32_train image_infer_pageable"}
cd "$ROOT/scripts/holdout" || exit 2
for p in $PROGRAMS; do
  t0=$SECONDS
  timeout -k 5 240 python3 "$p.py" --out "$W/torch" > "$W/torch/$p.log" 2>&1 || { echo "TORCH FAILED $p"; tail -5 "$W/torch/$p.log"; }
  echo "torch $p: $((SECONDS - t0)) s"
done
for p in $PROGRAMS; do
  t0=$SECONDS
  nsys_profile 240 "$p" python3 "$p.py" --profiler nsys || echo "NSYS FAILED $p"
  echo "nsys $p: $((SECONDS - t0)) s"
  postprocess "$p" &
done
wait
tar -C "$W" -czf "$OUT/holdout.tgz" torch nsys
ls -la "$W/torch" "$W/nsys"
