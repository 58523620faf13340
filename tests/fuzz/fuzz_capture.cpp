// libFuzzer target: a captured program's folder through `run::load_scenario`, the path
// `shardcheck run DIR` takes, with each input written as DIR/rank-0.jsonl. A refusal that does
// not name the file and line, or an internal error of the short simulated run of an accepted
// capture, aborts (see checks.hpp).
//   build-fuzz/tests/fuzz/fuzz_capture CORPUS_DIR tests/fuzz/corpus/capture -max_total_time=60
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/fuzz/checks.hpp"

namespace {

std::string input_dir() {
  const char* dir = std::getenv("TMPDIR");
  const std::string d =
      std::string(dir && *dir ? dir : "/tmp") + "/shardcheck-fuzz-capture-" + std::to_string(getpid());
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = input_dir();
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream out(dir + "/rank-0.jsonl", std::ios::binary | std::ios::trunc);
    out << text;
  }
  const std::string wrong = shardcheck::fuzz::check_capture_folder(dir, text);
  if (!wrong.empty()) {
    std::fprintf(stderr, "fuzz_capture: %s\n", wrong.c_str());
    std::abort();
  }
  return 0;
}
