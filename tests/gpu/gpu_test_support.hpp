// Shared by [gpu] tests: skip (ctest reports "Skipped") when the machine has no CUDA device.
#pragma once

#include <catch2/catch.hpp>
#include <iostream>

#include "gpu/check.hpp"

#define SC_REQUIRE_GPU()                                                  \
  do {                                                                    \
    if (::shardcheck::gpu::device_count() == 0) {                         \
      std::cout << "SKIPPED: no CUDA device on this machine" << std::endl; \
      return;                                                             \
    }                                                                     \
  } while (0)
