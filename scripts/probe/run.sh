#!/usr/bin/env bash
# The probes of profiler_options.py on a GPU machine, under torch.profiler and once more under
# Nsight Systems with more of its tracing options on (cuBLAS, cuDNN, CUDA memory usage).
#   bash scripts/probe/run.sh      -> $OUT/probe.tgz
set -uo pipefail
W=${WORK:-/tmp/ta-probe}
. "$(dirname "$0")/../gpu_common.sh"  # ROOT, OUT, NSYS, postprocess; cd "$ROOT"
mkdir -p "$W/torch"
timeout -k 5 240 python3 scripts/probe/profiler_options.py "$W/torch"
timeout -k 5 180 "$NSYS" profile -t cuda,nvtx,osrt,cublas,cudnn --cuda-memory-usage=true \
  --sample=none --cpuctxsw=none -o "$W/nsys/two_gpus_options" --force-overwrite true \
  python3 scripts/probe/profiler_options.py "$W/nsys-torch" two_gpus > "$W/nsys/two_gpus_options.profile.log" 2>&1
echo "nsys rc=$?"; tail -3 "$W/nsys/two_gpus_options.profile.log"
postprocess two_gpus_options
rm -rf "$W/nsys-torch"
find "$W" -type f | xargs ls -la
tar czf "$OUT/probe.tgz" -C "$W" torch nsys
