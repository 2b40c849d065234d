#!/usr/bin/env bash
# Session 20 on the H200: one Nsight Systems capture of two processes on one GPU (a compute rank
# and a copy-bound rank: scripts/recordings/two_processes.py), for the per-rank rules (issue 37).
set -uo pipefail
W=${WORK:-/tmp/ta-s20}
. "$(dirname "$0")/../gpu_common.sh"
s=two_processes_copy_rank
nvidia-smi -L
timeout -k 5 240 "$NSYS" profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none \
  -o "$W/nsys/$s" --force-overwrite true python3 scripts/recordings/two_processes.py --steps 8 \
  > "$W/nsys/$s.profile.log" 2>&1
echo "profile rc=$?"; tail -5 "$W/nsys/$s.profile.log"
postprocess "$s"
mkdir -p "$OUT/nsys"
cp -r "$W/nsys/$s.sqlite" "$W/nsys/$s" "$OUT/nsys/"
ls -la "$OUT/nsys"
