#!/usr/bin/env bash
# Make the labelled trace corpus (sample_traces/) on a GPU machine, in as few calls as possible.
#
#   bash scripts/gpu_corpus.sh [smoke|torch|nsys|all] [WORKLOAD ...]
#
# torch: every runnable workload x variant under torch.profiler, in ONE python process
#        (-> torch/<workload>_<variant>.json.gz + a record with the CUDA-event step time).
# nsys:  each variant in its own `nsys profile` (capture range = the 5 NVTX-labelled steps), then
#        QdstrmImporter, `nsys export --type sqlite`, and Nsight's own `stats`/`analyze` CSVs as
#        reference answers (-> nsys/<workload>_<variant>.sqlite and nsys/<workload>_<variant>/).
# Each phase ends in $OUT/corpus-<phase>.tgz (split into <16 MiB parts if larger), holding
# torch/ or nsys/ plus records/: unpack into sample_traces/, drop the *.profile.log files, then
# `python3 -m traceanalyzer.workloads.manifest sample_traces` (see sample_traces/README.md).
# smoke: environment, extension build time, one workload under both profilers.
#
# Needs: .gpu-libs/ with libdw.so.1 and libelf.so.1 (carried; see ../shared/docs/GPU-TRACES.md).
set -uo pipefail
PHASE=${1:-all}; shift || true
NAMES=("$@")
W=${WORK:-/tmp/ta-corpus}
. "$(dirname "$0")/gpu_common.sh"  # ROOT, OUT, RUN, NSYS, QDI, postprocess; cd "$ROOT"
export TRACEANALYZER_EXT_DIR=/tmp/traceanalyzer_ext
LOG="$OUT/corpus-$PHASE.log"
exec > >(tee -a "$LOG") 2>&1

# workload:variant pairs to run (nccl_overlap needs 2+ GPUs and is skipped on one)
pairs() {
  python3 - "${NAMES[@]}" <<'PY'
import importlib.util, sys, torch
from pathlib import Path
here = Path("traceanalyzer/workloads")
spec = importlib.util.spec_from_file_location("workloads", here / "__init__.py",
                                              submodule_search_locations=[str(here)])
m = importlib.util.module_from_spec(spec); sys.modules["workloads"] = m; spec.loader.exec_module(m)
names = sys.argv[1:] or list(m.WORKLOADS)
later = []
for n in names:
    w = m.WORKLOADS[n]
    if max(w.min_gpus, w.gpus_per_process) > torch.cuda.device_count():
        print(f"skip {n}: needs {max(w.min_gpus, w.gpus_per_process)} GPUs", file=sys.stderr); continue
    for v in w.variants:
        (print(f"{n}:{v}") if v in ("bad", "good") else later.append(f"{n}:{v}"))
print("\n".join(later))
PY
}


run_torch() {
  local t0=$SECONDS
  local names=("${NAMES[@]}"); [ ${#names[@]} -eq 0 ] && names=(all)
  timeout -k 5 "${TORCH_TIMEOUT:-500}" python3 "$RUN" "${names[@]}" --variant all --profiler torch --out "$W/torch"
  mv "$W"/torch/*.record.json "$W/records/" 2>/dev/null
  echo "torch phase: $((SECONDS - t0)) s"; ls -la "$W/torch"
  pack torch torch records
}

run_nsys() {
  local t0=$SECONDS p pids=()
  for p in $(pairs); do
    local n=${p%%:*} v=${p##*:} s=${p%%:*}_${p##*:} t1=$SECONDS
    if [ $SECONDS -gt "${NSYS_DEADLINE:-99999}" ]; then echo "DEADLINE: skip $s"; continue; fi
    nsys_profile 90 "$s" python3 "$RUN" "$n" --variant "$v" --profiler nsys --out "$W/records"
    echo "profile $s: rc=$? $((SECONDS - t1)) s; files: $(cd "$W/nsys" && ls -s --block-size=K "$s".* 2>/dev/null | tr "\n" " ")"
    grep -E "ms/step|FAILED|Error|error" "$W/nsys/$s.profile.log" | head -5
    postprocess "$s" &
    pids+=($!)
  done
  # wait for these jobs only: a bare `wait` would also wait for the `tee` that logs this script
  for p in "${pids[@]}"; do wait "$p"; done
  echo "nsys phase: $((SECONDS - t0)) s"; ls -la "$W/nsys"
  pack nsys nsys records
}

pack() {  # name dir...: one tarball per phase, written as soon as the phase ends
  local tgz="$OUT/corpus-$1.tgz"; shift
  tar czf "$tgz" --exclude="*.qdstrm" --exclude="*.nsys-rep" -C "$W" "$@"
  local size; size=$(stat -c %s "$tgz")
  echo "packed $tgz: $size bytes"
  if [ "$size" -gt 15000000 ]; then
    split -b 15000000 -d "$tgz" "$tgz.part-" && rm "$tgz" && ls -la "$OUT"
  fi
}

smoke() {
  nvidia-smi -L
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, torch.cuda.get_device_name(0))"
  local t0=$SECONDS
  python3 -c "
import importlib.util, sys, time
from pathlib import Path
here = Path('traceanalyzer/workloads')
spec = importlib.util.spec_from_file_location('workloads', here / '__init__.py', submodule_search_locations=[str(here)])
m = importlib.util.module_from_spec(spec); sys.modules['workloads'] = m; spec.loader.exec_module(m)
from workloads import small_grid
t = time.perf_counter(); small_grid.load_extension(); print('extension build', round(time.perf_counter() - t, 1), 's')
"
  echo "ext: $((SECONDS - t0)) s"
  NAMES=(hidden_sync)
  TORCH_TIMEOUT=240 run_torch
  t0=$SECONDS
  run_nsys
  echo "nsys one pair: $((SECONDS - t0)) s"
  "$NSYS" --version
}

case $PHASE in
  smoke) smoke ;;
  torch) run_torch ;;
  nsys) run_nsys ;;
  all) run_torch; run_nsys ;;
  *) echo "unknown phase $PHASE"; exit 2 ;;
esac
