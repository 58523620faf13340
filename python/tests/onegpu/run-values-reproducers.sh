#!/bin/bash
# The value reproducers of examples/pytorch/values, each captured and checked, from the
# repository root:  python/tests/onegpu/run-values-reproducers.sh OUT [BIN]
# Captures each program and its --fix at its ranks (on a GPU machine the one-GPU backend; with
# DEVICE=cpu on CPU over gloo), checks each capture with BIN (default build/cli/shardcheck) and
# writes OUT/values.md: a row per capture with the class of the program's bug as its ground
# truth established it (examples/pytorch/values/README.md; none for every --fix) beside the
# finding kinds shardcheck reports (or clean). The captures go to OUT/values.tgz. ONLY=REGEX
# runs the programs whose names match; JOBS=N captures N at once (default 1). RECHECK=1 checks
# the captures an earlier run left in OUT/caps (its values.tgz unpacked in OUT) without capturing.
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:?usage: run-values-reproducers.sh OUT [BIN]}
BIN=$(realpath "${2:-build/cli/shardcheck}")
PY=${PYTHON:-python3}
mkdir -p "$OUT/caps"
export PYTHONUNBUFFERED=1 OUT BIN PY
device=(); [[ -n ${DEVICE:-} ]] && device=(--device "$DEVICE")
export DEVICE_ARGS="${device[*]}"

# One capture and its verdict: NAME VARIANT RANKS PROGRAM; a row into OUT/caps/NAME-VARIANT.row.
one() {
  local n=$1 v=$2 ranks=$3 f=$4 arg=() cap=$OUT/caps/$1-$2
  [[ $v == fix ]] && arg=(--fix)
  local rc=0 verdict
  if [[ -z ${RECHECK:-} ]]; then
    PYTHONPATH=$PWD/python timeout 150 "$PY" -m shardcheck.capture --out "$cap" \
      --nproc-per-node "$ranks" $DEVICE_ARGS --timeout 60 -- "$f" "${arg[@]}" > "$cap.log" 2>&1
    rc=$?
  fi
  verdict=$("$BIN" run "$cap" 2>&1 | sed -n 's/^\(clean\|FOUND\|PARTIAL\) *[^:]*: //p' | head -1)
  local truth=none
  if [[ $v == bug ]]; then
    truth=$(awk -F'|' -v p="\`$n.py\`" 'index($2, p) { gsub(/^ +| +$/, "", $4); print $4 }' \
      examples/pytorch/values/README.md)
  fi
  echo "| $n | $v | $ranks | $truth | ${verdict:-capture rc=$rc} |" > "$cap.row"
}
export -f one

for f in examples/pytorch/values/*.py; do
  n=$(basename "$f" .py)
  [[ $n == _* ]] && continue
  [[ -n ${ONLY:-} && ! $n =~ $ONLY ]] && continue
  ranks=$(sed -n 's/^RANKS = \([0-9]*\).*/\1/p' "$f" | head -1)
  for v in bug fix; do echo "$n $v ${ranks:-2} $f"; done
done | xargs -P "${JOBS:-1}" -L 1 bash -c 'one "$@"' _

{
  echo "| program | variant | ranks | ground truth | shardcheck |"
  echo "|---|---|---|---|---|"
  sort "$OUT"/caps/*.row
} > "$OUT/values.md"
rm -f "$OUT"/caps/*.row
tar czf "$OUT/values.tgz" -C "$OUT" caps && rm -rf "$OUT/caps"
cat "$OUT/values.md"
