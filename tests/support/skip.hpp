// The one way a test case skips itself: it prints the line "SKIPPED: <reason>" and returns.
// Catch2 v2 has no skip, so Catch counts the test as passed; ctest, which registers every test
// case with SKIP_REGULAR_EXPRESSION "SKIPPED: " (tests/CMakeLists.txt), reports it as Skipped
// and lists it under "The following tests did not run". Run such tests through ctest (or
// scripts/gpu-check): run directly, a skipped test reads as a pass.
//   if (!std::filesystem::exists(kChromium)) SC_SKIP("chromium is not installed");
// Skip before asserting anything: ctest reports a test that printed the line as skipped even
// when a CHECK in it failed before the skip.
#pragma once

#include <iostream>

// `reason` may be a stream expression: SC_SKIP("needs " << n << " GPUs").
#define SC_SKIP(reason)                              \
  do {                                               \
    std::cout << "SKIPPED: " << reason << std::endl; \
    return;                                          \
  } while (0)
