#!/bin/bash
# The value checks' programs on a GPU machine (torch 2.x, one GPU is enough), from the
# repository root:  python/tests/onegpu/run-values-on-gpu.sh [OUT]
# Captures, at 4 ranks on the one-GPU backend, each value reproducer with and without --fix and
# the clean programs (DDP, FSDP2, Megatron-FSDP when .megatron/d98e8a64dd holds its package) with
# values on, into OUT/caps/<name> (the names of tests/capture/h100/); then the cost of value
# capture: ddp_train.py captured with and without --no-values, twice each, alternating, at 3
# steps and at 43, each wall time in OUT/runs.txt. OUT defaults to $OUT, else /tmp/values-out. ONLY=REGEX runs
# only the captures whose names match.
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:-${OUT:-/tmp/values-out}}
CAPS=$OUT/caps
mkdir -p "$CAPS"
export PYTHONUNBUFFERED=1
ROOT=$PWD
E=examples/pytorch
run() {  # NAME ARGS... (the capture's own arguments after --out); ONLY: a regex of names to run
  local n=$1; shift
  [[ -n ${ONLY:-} && ! $n =~ $ONLY ]] && return
  echo "== $n" >> "$OUT/runs.txt"
  local s=$EPOCHREALTIME
  PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH} timeout 90 \
    python3 -m shardcheck.capture --out "$CAPS/$n" "$@" >> "$OUT/runs.txt" 2>&1
  echo "rc=$? wall=$(awk "BEGIN{print $EPOCHREALTIME - $s}")" >> "$OUT/runs.txt"
}
run replica-drift-4 --nproc-per-node 4 --timeout 25 -- "$E/replica_drift.py"
run replica-drift-fix-4 --nproc-per-node 4 --timeout 25 -- "$E/replica_drift.py" --fix
run replica-drift-lr-4 --nproc-per-node 4 --timeout 25 -- "$E/replica_drift.py" --scheduler
run replica-drift-lr-fix-4 --nproc-per-node 4 --timeout 25 -- "$E/replica_drift.py" --scheduler --fix
run expert-parallel-4 --nproc-per-node 4 --timeout 25 -- "$E/expert_parallel.py"
run expert-parallel-fix-4 --nproc-per-node 4 --timeout 25 -- "$E/expert_parallel.py" --fix
run tied-norm-2 --nproc-per-node 2 --timeout 25 -- "$E/tied_norm.py"
run tied-norm-fix-2 --nproc-per-node 2 --timeout 25 -- "$E/tied_norm.py" --fix
run tp-norm-2 --nproc-per-node 2 --timeout 25 -- "$E/tp_norm.py"
run tp-norm-fix-2 --nproc-per-node 2 --timeout 25 -- "$E/tp_norm.py" --fix
run dtensor-tp-2 --nproc-per-node 2 --timeout 25 -- "$E/dtensor_tp.py"
run dtensor-tp-fix-2 --nproc-per-node 2 --timeout 25 -- "$E/dtensor_tp.py" --fix
run double-reduction-4 --nproc-per-node 4 --timeout 25 -- "$E/double_reduction.py"
run double-reduction-fix-4 --nproc-per-node 4 --timeout 25 -- "$E/double_reduction.py" --fix
run double-reduction-ddp-4 --nproc-per-node 4 --timeout 25 -- "$E/double_reduction.py" --ddp
run double-reduction-ddp-fix-4 --nproc-per-node 4 --timeout 25 -- "$E/double_reduction.py" --ddp --fix
run ddp-train-values-4 --nproc-per-node 4 --timeout 25 -- "$E/ddp_train.py"
run fsdp2-train-values-4 --nproc-per-node 4 --timeout 25 -- "$E/fsdp2_train.py"
if [[ -d .megatron/d98e8a64dd/megatron_fsdp ]]; then
  PYTHONPATH=.megatron/d98e8a64dd run mfsdp-tinylm-values-4 --nproc-per-node 4 --timeout 25 -- \
    examples/megatron_fsdp/train.py --model tinylm --microbatches 4 --strategy optim_grads_params
fi
for i in 1 2; do
  run "cost-values-$i" --nproc-per-node 4 --timeout 25 -- "$E/ddp_train.py"
  run "cost-no-values-$i" --no-values --nproc-per-node 4 --timeout 25 -- "$E/ddp_train.py"
done
# Per step: the same at 3 and 43 steps, so start-up cancels: (wall at 43 - wall at 3) / 40.
for i in 1 2; do
  run "cost-steps-values-43-$i" --nproc-per-node 4 --timeout 40 -- "$E/ddp_train.py" --steps 43
  run "cost-steps-no-values-43-$i" --no-values --nproc-per-node 4 --timeout 40 -- "$E/ddp_train.py" --steps 43
done
rm -rf "$CAPS"/cost-*
tar czf "$OUT/caps.tgz" -C "$OUT" caps && rm -rf "$CAPS"
grep -E "^(==|rc=)|Error|rank [0-9]" "$OUT/runs.txt" | tail -c 5000
