#!/bin/bash
# The one-GPU backend on a GPU machine (torch 2.x), from the repository root:
#   python/tests/onegpu/run-on-gpu.sh [OUT]
# Every collective at 4 ranks (tests/onegpu/collectives.py, with the default slots and with
# 1 MiB slots), then each program of the README's table at its ranks, captured into
# OUT/caps/<name> (the names of tests/capture/h200/), each run's output and exit code in
# OUT/runs.txt (SMALL_SLOTS=0 leaves out the 1 MiB run; MFSDP_STRATEGIES picks the
# Megatron-FSDP strategies on the 1-D mesh). Megatron-FSDP runs when .megatron/d98e8a64dd holds its package
# (scripts/fetch-megatron-fsdp d98e8a64dd). OUT defaults to $OUT, else /tmp/onegpu-out.
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:-${OUT:-/tmp/onegpu-out}}
CAPS=$OUT/caps
mkdir -p "$CAPS"
export PYTHONUNBUFFERED=1
ROOT=$PWD
run() {  # NAME TIMEOUT ARGS... (the capture's own arguments)
  local n=$1 t=$2; shift 2
  echo "== $n" >> "$OUT/runs.txt"
  local s=$EPOCHREALTIME
  PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH} timeout "$t" \
    python3 -m shardcheck.capture --out "$CAPS/$n" "$@" >> "$OUT/runs.txt" 2>&1
  local rc=$?
  echo "rc=$rc wall=$(awk "BEGIN{print $EPOCHREALTIME - $s}")" >> "$OUT/runs.txt"
  return $rc
}
E=examples/pytorch
run collectives 90 --nproc-per-node 4 --timeout 25 -- python/tests/onegpu/collectives.py
[ $? = 124 ] && { echo "the collectives hung: stopping" >> "$OUT/runs.txt"; exit 1; }
if [ "${SMALL_SLOTS:-1}" = 1 ]; then
  SHARDCHECK_ONE_GPU_SLOT_MB=1 SHARDCHECK_ONE_GPU_PIPE_MB=1 \
    run collectives-1mib 90 --nproc-per-node 4 --timeout 25 -- python/tests/onegpu/collectives.py
fi
run ddp-train-4 60 --nproc-per-node 4 --timeout 25 -- "$E/ddp_train.py"
run fsdp2-train-4 60 --nproc-per-node 4 --timeout 25 -- "$E/fsdp2_train.py"
run fsdp2-hsdp-4 60 --nproc-per-node 4 --timeout 25 -- "$E/fsdp2_train.py" --hsdp
run collective-order-bug-4 60 --nproc-per-node 4 --timeout 25 -- "$E/collective_order_bug.py"
run collective-order-bug-fix-4 60 --nproc-per-node 4 --timeout 25 -- "$E/collective_order_bug.py" --fix
run missing-wait-4 60 --nproc-per-node 4 --timeout 25 -- "$E/missing_wait.py"
run missing-wait-fix-4 60 --nproc-per-node 4 --timeout 25 -- "$E/missing_wait.py" --fix
run cross-group-deadlock-4 60 --nproc-per-node 4 --timeout 12 -- "$E/cross_group_deadlock.py"
run cross-group-deadlock-fix-4 60 --nproc-per-node 4 --timeout 12 -- "$E/cross_group_deadlock.py" --fix
# One rank on real NCCL and on the backend: the same collective records.
run ddp-train-1-nccl 60 -- "$E/ddp_train.py"
SHARDCHECK_ONE_GPU=1 run ddp-train-1-onegpu 60 -- "$E/ddp_train.py"
python3 python/tests/onegpu/compare_records.py "$CAPS/ddp-train-1-nccl" "$CAPS/ddp-train-1-onegpu" \
  >> "$OUT/runs.txt" 2>&1
run ddp-train-2 60 --nproc-per-node 2 --timeout 25 -- "$E/ddp_train.py"
M=$ROOT/.megatron/d98e8a64dd
if [ -d "$M/megatron_fsdp" ]; then
  for st in ${MFSDP_STRATEGIES:-no_shard optim optim_grads optim_grads_params}; do
    PYTHONPATH=$M run "mfsdp-$st-4" 60 --nproc-per-node 4 --timeout 25 -- \
      examples/megatron_fsdp/train.py --strategy $st
  done
  PYTHONPATH=$M run mfsdp-hsdp-4 60 --nproc-per-node 4 --timeout 25 -- \
    examples/megatron_fsdp/train.py --strategy optim_grads_params --mesh hsdp
fi
grep -v "^\[rank[0-9]\]:  " "$OUT/runs.txt" | tail -c 8000
