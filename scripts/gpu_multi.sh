#!/usr/bin/env bash
# Traces for the workloads that scripts/gpu_corpus.sh does not make: nccl_overlap and
# rank_imbalance (2+ GPUs, one process per GPU) and sync_memcpy, both variants, under
# torch.profiler and Nsight Systems.
#
#   bash scripts/gpu_multi.sh            # on a machine with 2+ GPUs (nvidia-h200-x2)
#
# torch: sync_memcpy in one process; nccl_overlap and rank_imbalance under torchrun (one trace
#        per rank: torch/<workload>_<variant>_rank<r>.json.gz).
# nsys:  one `nsys profile` per process, as for multi-node jobs: sync_memcpy_<variant>.sqlite and
#        nccl_overlap_<variant>_rank<r>.sqlite (each rank's nsys started with RANK/WORLD_SIZE in
#        its environment, which the nsys ingestor reads back). The nsys runs reuse the batch the
#        torch run chose (TA_NCCL_BATCH). Then export, stats and analyze as gpu_corpus.sh does.
# Also: scripts/probe_sync_copies.py (which torch calls make synchronous copies) -> $OUT.
# Ends in $OUT/multi-torch.tgz and $OUT/multi-nsys.tgz (torch/ or nsys/ plus records/).
# Needs: .gpu-libs/ with libdw.so.1 and libelf.so.1 (carried; see ../shared/docs/GPU-TRACES.md).
set -uo pipefail
W=${WORK:-/tmp/ta-multi}
. "$(dirname "$0")/gpu_common.sh"  # ROOT, OUT, RUN, NSYS, QDI, postprocess; cd "$ROOT"
# NVLink multicast stays off (it can take the host's shared GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# one NCCL channel: a slower link, as between nodes (see traceanalyzer/workloads/nccl_overlap.py)
export NCCL_MAX_NCHANNELS=${NCCL_MAX_NCHANNELS:-1}
# SYNC=0 skips sync_memcpy, OVERLAP=0 nccl_overlap, IMBALANCE=0 rank_imbalance, PROBE=0 the probe
SYNC=${SYNC:-1} OVERLAP=${OVERLAP:-1} IMBALANCE=${IMBALANCE:-1} PROBE=${PROBE:-1}
# rank_imbalance hides its all-reduces behind backward with NCCL's default channels: its subject
# is the wait for the slow rank, not a slow link
IMBALANCE_ENV=(env -u NCCL_MAX_NCHANNELS)
exec > >(tee -a "$OUT/multi.log") 2>&1
NGPU=$(nvidia-smi -L | wc -l)
T0=$SECONDS
nvidia-smi -L; nvidia-smi topo -m

echo "== torch $((SECONDS - T0)) s"
[ "$SYNC" = 1 ] && timeout -k 5 200 python3 "$RUN" sync_memcpy --variant all --profiler torch --out "$W/torch"
[ "$OVERLAP" = 1 ] && timeout -k 5 300 torchrun --standalone --nproc-per-node "$NGPU" "$RUN" \
  nccl_overlap --variant all --profiler torch --out "$W/torch"
[ "$IMBALANCE" = 1 ] && timeout -k 5 300 "${IMBALANCE_ENV[@]}" torchrun --standalone \
  --nproc-per-node "$NGPU" "$RUN" rank_imbalance --variant all --profiler torch --out "$W/torch"
mv "$W"/torch/*.record.json "$W/records/" 2>/dev/null
ls -la "$W/torch"
tar czf "$OUT/multi-torch.tgz" -C "$W" torch records
TA_NCCL_BATCH=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['params']['batch'])" \
  "$W/records/nccl_overlap_bad_rank0.torch.record.json" 2>/dev/null) && export TA_NCCL_BATCH
echo "TA_NCCL_BATCH=${TA_NCCL_BATCH:-unset}"

echo "== nsys $((SECONDS - T0)) s"
for v in bad good; do
  [ "$SYNC" = 1 ] || continue
  profile_rank 150 "sync_memcpy_$v" python3 "$RUN" sync_memcpy --variant "$v" --profiler nsys --out "$W/records"
  postprocess "sync_memcpy_$v" & pids+=($!)
done
for v in bad good; do
  [ "$OVERLAP" = 1 ] && nsys_ranks 150 "nccl_overlap_$v" \
    python3 "$RUN" nccl_overlap --variant "$v" --profiler nsys --out "$W/records"
  [ "$IMBALANCE" = 1 ] && nsys_ranks 150 "rank_imbalance_$v" "${IMBALANCE_ENV[@]}" \
    python3 "$RUN" rank_imbalance --variant "$v" --profiler nsys --out "$W/records"
done
for p in "${pids[@]}"; do wait "$p"; done
ls -la "$W/nsys" "$W/records"
tar czf "$OUT/multi-nsys.tgz" --exclude="*.qdstrm" --exclude="*.nsys-rep" -C "$W" nsys records
echo "== probe $((SECONDS - T0)) s"
if [ "$PROBE" = 1 ]; then
  timeout -k 5 "${PROBE_TIMEOUT:-120}" python3 scripts/probe_sync_copies.py > "$OUT/probe_sync_copies.txt" 2>&1
  echo "probe rc=$?"; grep -E "SYNC|FAILED" "$OUT/probe_sync_copies.txt"
fi

ls -la "$OUT"
echo "== done $((SECONDS - T0)) s"
