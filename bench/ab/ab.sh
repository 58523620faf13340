#!/usr/bin/env bash
# Two builds of a benchmark program side by side: PAIRS alternating passes (before, after, before,
# ...), one process each, pinned to one core where taskset exists, so both builds see the same
# minutes of a machine whose speed drifts. Prints each pass's ops_per_s per benchmark, then per
# benchmark the medians and the median of the pair-by-pair ratios (after / before).
#   bench/ab/ab.sh OLD/bench/sim_bench NEW/bench/sim_bench [PAIRS=8] [FILTER]
set -uo pipefail
before=${1:?usage: ab.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [FILTER]}
after=${2:?usage: ab.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [FILTER]}
pairs=${3:-8}
filter=${4:-DetectorsOn_FixedModel/(2|64|256)/}
pin=()
command -v taskset >/dev/null && pin=(taskset -c "${AB_CPU:-0}")
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
log=$(mktemp)
for i in $(seq "$pairs"); do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    "${pin[@]}" "$bin" --benchmark_filter="$filter" 2>/dev/null |
      awk -v i="$i" -v side="$side" '/ops_per_s=/ {
        split($1, name, "/real_time"); v = $0; sub(/.*ops_per_s=/, "", v); sub(/\/s.*/, "", v)
        m = 1; if (v ~ /k$/) m = 1e3; if (v ~ /M$/) m = 1e6; sub(/[kM]$/, "", v)
        printf "%s %s %s %.0f\n", i, side, name[1], v * m }' | tee -a "$log"
  done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$log" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    i, side, name, ops = line.split()
    runs.setdefault(name, {}).setdefault(side, {})[int(i)] = float(ops)
for name, sides in runs.items():
    b, a = sides.get("before", {}), sides.get("after", {})
    ratios = [a[i] / b[i] for i in b if i in a]
    if not ratios:
        continue
    print(f"{name}: before median {statistics.median(b.values()) / 1e3:.0f} k/s, after median "
          f"{statistics.median(a.values()) / 1e3:.0f} k/s, after/before median of {len(ratios)} pairs "
          f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
PY
rm -f "$log"
