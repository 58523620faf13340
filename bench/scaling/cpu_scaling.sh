#!/bin/sh
# Schedules per second of one fixed workload at 1, 2, 4, 8 and 16 workers: threads of one
# process (`-j N`), then processes under mpirun (`mpirun -np N ... -j 1`). Checks that every
# configuration prints what one worker prints, and writes the figures as JSON and Markdown.
# Self-contained: needs only a built shardcheck, the scenario below and (for processes) mpirun.
#   bench/scaling/cpu_scaling.sh BUILD/cli/shardcheck [MPIRUN] [OUT_DIR]
# Environment: RUNS (schedules, default 768), WORKERS (default "1 2 4 8 16"), REPEAT (runs
# of each configuration, the median kept; default 1: on a shared host 3 steadies the figures),
# SCENARIO (default scenarios/catalog/main-grad-alloc-default-stream-fixed.yaml, beside this
# script's repository). About 2 minutes on 16 cores; the 1-worker runs take the most.
set -eu
bin=$(realpath "$1")
mpirun=${2:-$(command -v mpirun || true)}
out=${3:-out/scaling}
here=$(cd "$(dirname "$0")/../.." && pwd)
runs=${RUNS:-768}
repeat=${REPEAT:-1}
workers=${WORKERS:-"1 2 4 8 16"}
scenario=${SCENARIO:-$here/scenarios/catalog/main-grad-alloc-default-stream-fixed.yaml}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
mask() { sed -E 's/([ (])in [0-9.e+-]+ s/\1in X s/'; }

rows=""
# measure MODE N [RUNS]: prints seconds; stdout of the run goes to $tmp/MODE-N.txt
measure() {
  mode=$1
  n=$2
  r=${3:-$runs}
  t0=$(now)
  if [ "$mode" = threads ]; then
    SHARDCHECK_MPI=0 "$bin" run "$scenario" --runs "$r" -j "$n" >"$tmp/run.txt" 2>"$tmp/err.txt" || true
  else
    "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$n" "$bin" run "$scenario" --runs "$r" -j 1 \
      >"$tmp/run.txt" 2>"$tmp/err.txt" || true
  fi
  t1=$(now)
  [ "$r" = "$runs" ] && mask <"$tmp/run.txt" >"$tmp/$mode-$n.txt"
  echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}

# median MODE N [RUNS]: the median seconds of $repeat measures
median() {
  i=0
  : >"$tmp/times"
  while [ "$i" -lt "$repeat" ]; do
    measure "$@" >>"$tmp/times"
    echo >>"$tmp/times"
    i=$((i + 1))
  done
  sort -n "$tmp/times" | awk '{ t[NR] = $1 } END { printf "%s", t[int((NR + 1) / 2)] }'
}

echo "workload: shardcheck run $scenario --runs $runs (median of $repeat)"
measure threads 1 1 >/dev/null  # a warm-up: the binary and the scenario into the page cache
for mode in threads processes; do
  if [ "$mode" = processes ] && { [ -z "$mpirun" ] || ! [ -x "$mpirun" ]; }; then
    echo "no mpirun: processes skipped"
    continue
  fi
  base=""
  for n in $workers; do
    # The start: the same command with one schedule per worker (loading the scenario, the
    # threads' or mpirun's start, one schedule's work), a cost that N workers do not divide.
    start=$(median "$mode" "$n" "$n")
    s=$(median "$mode" "$n")
    if ! cmp -s "$tmp/threads-1.txt" "$tmp/$mode-$n.txt" 2>/dev/null && [ -f "$tmp/threads-1.txt" ]; then
      echo "$mode $n: the output differs from one thread's:" >&2
      diff "$tmp/threads-1.txt" "$tmp/$mode-$n.txt" | head -20 >&2
      cat "$tmp/err.txt" >&2
      exit 1
    fi
    [ -z "$base" ] && base=$s && base_start=$start
    # Past the start: (one worker's time less its start) / (N workers' time less theirs).
    line=$(awk -v m="$mode" -v n="$n" -v s="$s" -v b="$base" -v r="$runs" -v st="$start" -v bst="$base_start" 'BEGIN {
      rate = r / s; speedup = b / s; past = (s > st) ? (b - bst) / (s - st) : 0
      printf "%s %d %.3f %.1f %.2f %.2f %.3f %.2f %.2f", m, n, s, rate, speedup, speedup / n, st, past, past / n }')
    echo "$line" | awk '{printf "%-9s %2d workers: %7.2f s, %7.1f schedules/s, speedup %5.2f, efficiency %4.2f; start %.2f s, past it %5.2f (%4.2f)\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}'
    rows="$rows$line
"
  done
done

cores=$(nproc)
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || echo unknown)
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
version=$("$bin" --version)
printf '%s' "$rows" | awk -v runs="$runs" -v repeat="$repeat" -v scen="$scenario" -v cores="$cores" -v cpu="$cpu" -v date="$date" -v ver="$version" '
  BEGIN { printf "{\n  \"workload\": \"shardcheck run %s --runs %d\",\n  \"repeat\": %d,\n  \"machine\": {\"cores\": %d, \"cpu\": \"%s\"},\n  \"date\": \"%s\",\n  \"version\": \"%s\",\n  \"results\": [", scen, runs, repeat, cores, cpu, date, ver }
  NF == 9 { printf "%s\n    {\"mode\": \"%s\", \"workers\": %d, \"seconds\": %s, \"schedules_per_s\": %s, \"speedup\": %s, \"efficiency\": %s, \"start_seconds\": %s, \"speedup_past_start\": %s, \"efficiency_past_start\": %s}", (n++ ? "," : ""), $1, $2, $3, $4, $5, $6, $7, $8, $9 }
  END { printf "\n  ]\n}\n" }' >"$out/cpu_scaling.json"
{
  echo "# CPU scaling: schedules per second"
  echo
  echo "\`shardcheck run $(basename "$scenario") --runs $runs\` ($version), $cores cores ($cpu), $date."
  echo "Threads: \`-j N\` in one process; processes: \`mpirun -np N ... -j 1\`. Efficiency = speedup / N. Seconds: the median of $repeat."
  echo "Start: the same command with one schedule per worker; past it: (T1 - start1) / (TN - startN), and that / N."
  echo
  echo "| mode | workers | seconds | schedules/s | speedup | efficiency | start s | speedup past start | efficiency past start |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s' "$rows" | awk 'NF == 9 { printf "| %s | %d | %.2f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
} >"$out/cpu_scaling.md"
echo "wrote $out/cpu_scaling.json and $out/cpu_scaling.md"
