#!/bin/bash
# The reproducers of captures as users meet them (allocator segments, CUDA graphs, the
# allocator backends, threads) on a GPU machine (torch 2.x, one GPU is enough), from the repository root:
#   python/tests/onegpu/run-captures-on-gpu.sh [OUT]
# Captures each at 2 ranks on the one-GPU backend, with and without --fix, into OUT/cases/<name>
# (the names of tests/capture/h200/), with what each program printed and its exit status in
# OUT/cases.txt; checks each capture with SHARDCHECK_BIN when set. OUT defaults to $OUT, else
# /tmp/cases-out. ONLY=REGEX runs only the captures whose names match.
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:-${OUT:-/tmp/cases-out}}
CAPS=$OUT/cases
mkdir -p "$CAPS"
export PYTHONUNBUFFERED=1
E=examples/pytorch
run() {  # NAME ARGS... (the capture's own arguments after --out)
  local n=$1; shift
  [[ -n ${ONLY:-} && ! $n =~ $ONLY ]] && return
  echo "== $n" >> "$OUT/cases.txt"
  PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} timeout 60 \
    python3 -m shardcheck.capture --out "$CAPS/$n" "$@" >> "$OUT/cases.txt" 2>&1
  echo "rc=$?" >> "$OUT/cases.txt"
  if [[ -n ${SHARDCHECK_BIN:-} ]]; then
    "$SHARDCHECK_BIN" run "$CAPS/$n" >> "$OUT/cases.txt" 2>&1
    echo "check rc=$?" >> "$OUT/cases.txt"
  fi
}
for fix in "" --fix; do
  s=${fix:+-fix}
  run "coalesced-reuse$s-2" --nproc-per-node 2 --timeout 40 -- "$E/coalesced_reuse.py" $fix
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    run "coalesced-reuse-expandable$s-2" --nproc-per-node 2 --timeout 40 -- "$E/coalesced_reuse.py" $fix
  run "graph-replay$s-2" --nproc-per-node 2 --timeout 40 -- "$E/graph_replay.py" $fix
  run "graph-branches$s-2" --nproc-per-node 2 --timeout 40 -- "$E/graph_branches.py" $fix
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
    run "grad-reuse-async$s-2" --nproc-per-node 2 --timeout 40 -- "$E/grad_reuse_race.py" $fix
  EXAMPLE_BACKEND=gloo \
    run "gloo-inplace$s-2" --nproc-per-node 2 --timeout 40 -- "$E/gloo_inplace_race.py" $fix
  run "thread-prefetch$s-2" --nproc-per-node 2 --timeout 40 -- "$E/thread_prefetch.py" $fix
  run "thread-backward$s-2" --nproc-per-node 2 --timeout 40 -- "$E/thread_backward.py" $fix
done
for conf in "" backend:cudaMallocAsync; do
  PYTORCH_CUDA_ALLOC_CONF=$conf python3 python/tests/onegpu/probe_allocator.py >> "$OUT/cases.txt" 2>&1
done
tar czf "$OUT/cases.tgz" -C "$OUT" cases && rm -rf "$CAPS"
grep -E "^(==|rc=|check rc=|FOUND|clean|PARTIAL)|spans|Error|backend|\[[a-z_]+\] rank" "$OUT/cases.txt" | cut -c1-300 | tail -c 6000
