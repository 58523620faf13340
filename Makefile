# Thin wrapper over CMake presets, the way DuckDB's Makefile wraps its build.
# `make demo` and `make test` are the whole quick start on a fresh Debian 12 machine.
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps build demo test bench clean

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

clean:
	rm -rf build build-sanitize build-bench
