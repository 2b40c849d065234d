#!/usr/bin/env bash
# Nsight Compute reports of the kernel pairs in traceanalyzer/workloads/ncu_kernels.py, on the lent H200, in one call:
#   bash scripts/recordings/ncu.sh      (writes $OUT/kernels_{a,b}.ncu-rep.gz, their raw and details CSVs,
#                                        and a torch.profiler trace of the same launches)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
NCU=${NCU:-/opt/nvidia/nsight-compute/2025.3.1/ncu}
K=traceanalyzer/workloads/ncu_kernels.py
python3 "$K" || exit 1  # builds the extension outside the profiled run
# Two reports, each under 16 MB: the memory-access and register pairs, then the rest.
for part in "a:ta_copy|ta_regs:4" "b:ta_transpose|ta_tail|ta_full|nvjet|gemm:5"; do
  IFS=: read -r name regex count <<< "$part"
  timeout -k 5 400 "$NCU" --set full -k regex:"$regex" -c "$count" -o "$OUT/kernels_$name" \
    --force-overwrite python3 "$K" > "$OUT/ncu_$name.log" 2>&1
  echo "ncu $name rc=$?"; tail -2 "$OUT/ncu_$name.log"
  "$NCU" --import "$OUT/kernels_$name.ncu-rep" --csv --page raw > "$OUT/kernels_${name}_raw.csv"
  "$NCU" --import "$OUT/kernels_$name.ncu-rep" --csv --page details > "$OUT/kernels_${name}_details.csv"
done
"$NCU" --version | tail -1 > "$OUT/ncu_version.txt"
python3 "$K" --trace "$OUT/kernels_trace.json.gz"
gzip -9 "$OUT"/kernels_*_raw.csv "$OUT"/kernels_*_details.csv "$OUT"/kernels_*.ncu-rep
rm -f "$OUT"/ncu_*.log
ls -la "$OUT"
