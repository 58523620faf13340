#!/bin/bash
# The seeds' bugs and the fidelity captures in Megatron-FSDP itself, on a GPU machine (one GPU
# is enough: the capture's one-GPU backend runs every rank there), from the repository root:
#   examples/megatron_fsdp/run-seeds.sh [OUT]
# Needs the packages that these commands extract (.megatron/ is ignored by git; carry it):
#   scripts/fetch-megatron-fsdp fa0758c3b6^ fa0758c3b6 1d402ad6e2^ 1d402ad6e2 540f4203ef d98e8a64dd
#   scripts/fetch-megatron-fsdp --graft experimental/optimizer.py@1d402ad6e2^ 540f4203ef
# Captures land in OUT/caps/<name> (the names of tests/capture/h100/), each run's output and
# exit code in OUT/runs.txt, and everything in OUT/caps.tgz (one file to bring back). With
# ./build/cli/shardcheck there, each capture's verdict goes to OUT/verdicts.txt too.
# OUT defaults to $OUT, else /tmp/mfsdp-seeds. ONLY=regex runs only the names it matches.
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-${OUT:-/tmp/mfsdp-seeds}}
CAPS=$OUT/caps
mkdir -p "$CAPS"
export PYTHONUNBUFFERED=1
ROOT=$PWD
M=$ROOT/.megatron
TRAIN=examples/megatron_fsdp/train.py
# PYTHONHASHSEED stays unset: each rank process draws its own hash seed, so anything ordered by
# a str hash differs across ranks, as under torchrun.
unset PYTHONHASHSEED
run() {  # NAME COMMIT-FOLDER TRAIN-ARGS...
  local n=$1 pkg=$2; shift 2
  [[ -z ${ONLY:-} || $n =~ $ONLY ]] || return 0
  if [[ ! -d $M/$pkg/megatron_fsdp ]]; then
    echo "== $n: no $M/$pkg (run scripts/fetch-megatron-fsdp)" >> "$OUT/runs.txt"
    return 0
  fi
  echo "== $n ($pkg: $TRAIN $*)" >> "$OUT/runs.txt"
  local s=$EPOCHREALTIME
  PYTHONPATH=$ROOT/python:$M/$pkg timeout 120 python3 -m shardcheck.capture \
    --nproc-per-node 4 --timeout 25 --out "$CAPS/$n" -- "$TRAIN" "$@" >> "$OUT/runs.txt" 2>&1
  echo "rc=$? wall=$(awk "BEGIN{print $EPOCHREALTIME - $s}")" >> "$OUT/runs.txt"
  if [[ -x build/cli/shardcheck ]]; then
    echo "== $n" >> "$OUT/verdicts.txt"
    build/cli/shardcheck run "$CAPS/$n" >> "$OUT/verdicts.txt" 2>&1
    echo "exit=$?" >> "$OUT/verdicts.txt"
  fi
}
Z3="--strategy optim_grads_params"
# #6187: main_grad allocated on the default stream and replaced on the reduce-scatter stream
# at HSDP's last microbatch. Its parent and the fix, HSDP 2x2 and the 1-D mesh (the code there
# runs no HFSDP), with one microbatch per step and with four.
for c in 07a0de65ad:m6187-before fa0758c3b6:m6187-after; do
  pkg=${c%%:*} n=${c#*:}
  run "$n-hsdp-4" "$pkg" $Z3 --mesh hsdp
  run "$n-hsdp-mb4-4" "$pkg" $Z3 --mesh hsdp --microbatches 4
  run "$n-4" "$pkg" $Z3
  # Activations of 128 rows (131,072 bytes): the first default-stream allocation after the
  # replaced main_grad's free whose best fit is its 133,120-byte block.
  run "$n-hsdp-b128-4" "$pkg" $Z3 --mesh hsdp --batch 128
done
# #6336: the post-step sync over a set of parameter groups. At its parent and the fix only
# ZeRO-3 runs, whose sync is a local cast. The sync all-gathers (over dp_outer) only under
# HFSDP (#5972, after #6336; #6137 moved ZeRO-1/2's gather to the next forward), so the
# parent's optimizer.py also runs on 540f4203ef, the last commit with HFSDP before #6137 (the
# graft), three times, beside 540f4203ef itself. TinyLM's units differ in size, so two ranks
# that sync them in different orders issue collectives that differ in shape.
for c in 8e70f69827:m6336-before 1d402ad6e2:m6336-after; do
  pkg=${c%%:*} n=${c#*:}
  run "$n-hsdp-4" "$pkg" $Z3 --mesh hsdp
  run "$n-4" "$pkg" $Z3
done
for i in 1 2 3; do
  run "m6336-graft-hfsdp-4-$i" 540f4203ef-graft-8e70f69827 --model tinylm $Z3 --mesh hfsdp
done
run m6336-fix-hfsdp-4 540f4203ef --model tinylm $Z3 --mesh hfsdp
# Fidelity: TinyLM's shapes, 4 microbatches, every strategy the simulator models, at HEAD.
for st in no_shard optim optim_grads optim_grads_params; do
  run "mfsdp-tinylm-$st-4" d98e8a64dd --model tinylm --microbatches 4 --strategy $st
done
run mfsdp-tinylm-hsdp-4 d98e8a64dd --model tinylm --microbatches 4 $Z3 --mesh hsdp
run mfsdp-tinylm-hfsdp-4 d98e8a64dd --model tinylm --microbatches 4 $Z3 --mesh hfsdp
tar czf "$OUT/caps.tgz" -C "$OUT" caps && rm -rf "$CAPS"
grep -v "^\[rank[0-9]\]:  " "$OUT/runs.txt" | tail -c 6000
