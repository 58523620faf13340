# Thin wrapper over CMake presets, the way DuckDB's Makefile wraps its build.
# `make demo` and `make test` are the whole quick start on a fresh Debian 12 machine.
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

# A build folder configured from another checkout (a moved or copied tree) makes CMake fail
# with a cache error; say what to do instead.
STALE_BUILD = $(shell test -f build/CMakeCache.txt && ! grep -qx 'CMAKE_HOME_DIRECTORY:INTERNAL=$(CURDIR)' build/CMakeCache.txt && echo yes)

.PHONY: all deps base-deps configure build demo test golden install test-sanitize fuzz bench gpu-check gpu-bench clean

all: build

# `make demo` installs what the shardcheck executable and the demo need, and builds only it;
# `make test` adds what only the tests and the GPU backend's MPI launch use (Catch2, Chromium
# for the HTML render test, Open MPI).
deps:
	@scripts/install-deps test

base-deps:
	@scripts/install-deps

configure:
	@if [ "$(STALE_BUILD)" = yes ]; then \
	  echo "make: build/ was configured from another checkout ($$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build/CMakeCache.txt)); run 'make clean' first" >&2; exit 2; fi
	@cmake --preset release >/dev/null

build: base-deps configure
	@cmake --build --preset release -j $(JOBS)

demo: base-deps configure
	@cmake --build --preset release -j $(JOBS) --target shardcheck
	./build/cli/shardcheck demo

# Installs the shardcheck binary, the scenarios the demo runs and the Python capture package
# under PREFIX (/usr/local: `shardcheck` is then on PATH, and reproducer lines run as printed).
PREFIX ?= /usr/local
install: base-deps configure
	@cmake --build --preset release -j $(JOBS) --target shardcheck
	cmake --install build --prefix $(PREFIX)

test: deps
	@$(MAKE) --no-print-directory build
	ctest --test-dir build --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# Regenerates tests/golden/digests.txt, which `make test` checks: run it only when a change is
# meant to alter schedules, traces or the RNG, and commit the diff it makes.
golden: build
	./build/tests/golden/golden_digests --write tests/golden/digests.txt

# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer (build-sanitize/, no
# gpu/): any report fails its test.
test-sanitize:
	@scripts/install-deps test sanitize
	@cmake --preset sanitize >/dev/null
	@cmake --build --preset sanitize -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-sanitize --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# libFuzzer on the scenario loader, the command-line parser and the capture loader, FUZZ_SECONDS each, starting
