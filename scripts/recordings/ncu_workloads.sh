#!/usr/bin/env bash
# Nsight Compute reports of kernels that the reference workloads launch through PyTorch itself
# (not written for the kernel rules): the strided_elementwise pair's add and fp32_matmul's
# GEMMs in FP32 and TF32. One launch each, --set full, on the lent H200:
#   bash scripts/recordings/ncu_workloads.sh      (writes $OUT/workload_kernels.tgz)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/gpu-out}; W=/tmp/ncu-wl; rm -rf "$W"; mkdir -p "$OUT" "$W"
NCU=${NCU:-/opt/nvidia/nsight-compute/2025.3.1/ncu}
RUN="python3 traceanalyzer/workloads/run.py"
prof() {  # stem kernel-regex workload variant
  timeout -k 5 200 "$NCU" --set full --profile-from-start off -k regex:"$2" -c 1 -o "$W/$1" --force-overwrite \
    $RUN "$3" --variant "$4" --profiler nsys --iters 5 --out "$W/run" > "$W/$1.log" 2>&1
  echo "ncu $1 rc=$?"; tail -1 "$W/$1.log"
  "$NCU" --import "$W/$1.ncu-rep" --csv --page raw > "$W/${1}_raw.csv"
  "$NCU" --import "$W/$1.ncu-rep" --csv --page details > "$W/${1}_details.csv"
}
prof strided_elementwise_bad "^(vectorized_|unrolled_)?elementwise_kernel$" strided_elementwise bad
prof strided_elementwise_good "^(vectorized_|unrolled_)?elementwise_kernel$" strided_elementwise good
prof fp32_matmul_bad "gemm" fp32_matmul bad
prof fp32_matmul_tf32 "gemm" fp32_matmul tf32
gzip -9f "$W"/*.csv "$W"/*.ncu-rep
tar czf "$OUT/workload_kernels.tgz" -C "$W" $(cd "$W" && ls *.gz)
ls -la "$W" "$OUT"
