#!/usr/bin/env bash
# Runs the forced-replay commands of docs/gpu.md on a GPU machine and writes them with their
# output, the machine and the date as a Markdown block; bench/gpu/paste-block.py puts it in docs/gpu.md.
#   bench/gpu/force-race.sh ./build/cli/shardcheck OUT.md        (from the repository root)
set -uo pipefail
bin=${1:?usage: force-race.sh SHARDCHECK_BINARY OUT.md}
out=${2:?usage: force-race.sh SHARDCHECK_BINARY OUT.md}
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
{
  echo "Measured on $(nvidia-smi -L | wc -l) × ${gpu%%,*} (driver ${gpu##*, }), $(date -u +%Y-%m-%d):"
  echo
  echo '```'
  for files in "scenarios/trace/reuse-race.yaml $(ls scenarios/trace/reuse-fix-*.yaml | tr '\n' ' ')" \
    "scenarios/catalog/main-grad-alloc-default-stream.yaml scenarios/catalog/main-grad-alloc-default-stream-fixed.yaml"; do
    # shellcheck disable=SC2086
    echo "\$ shardcheck run ${files% } --backend gpu --runs 10 --force-race"
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    "$bin" run $files --backend gpu --runs 10 --force-race 2>&1
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    printf '# exit %d, %d.%d s for the whole command\n' "$rc" $((ms / 1000)) $((ms % 1000 / 100))
    echo
  done
  echo '```'
} >"$out"
cat "$out"
