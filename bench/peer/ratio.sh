#!/usr/bin/env bash
# The check against its gloo peer as whole processes, on any machine with python3-torch: N runs
# of `shardcheck compare scenarios/training/zero1-exact.yaml --against distopt --steps 3` and M of
# bench/peer/gloo_equivalence.py, each process timed by its wall clock; prints the medians and
# the two ratios make bench reports (process against process, and the peer's own check time
# against shardcheck's whole process: a lower bound of check against check).
#   bench/peer/ratio.sh build/cli/shardcheck [N=15] [M=5]
set -uo pipefail
bin=${1:?usage: ratio.sh SHARDCHECK_BINARY [N] [M]}
n=${2:-15}
m=${3:-5}
python=${SHARDCHECK_PEER_PYTHON:-python3}
now() { date +%s%N; }
ours=() peer=() check=()
for _ in $(seq "$n"); do
  t=$(now)
  "$bin" compare scenarios/training/zero1-exact.yaml --against distopt --steps 3 >/dev/null || exit 1
  ours+=($((($(now) - t) / 1000)))
done
j=$(mktemp)
for _ in $(seq "$m"); do
  t=$(now)
  "$python" bench/peer/gloo_equivalence.py --json "$j" >/dev/null || exit 1
  peer+=($((($(now) - t) / 1000)))
  check+=("$("$python" -c "import json,sys; print(int(json.load(open(sys.argv[1]))['check_s'] * 1e6))" "$j")")
done
rm -f "$j"
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
o=$(median "${ours[@]}") p=$(median "${peer[@]}") c=$(median "${check[@]}")
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); torch $("$python" -c 'import torch; print(torch.__version__)'); $(date -u +%Y-%m-%d)"
awk -v o="$o" -v p="$p" -v c="$c" -v n="$n" -v m="$m" 'BEGIN {
  printf "shardcheck compare process: median %.1f ms of %d\n", o / 1000, n
  printf "gloo peer process:          median %.1f ms of %d (its check alone: %.1f ms)\n", p / 1000, m, c / 1000
  printf "process against process:    %.0fx\n", p / o
  printf "peer check against our whole process: %.1fx\n", c / o
}'
