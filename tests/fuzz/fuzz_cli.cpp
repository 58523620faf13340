// libFuzzer target: `shardcheck` command lines (arguments one per line) through the same
// CLI11 app main() uses. Parsing must end in a chosen subcommand, help (0) or bad input (2)
// with a message; `layout` is also run. Anything else aborts (see checks.hpp).
//   build-fuzz/tests/fuzz/fuzz_cli CORPUS_DIR tests/fuzz/corpus/cli -max_total_time=60
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tests/fuzz/checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string wrong = shardcheck::fuzz::check_command_line(input);
  if (!wrong.empty()) {
    std::fprintf(stderr, "fuzz_cli: %s\n", wrong.c_str());
    std::abort();
  }
  return 0;
}
