#!/usr/bin/env bash
# What a new user runs first, checked as they would run it: `make install` (cmake --install)
# into a scratch prefix, reproducer lines that run as printed (installed, and from the build
# tree), `make demo` installing only the demo's packages, and `make` on a build folder
# configured by another checkout. One check per call:
#   install_check.sh SOURCE_DIR BUILD_DIR install|reproducer|deps|stale
set -euo pipefail
src=$1 build=$2 check=$3
scratch=$(mktemp -d /tmp/shardcheck-install-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
race="$src/scenarios/trace/reuse-race.yaml"

case "$check" in
install)
  cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/log" 2>&1 || { cat "$scratch/log"; fail "cmake --install"; }
  [ -x "$scratch/prefix/bin/shardcheck" ] || fail "no bin/shardcheck"
  "$scratch/prefix/bin/shardcheck" --version | grep -q '^shardcheck [0-9]' || fail "--version of the installed binary"
  [ -f "$scratch/prefix/share/shardcheck/scenarios/trace/reuse-race.yaml" ] || fail "scenarios not installed"
  if command -v python3 >/dev/null; then
    init=$(find "$scratch/prefix/lib" -path '*/shardcheck/capture/__init__.py' | head -1)
    [ -n "$init" ] || fail "the Python package was not installed"
    site=$(dirname "$(dirname "$(dirname "$init")")")
    [ -z "$(find "$site/shardcheck" -name __pycache__)" ] || fail "__pycache__ was copied"
    PYTHONPATH="$site" python3 -c 'import shardcheck, os, sys; sys.exit(0 if os.path.realpath(shardcheck.__file__).startswith(os.path.realpath(sys.argv[1])) else 1)' "$site" \
      || fail "python3 does not import the installed package from $site"
  fi
  ;;
reproducer)
  # Installed: PATH finds it, so the line says `shardcheck` and runs as printed.
  mkdir -p "$scratch/bin"
  ln -s "$build/cli/shardcheck" "$scratch/bin/shardcheck"
  line=$(cd "$scratch" && PATH="$scratch/bin:$PATH" shardcheck run "$race" | sed -n 's/^  reproduce: //p' | head -1)
  [[ "$line" == "shardcheck replay "* ]] || fail "installed: reproducer is '$line'"
  (cd "$scratch" && PATH="$scratch/bin:$PATH" eval "$line" >/dev/null) || fail "installed: '$line' does not run"
  # From the build tree, with no shardcheck on PATH: the path it was run by.
  line=$(cd "$src" && PATH=/usr/bin:/bin "$build/cli/shardcheck" run "$race" | sed -n 's/^  reproduce: //p' | head -1)
  [[ "$line" != "shardcheck "* ]] || fail "build tree: reproducer says 'shardcheck' though PATH has none: '$line'"
  (cd "$src" && PATH=/usr/bin:/bin eval "$line" >/dev/null) || fail "build tree: '$line' does not run"
  # The report's reproducer is the same line.
  (cd "$src" && PATH=/usr/bin:/bin "$build/cli/shardcheck" run "$race" --report "$scratch/report" >/dev/null)
  grep -qF "$line" "$scratch/report/report.md" || fail "report.md does not carry '$line'"
  ;;
deps)
  base=$("$src/scripts/install-deps" --list)
  for p in chromium libopenmpi-dev openmpi-bin catch2 libbenchmark-dev python3-torch; do
    grep -qx "$p" <<<"$base" && fail "the base set (make demo) installs $p"
  done
  for p in libyaml-cpp-dev libcli11-dev librapidcheck-dev; do
    grep -qx "$p" <<<"$base" || fail "the base set lacks $p"
  done
  tests=$("$src/scripts/install-deps" --list test)
  for p in chromium catch2 libopenmpi-dev; do grep -qx "$p" <<<"$tests" || fail "the test set lacks $p"; done
  demo=$(make -n -C "$src" demo 2>/dev/null)
  grep -q 'install-deps test' <<<"$demo" && fail "make demo installs the test packages"
  grep -q -- '--target shardcheck' <<<"$demo" || fail "make demo builds more than the executable"
  ;;
stale)
  mkdir -p "$scratch/tree/build"
  cp "$src/Makefile" "$scratch/tree/"
  echo "CMAKE_HOME_DIRECTORY:INTERNAL=/somewhere/else" >"$scratch/tree/build/CMakeCache.txt"
  if make -C "$scratch/tree" configure >"$scratch/out" 2>&1; then fail "make configure passed on a stale build"; fi
  grep -q "run 'make clean' first" "$scratch/out" || { cat "$scratch/out"; fail "no make clean advice"; }
  ;;
*) fail "unknown check '$check'" ;;
esac
echo "ok: $check"
