// libFuzzer target: scenario files through `run::load_scenario`, the path `shardcheck run`
// takes, with each input written to a file first so errors carry that file's name. A
// rejection without file:line:column, an accepted file past a limit, or a failure of the
// short simulated run of an accepted trace scenario aborts (see checks.hpp).
//   build-fuzz/tests/fuzz/fuzz_scenario CORPUS_DIR tests/fuzz/corpus/scenario -max_total_time=60
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/fuzz/checks.hpp"

namespace {

std::string input_path() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/shardcheck-fuzz-" + std::to_string(getpid()) + ".yaml";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = input_path();
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  const std::string wrong = shardcheck::fuzz::check_scenario_file(path, text);
  if (!wrong.empty()) {
    std::fprintf(stderr, "fuzz_scenario: %s\n", wrong.c_str());
    std::abort();
  }
  return 0;
}
