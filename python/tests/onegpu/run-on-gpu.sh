#!/bin/bash
# The one-GPU backend on a GPU machine (torch 2.x): every collective at 4 ranks, then the
# examples at 4 ranks, each captured under /tmp/onegpu-caps and packed into $OUT/caps.tgz
# (OUT defaults to /tmp/onegpu-out). Prints each run's output and exit code.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/onegpu-out}
mkdir -p "$OUT" /tmp/onegpu-caps
for prog in tests/onegpu/collectives.py ../examples/pytorch/ddp_train.py \
            ../examples/pytorch/fsdp2_train.py ../examples/pytorch/collective_order_bug.py; do
  n=$(basename "$prog" .py)
  echo "== $n" >> "$OUT/runs.txt"
  timeout 150 python3 -m shardcheck.capture --nproc-per-node 4 --out /tmp/onegpu-caps/$n \
    --timeout 40 -- "$prog" >> "$OUT/runs.txt" 2>&1
  echo "rc=$?" >> "$OUT/runs.txt"
done
tar czf "$OUT/caps.tgz" -C /tmp onegpu-caps
cat "$OUT/runs.txt"
