#!/usr/bin/env bash
# Record the steady-state, memory and FLOP-count traces on the lent H200, in one call:
#   bash scripts/recordings/record.sh            (writes $OUT/recordings.tgz, split if large)
# Each program runs unprofiled (step time with CUDA events, FLOPs from FlopCounterMode), under
# torch.profiler (a schedule; and around the whole program), and under Nsight Systems twice:
# the whole process, and --capture-range=cudaProfilerApi around the steps.
# Needs .gpu-libs/ (libdw.so.1, libelf.so.1) carried; see ../shared/docs/GPU-TRACES.md.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/gpu-out}; W=${WORK:-/tmp/ta-rec}
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
QDI=/opt/nvidia/nsight-compute/2025.3.1/host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter
export LD_LIBRARY_PATH=$ROOT/.gpu-libs:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$W/torch" "$W/nsys" "$W/records"
exec > >(tee -a "$OUT/recordings.log") 2>&1
TRAIN="python3 scripts/recordings/train.py"
EXPORT_ONLY=${EXPORT_ONLY:-}  # a folder of .nsys-rep files: only export them (stats, analyze)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch; print(torch.__version__, torch.version.cuda)"

post() {  # stem: qdstrm -> nsys-rep -> sqlite + Nsight's own stats/analyze CSVs
  local s=$1
  # nsys 2025.3 writes the .nsys-rep itself once libdw is found; older runs leave a .qdstrm
  if [ ! -f "$W/nsys/$s.nsys-rep" ]; then
    timeout -k 5 240 "$QDI" -i "$W/nsys/$s.qdstrm" > "$W/nsys/$s.import.log" 2>&1 || { echo "IMPORT FAILED $s"; return 1; }
  fi
  timeout -k 5 240 "$NSYS" export --type sqlite -o "$W/nsys/$s.sqlite" --force-overwrite true "$W/nsys/$s.nsys-rep" >/dev/null 2>&1 || { echo "EXPORT FAILED $s"; return 1; }
  mkdir -p "$W/nsys/$s"
  timeout -k 5 120 "$NSYS" stats -q --force-overwrite true -r cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,nvtx_sum -f csv -o "$W/nsys/$s/stats" "$W/nsys/$s.sqlite" >/dev/null 2>&1 || echo "stats failed $s"
  timeout -k 5 120 "$NSYS" analyze -q --force-overwrite true -r gpu_gaps,gpu_time_util,cuda_api_sync,cuda_memcpy_sync,cuda_memcpy_async -f csv -o "$W/nsys/$s/analyze" "$W/nsys/$s.sqlite" >/dev/null 2>&1 || echo "analyze failed $s"
  rm -f "$W/nsys/$s.qdstrm" "$W/nsys/$s.nsys-rep"
  echo "post $s: $(du -h "$W/nsys/$s.sqlite" | cut -f1)"
}
pids=()
if [ -n "$EXPORT_ONLY" ]; then
  W=$EXPORT_ONLY
  for r in "$W"/nsys/*.nsys-rep; do s=$(basename "$r" .nsys-rep); post "$s" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
  tar czf "$OUT/exports.tgz" -C "$W" nsys; ls -la "$OUT"; exit 0
fi
nsys_run() {  # stem range|whole extra-nsys-flags -- train args
  local s=$1 how=$2; shift 2
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
  local cap=()
  [ "$how" = range ] && cap=(--capture-range=cudaProfilerApi --capture-range-end=stop)
  local t0=$SECONDS
  timeout -k 5 150 "$NSYS" profile -t cuda,nvtx --sample=none --cpuctxsw=none "${cap[@]}" "${flags[@]}" \
    -o "$W/nsys/$s" --force-overwrite true $TRAIN "$@" --out "$W/records" --name "$s" > "$W/nsys/$s.profile.log" 2>&1
  echo "nsys $s: rc=$? $((SECONDS - t0)) s"
  tail -2 "$W/nsys/$s.profile.log" | head -1
  post "$s" & pids+=($!)
}
torch_run() {  # stem train-args...
  local s=$1; shift
  timeout -k 5 150 $TRAIN "$@" --out "$W/torch" --name "$s" || echo "FAILED torch $s"
  mv "$W/torch/$s.record.json" "$W/records/" 2>/dev/null
}
plain() {  # stem train-args...: the step time and FLOPs without a profiler
  local s=$1; shift
  timeout -k 5 150 $TRAIN "$@" --time --out "$W/records" --name "$s" || echo "FAILED plain $s"
}

# 1. Steady state: a bf16 GPT step ("step N") and a bf16 convnet ("iteration N").
steady() {  # stem step-name train-args...
  local stem=$1 name=$2; shift 2
  plain "${stem}_unprofiled" "$@" --step-name "$name" --flops
  torch_run "${stem}_torch" "$@" --step-name "$name" --profiler torch
  torch_run "${stem}_torch_whole" "$@" --step-name "$name" --profiler torch-whole
  nsys_run "${stem}_whole" whole -- "$@" --step-name "$name" --profiler none
  nsys_run "${stem}_range" range -- "$@" --step-name "$name" --profiler range
}
# GPU-bound sizes, so that the profilers' CPU overhead does not set the step time.
ONLY=${ONLY:-all}
steady gpt_bf16 "step {i}" --model gpt --dtype bf16 --size d_model=2048,layers=8,heads=16,seq=1024,batch=16
steady convnet_bf16 "iteration {i}" --model convnet --dtype bf16 --size image=224,images=256
[ "$ONLY" = steady ] && { for p in "${pids[@]}"; do wait "$p"; done; tar czf "$OUT/recordings.tgz" -C "$W" torch nsys records; ls -la "$OUT"; exit 0; }
# 2. FP32 and FP16 twins of the GPT step (FLOPs ground truth; advice per precision).
plain gpt_fp32_unprofiled --model gpt --dtype fp32 --flops
torch_run gpt_fp32_torch --model gpt --dtype fp32 --profiler torch
plain gpt_fp16_unprofiled --model gpt --dtype fp16
torch_run gpt_fp16_torch --model gpt --dtype fp16 --profiler torch
# 3. Allocator churn: torch.cuda.empty_cache() every step, and its twin without.
for v in bad good; do
  extra=(); [ $v = bad ] && extra=(--empty-cache)
  plain "empty_cache_${v}_unprofiled" --model gpt --dtype bf16 "${extra[@]}"
  torch_run "empty_cache_${v}_torch" --model gpt --dtype bf16 --profiler torch --memory "${extra[@]}"
  nsys_run "empty_cache_${v}_range" range --cuda-memory-usage=true -- --model gpt --dtype bf16 --profiler range "${extra[@]}"
done
# 4. A CUDA graph's capture under torch.profiler.
timeout -k 5 120 python3 scripts/recordings/capture.py "$W/torch/cudagraph_capture.json.gz" || echo "FAILED capture"
for p in "${pids[@]}"; do wait "$p"; done
ls -la "$W"/torch "$W"/nsys "$W"/records
tar czf "$OUT/recordings.tgz" -C "$W" torch nsys records
size=$(stat -c %s "$OUT/recordings.tgz"); echo "packed $size bytes"
if [ "$size" -gt 15000000 ]; then split -b 15000000 -d "$OUT/recordings.tgz" "$OUT/recordings.tgz.part-" && rm "$OUT/recordings.tgz"; fi
ls -la "$OUT"
