#!/usr/bin/env bash
# Regenerate Nsight Systems' own answers (`nsys stats` / `nsys analyze` CSVs, which
# tests/ingest/nsys/test_parity.py compares with) for exports already in sample_traces/nsys, on a
# machine with nsys:
#   bash scripts/nsys_reference.sh STEM ...   -> $OUT/<STEM>/*.csv, to copy to sample_traces/nsys/
set -uo pipefail
W=${WORK:-/tmp/ta-reference}
. "$(dirname "$0")/gpu_common.sh"  # ROOT, OUT, NSYS; cd "$ROOT"
for s in "$@"; do
  rm -rf "${W:?}/nsys/$s" && mkdir -p "$W/nsys/$s" "$OUT/$s"
  "$NSYS" stats -q --force-overwrite true -r cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,nvtx_sum \
    -f csv -o "$W/nsys/$s/stats" "sample_traces/nsys/$s.sqlite" > /dev/null 2>&1 || echo "stats failed $s"
  "$NSYS" analyze -q --force-overwrite true -r gpu_gaps,gpu_time_util,cuda_api_sync,cuda_memcpy_sync,cuda_memcpy_async \
    -f csv -o "$W/nsys/$s/analyze" "sample_traces/nsys/$s.sqlite" > /dev/null 2>&1 || echo "analyze failed $s"
  cp "$W/nsys/$s"/*.csv "$OUT/$s/"
done
ls -la "$OUT"/*
