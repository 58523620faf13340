# Thin wrapper over CMake presets, the way DuckDB's Makefile wraps its build.
# `make demo` and `make test` are the whole quick start on a fresh Debian 12 machine.
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps build demo test bench gpu-check clean

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

demo: build
	./build/cli/shardcheck demo

test: build
	ctest --test-dir build --output-on-failure -j $(JOBS) $(CTEST_ARGS)

bench:
	@scripts/install-deps bench
	@cmake --preset bench >/dev/null
	@cmake --build --preset bench -j $(JOBS)
	./build-bench/bench/run-benchmarks

# Builds the GPU tests and measurement programs (needs nvcc, no GPU) and says how to run them
# on a GPU machine; runs the tests here too when this machine has a GPU.
gpu-check: build
	@test -x build/tests/gpu/gpu_tests || { echo "gpu-check: no GPU build (nvcc was not found at /usr/local/cuda/bin or on PATH)" >&2; exit 2; }
	@echo "Built: build/tests/gpu/gpu_tests, build/bench/gpu/gpu_measure, build/bench/gpu/gpu_multi (sm_90, static cudart)."
	@echo "On a GPU machine (needs libcublasLt.so.13 and libnccl.so.2), from a copy of this tree:"
	@echo "  SHARDCHECK_SOURCE_DIR=\$$PWD build/tests/gpu/gpu_tests          # kernel, runtime, NCCL and --amplify tests"
	@echo "  compute-sanitizer --tool memcheck build/tests/gpu/gpu_tests '~*training*' '~*amplify*' '~*NCCL*' '~*switches*'"
	@echo "  build/bench/gpu/gpu_measure --out out/gpu    # one GPU: step times, GEMMs, MFU, agreement"
	@echo "  build/bench/gpu/gpu_multi --out out/gpu      # 2+ GPUs: NCCL losses, bus bandwidth, overlap"
	@if nvidia-smi -L >/dev/null 2>&1; then SHARDCHECK_SOURCE_DIR=$$PWD build/tests/gpu/gpu_tests; else echo "(no GPU here: the tests were built, not run)"; fi

clean:
	rm -rf build build-sanitize build-bench
