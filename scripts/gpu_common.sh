# Shared set-up of scripts/gpu_corpus.sh and scripts/gpu_multi.sh, sourced once they have set W
# (their work folder): paths, the Nsight tools, and the nsys post-processing step.
# shellcheck shell=bash
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
RUN="$ROOT/traceanalyzer/workloads/run.py"
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
QDI=${QDI:-/opt/nvidia/nsight-compute/2025.3.1/host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter}
export LD_LIBRARY_PATH=$ROOT/.gpu-libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
cd "$ROOT" || exit 2
mkdir -p "$OUT" "$W/torch" "$W/nsys" "$W/records"

postprocess() {  # stem: qdstrm -> nsys-rep -> sqlite -> reference CSVs (CPU only; runs in background)
  local s=$1 t0=$SECONDS
  if [ -f "$W/nsys/$s.qdstrm" ] && [ ! -f "$W/nsys/$s.nsys-rep" ]; then
    timeout -k 5 180 "$QDI" -i "$W/nsys/$s.qdstrm" > "$W/nsys/$s.import.log" 2>&1 || { echo "IMPORT FAILED $s"; tail -5 "$W/nsys/$s.import.log"; return 1; }
  fi
  [ -f "$W/nsys/$s.nsys-rep" ] || { echo "NO REPORT $s"; ls -la "$W/nsys" | grep "$s"; tail -5 "$W/nsys/$s.profile.log"; return 1; }
  timeout -k 5 180 "$NSYS" export --type sqlite -o "$W/nsys/$s.sqlite" --force-overwrite true "$W/nsys/$s.nsys-rep" > /dev/null 2>&1 || { echo "EXPORT FAILED $s"; return 1; }
  mkdir -p "$W/nsys/$s"
  # --force-overwrite: a second run on a warm machine must not keep the first run's answers
  timeout -k 5 120 "$NSYS" stats -q --force-overwrite true -r cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,nvtx_sum -f csv -o "$W/nsys/$s/stats" "$W/nsys/$s.sqlite" > /dev/null 2>&1 || echo "stats failed $s"
  timeout -k 5 120 "$NSYS" analyze -q --force-overwrite true -r gpu_gaps,gpu_time_util,cuda_api_sync,cuda_memcpy_sync,cuda_memcpy_async -f csv -o "$W/nsys/$s/analyze" "$W/nsys/$s.sqlite" > /dev/null 2>&1 || echo "analyze failed $s"
  rm -f "$W/nsys/$s.qdstrm" "$W/nsys/$s.nsys-rep"
  echo "post $s: $((SECONDS - t0)) s, sqlite $(du -h "$W/nsys/$s.sqlite" | cut -f1)"
}

nsys_profile() {  # seconds stem command...: Nsight Systems with the corpus's settings
  local limit=$1 s=$2; shift 2
  timeout -k 5 "$limit" "$NSYS" profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none \
    --capture-range=cudaProfilerApi --capture-range-end=stop --cuda-graph-trace=node \
    -o "$W/nsys/$s" --force-overwrite true "$@" > "$W/nsys/$s.profile.log" 2>&1
}

profile_rank() {  # seconds stem command...: nsys_profile, then what its log says of the run
  local s=$2
  nsys_profile "$@"
  echo "profile $s: rc=$?; $(grep -E "ms/step|FAILED|Error" "$W/nsys/$s.profile.log" | head -3)"
}

pids=()  # post-processing jobs still running: wait for them before packing $W/nsys
NSYS_PORT=${NSYS_PORT:-29611}
nsys_ranks() {  # seconds stem command...: one Nsight Systems run per GPU, each started with
  # RANK/WORLD_SIZE in its environment as for a multi-node job (the nsys ingestor reads them
  # back), writing <stem>_rank<r>; then each rank's post-processing, in the background (pids)
  local limit=$1 stem=$2 ranks=() r n; shift 2
  n=$(nvidia-smi -L | wc -l)
  for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$NSYS_PORT profile_rank "$limit" "${stem}_rank$r" "$@" &
    ranks+=($!)
  done
  for p in "${ranks[@]}"; do wait "$p"; done
  for ((r = 0; r < n; r++)); do postprocess "${stem}_rank$r" & pids+=($!); done
  NSYS_PORT=$((NSYS_PORT + 1))
}
