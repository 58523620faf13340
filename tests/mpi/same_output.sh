#!/bin/sh
# Under an MPI launcher, `run`, `explore` and `props` share their seeds among the processes and
# process 0 prints: the output and exit code must be those of one process, byte for byte
# (wall-clock times aside). Exits 77 (skipped) when mpirun or MPI support is missing.
#   tests/mpi/same_output.sh BUILD/cli/shardcheck SOURCE_DIR [mpirun]
set -u
bin=$1
src=$2
mpirun=${3:-$(command -v mpirun || true)}
if [ -z "$mpirun" ] || ! [ -x "$mpirun" ]; then
  echo "SKIPPED: no mpirun"
  exit 77
fi
cd "$src" || exit 1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Seconds differ from run to run; nothing else may.
mask() {
  sed -E 's/([ (])in [0-9.e+-]+ (min [0-9]+ s|s|ms)/\1in X s/; s/ +[0-9]+(\.[0-9]+)? (s|ms)( |$)/ X s\3/g; s/\([0-9]+(\.[0-9]+)? (s|ms)\)/(X s)/'
}
launch() { "$mpirun" --allow-run-as-root --oversubscribe "$@"; }
status=0
check() {  # name, then the command's arguments
  name=$1
  shift
  rm -rf "$out/props"
  SHARDCHECK_MPI=0 "$bin" "$@" >"$out/one.raw" 2>&1
  one_rc=$?
  mask <"$out/one.raw" >"$out/one.txt"
  for np in 2 3; do
    rm -rf "$out/props"
    launch -np "$np" "$bin" "$@" >"$out/many.raw" 2>"$out/many.err"
    many_rc=$?
    mask <"$out/many.raw" >"$out/many.txt"
    if grep -q "built without MPI" "$out/many.err"; then
      echo "SKIPPED: shardcheck was built without MPI"
      exit 77
    fi
    if [ "$one_rc" != "$many_rc" ] || ! cmp -s "$out/one.txt" "$out/many.txt"; then
      echo "FAIL $name with $np processes: exit $many_rc (one process: $one_rc)"
      diff "$out/one.txt" "$out/many.txt" | head -40
      cat "$out/many.err"
      status=1
    else
      echo "ok   $name with $np processes (exit $many_rc, $(wc -l <"$out/one.txt") lines)"
    fi
  done
}
# Every trace scenario, and a training bug whose first finding is at the second seed: with
# one thread per process it is another process's seed, whose finding process 0 fills in.
check "run trace" run scenarios/trace/*.yaml -j 1
check "run training" run scenarios/catalog/main-grad-alloc-default-stream.yaml --seed 1 --runs 12 -j 1 --check-determinism
check "explore first finding" explore scenarios/catalog/main-grad-alloc-default-stream.yaml --seed 1 --runs 10 -j 1
check "explore all" explore scenarios/trace/reuse-race.yaml --runs 40 --all -j 2 --check-determinism
# A captured race in a loop: each process's instances of one finding per pair of lines (its
# spread) reach process 0 whole.
check "run capture spread" run tests/capture/fixtures/race-loop -j 1 --check-determinism
check "props" props --cases 12 -j 1 --out "$out/props"
check "props mutation" props --mutations --only matches_reference --cases 5 -j 1 --out "$out/props"
exit $status