# from tests/fuzz/corpus/ and, for the scenario loader, the shipped scenarios themselves
# (scenarios/catalog, trace, training: read-only), and growing build-fuzz/corpus/. A crash is saved to
# build-fuzz/artifacts/TARGET/ and stops `make fuzz` with the command that reproduces it.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= fuzz_scenario fuzz_cli fuzz_capture
FUZZ_ARGS ?= -timeout=10 -rss_limit_mb=2048
fuzz:
	@scripts/install-deps fuzz
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do \
	  c=$${t#fuzz_}; mkdir -p build-fuzz/corpus/$$c build-fuzz/artifacts/$$c; \
	  echo "== $$t: $(FUZZ_SECONDS) s"; \
	  seeds=tests/fuzz/corpus/$$c; [ $$c = scenario ] && seeds="$$seeds scenarios/catalog scenarios/trace scenarios/training"; \
	  build-fuzz/tests/fuzz/$$t build-fuzz/corpus/$$c $$seeds -max_total_time=$(FUZZ_SECONDS) \
	    -dict=tests/fuzz/$$c.dict $(FUZZ_ARGS) -artifact_prefix=build-fuzz/artifacts/$$c/ -print_final_stats=1 || { \
	    echo "$$t failed; reproduce: build-fuzz/tests/fuzz/$$t build-fuzz/artifacts/$$c/<file>" >&2; exit 1; }; \
	done

# Builds build-bench/, runs every benchmark into bench/results/ (replacing the last run's files)
# and rewrites the figures between <!-- bench:NAME --> markers in bench/README.md and README.md
# from them (bench/summarize.py render --write): commit the three together. BENCH_RESULTS
# elsewhere leaves the committed results and the READMEs as they are.
BENCH_RESULTS ?= bench/results
bench:
	@scripts/install-deps bench
	@cmake --preset bench >/dev/null
	@cmake --build --preset bench -j $(JOBS)
	rm -rf $(BENCH_RESULTS)
	BENCH_OUT=$(abspath $(BENCH_RESULTS)) ./build-bench/bench/run-benchmarks
	@if [ "$(abspath $(BENCH_RESULTS))" = "$(abspath bench/results)" ]; then python3 bench/summarize.py render --write; fi

# Builds the GPU tests and measurement programs (needs nvcc, no GPU) and says how to run them
# on a GPU machine; runs the tests here too when this machine has a GPU.
gpu-check: build
	@test -x build/tests/gpu/gpu_tests || { echo "gpu-check: no GPU build (nvcc was not found at /usr/local/cuda/bin or on PATH)" >&2; exit 2; }
	@echo "Built: build/tests/gpu/gpu_tests, build/bench/gpu/gpu_measure, build/bench/gpu/gpu_multi (sm_90, static cudart)."
	@echo "On a GPU machine (needs libcublasLt.so.13 and libnccl.so.2), from this tree (or a copy at the same path: ctest's files hold it):"
	@echo "  scripts/gpu-check build        # kernel, runtime, NCCL, --force-race and --amplify tests through ctest: skips shown and counted, fails if none ran"
	@echo "  compute-sanitizer --tool memcheck build/tests/gpu/gpu_tests '~*training*' '~*amplify*' '~*NCCL*' '~*switches*'   # memory errors only: run directly, a skip reads as a pass"
	@echo "  build/bench/gpu/gpu_measure --out out/gpu    # one GPU: step times, GEMMs, MFU, agreement"
	@echo "  build/bench/gpu/gpu_multi --out out/gpu      # 2+ GPUs: NCCL losses, bus bandwidth, overlap"
	@echo "  make gpu-bench                              # all measurements, three runs each; rewrites the GPU tables (bench/gpu/README.md)"
	@echo "  scripts/gpu-verify OUT                      # build, [gpu] tests and the measurements in one command, results in OUT"
	@echo "  mpirun -np 2 build/cli/shardcheck run scenarios/catalog/zero1-missing-no-sync.yaml --backend gpu --comm nccl   # one process per rank"
	@if nvidia-smi -L >/dev/null 2>&1; then scripts/gpu-check build; else echo "(no GPU here: the tests were built, not run)"; fi

# On a GPU machine: runs the GPU measurement programs (gpu_measure, gpu_multi with 2+ GPUs, the
# PyTorch peer in its four modes) three times each through bench/gpu/gpu_bench.py, keeps the
# JSON as bench/gpu/results/gpu-bench.json (the run's logs in GPU_BENCH_OUT) and rewrites every
# table in bench/gpu/README.md and the GPU figures in README.md from it. Commit all three.
# GPU_BENCH_ARGS passes options on, e.g. GPU_BENCH_ARGS='--parts measure,torch --runs 3'.
GPU_BENCH_OUT ?= out/gpu-bench
GPU_BENCH_ARGS ?=
gpu-bench: build
	@test -x build/bench/gpu/gpu_measure || { echo "gpu-bench: no GPU build (nvcc was not found at /usr/local/cuda/bin or on PATH)" >&2; exit 2; }
	@GPU_BENCH_COMMAND="make gpu-bench" python3 bench/gpu/gpu_bench.py run --build build --out $(GPU_BENCH_OUT) \
	  --json bench/gpu/results/gpu-bench.json $(GPU_BENCH_ARGS); rc=$$?; \
	  python3 bench/gpu/gpu_bench.py render --write && exit $$rc

clean:
	rm -rf build build-sanitize build-bench build-fuzz
