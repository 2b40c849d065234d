#!/usr/bin/env bash
# The register-spill pair of ncu_kernels.py (--spill), --set full, on the lent H200:
#   bash scripts/recordings/ncu_spill.sh     (writes $OUT/kernels_c.ncu-rep.gz and its CSV pages)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
NCU=${NCU:-/opt/nvidia/nsight-compute/2025.3.1/ncu}
K=traceanalyzer/workloads/ncu_kernels.py
python3 "$K" --spill || exit 1  # builds the extension outside the profiled run
timeout -k 5 300 "$NCU" --set full -k regex:"ta_regs" -c 2 -o "$OUT/kernels_c" --force-overwrite \
  python3 "$K" --spill > "$OUT/ncu_c.log" 2>&1
echo "ncu c rc=$?"; tail -2 "$OUT/ncu_c.log"
"$NCU" --import "$OUT/kernels_c.ncu-rep" --csv --page raw > "$OUT/kernels_c_raw.csv"
"$NCU" --import "$OUT/kernels_c.ncu-rep" --csv --page details > "$OUT/kernels_c_details.csv"
gzip -9f "$OUT"/kernels_c*; rm -f "$OUT/ncu_c.log"
ls -la "$OUT"
