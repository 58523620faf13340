#!/bin/bash
# The value reproducers of examples/pytorch/values on a GPU machine (torch 2.x, one GPU is
# enough), from the repository root:  python/tests/onegpu/run-values-reproducers.sh OUT [BIN]
# Captures each program and its --fix at its ranks on the one-GPU backend, checks each capture
# with BIN (default build/cli/shardcheck) and writes OUT/values.md: a row per capture with the
# finding kinds shardcheck reports (or clean), beside the class of the program's bug. The
# captures go to OUT/values.tgz. ONLY=REGEX runs the programs whose names match.
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:?usage: run-values-reproducers.sh OUT [BIN]}
BIN=${2:-build/cli/shardcheck}
mkdir -p "$OUT/caps"
export PYTHONUNBUFFERED=1
echo "| program | variant | ranks | shardcheck |" > "$OUT/values.md"
echo "|---|---|---|---|" >> "$OUT/values.md"
for f in examples/pytorch/values/*.py; do
  n=$(basename "$f" .py)
  [[ $n == _* ]] && continue
  [[ -n ${ONLY:-} && ! $n =~ $ONLY ]] && continue
  ranks=$(sed -n 's/^RANKS = \([0-9]*\).*/\1/p' "$f" | head -1)
  ranks=${ranks:-2}
  for v in bug fix; do
    arg=(); [[ $v == fix ]] && arg=(--fix)
    cap=$OUT/caps/$n-$v
    PYTHONPATH=$PWD/python timeout 120 python3 -m shardcheck.capture --out "$cap" \
      --nproc-per-node "$ranks" --timeout 40 -- "$f" "${arg[@]}" > "$OUT/caps/$n-$v.log" 2>&1
    rc=$?
    verdict=$("$BIN" run "$cap" 2>&1 | sed -n 's/^\(clean\|FOUND\|PARTIAL\) *[^:]*: //p' | head -1)
    echo "| $n | $v | $ranks | ${verdict:-capture rc=$rc} |" >> "$OUT/values.md"
  done
done
tar czf "$OUT/values.tgz" -C "$OUT" caps && rm -rf "$OUT/caps"
cat "$OUT/values.md"
