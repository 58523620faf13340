// The main() of every benchmark program: Google Benchmark's, after one allocator setting.
//
// Between two schedules, `shardcheck` keeps the heap the previous one faulted in: it holds
// the scenario, its reference and the results, so freeing a World does not reach the top of
// the heap (about 50 page faults per further schedule of a catalog file, `perf stat -e
// page-faults`). A benchmark iteration that builds and frees a World and nothing else frees
// the heap's top, glibc returns it to the system, and the next iteration faults it in again:
// about 400 page faults per iteration of sim_bench's 2-rank program, which made a benchmark
// run early in a program up to 1.7 times slower than the same program run later. So the
// programs keep freed memory (glibc's trim and mmap thresholds fixed high), as the
// executable's heap does in practice, and each figure no longer depends on what ran before.
#pragma once

#include <benchmark/benchmark.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace shardcheck::bench {

inline void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: blocks below it come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // the heap's free top stays mapped up to 1 GiB
#endif
}

}  // namespace shardcheck::bench

#define SHARDCHECK_BENCHMARK_MAIN()                                   \
  int main(int argc, char** argv) {                                   \
    shardcheck::bench::keep_freed_memory();                           \
    benchmark::Initialize(&argc, argv);                               \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1; \
    benchmark::RunSpecifiedBenchmarks();                              \
    benchmark::Shutdown();                                            \
    return 0;                                                         \
  }
