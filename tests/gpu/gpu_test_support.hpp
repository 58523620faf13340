// Shared by [gpu] tests: skip (ctest reports "Skipped", see tests/support/skip.hpp) when the
// machine has no CUDA device, or fewer than a test needs. A test that needs two GPUs and finds
// one must skip, not pass having checked nothing.
//   TEST_CASE("...", "[gpu]") { SC_REQUIRE_GPUS(2); ... }
#pragma once

#include <catch2/catch.hpp>

#include "gpu/check.hpp"
#include "tests/support/skip.hpp"

#define SC_REQUIRE_GPU()                                                                   \
  do {                                                                                     \
    if (::shardcheck::gpu::device_count() == 0) SC_SKIP("no CUDA device on this machine"); \
  } while (0)

#define SC_REQUIRE_GPUS(n)                                                            \
  do {                                                                                \
    SC_REQUIRE_GPU();                                                                 \
    if (const int sc_devices = ::shardcheck::gpu::device_count(); sc_devices < (n)) { \
      SC_SKIP("needs " << (n) << " GPUs, this machine has " << sc_devices);           \
    }                                                                                 \
  } while (0)
