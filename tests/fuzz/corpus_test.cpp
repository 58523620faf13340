// Replays the fuzz corpus (tests/fuzz/corpus/ and, for scenarios, every file of scenarios/catalog,
// trace and training) and every saved crash (tests/fuzz/regressions/)
// through the normal build's loader and command-line parser, with the fuzz targets' checks,
// so a fixed crash stays fixed without a fuzzing build.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fuzz/checks.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> files_in(const std::string& sub) {
  std::vector<fs::path> files;
  for (const char* root : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(SHARDCHECK_SOURCE_DIR) / "tests/fuzz" / root / sub;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
  }
  // The scenario seeds are the shipped scenarios themselves, read where they live (SEEDS in
  // the Makefile's fuzz target), with the bad-input cases kept in corpus/scenario.
  if (sub == "scenario") {
    for (const char* shipped : {"catalog", "trace", "training"}) {
      for (const auto& e : fs::directory_iterator(fs::path(SHARDCHECK_SOURCE_DIR) / "scenarios" / shipped)) {
        if (e.is_regular_file() && e.path().extension() == ".yaml") files.push_back(e.path());
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE(
    "every scenario input of the fuzz corpus loads within the limits or is rejected with file:line:column",
    "[fuzz]") {
  const auto files = files_in("scenario");
  REQUIRE(files.size() >= 30);  // the seed corpus: every shipped scenario and the bad-input cases
  for (const auto& f : files) {
    INFO(f.string());
    CHECK(shardcheck::fuzz::check_scenario_file(f.string(), read(f)) == "");
  }
}

TEST_CASE("every command line of the fuzz corpus parses to a command, help or exit code 2", "[fuzz]") {
  const auto files = files_in("cli");
  REQUIRE(files.size() >= 20);
  for (const auto& f : files) {
    INFO(f.string());
    CHECK(shardcheck::fuzz::check_command_line(read(f)) == "");
  }
}

TEST_CASE("fuzz command lines are split at newlines, a trailing newline ending the last argument", "[fuzz]") {
  using shardcheck::fuzz::split_arguments;
  REQUIRE(split_arguments("") == std::vector<std::string>{"shardcheck"});
  REQUIRE(split_arguments("layout\n--ranks\n2\n") ==
          std::vector<std::string>{"shardcheck", "layout", "--ranks", "2"});
  REQUIRE(split_arguments("a\n\nb") == std::vector<std::string>{"shardcheck", "a", "", "b"});
}

TEST_CASE("every capture input of the fuzz corpus loads and runs, or is refused naming its file and line",
          "[fuzz]") {
  const auto files = files_in("capture");
  REQUIRE(!files.empty());
  const fs::path dir =
      fs::temp_directory_path() / ("shardcheck-corpus-capture-" + std::to_string(::getpid()));
  for (const auto& f : files) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string text = read(f);
    {
      std::ofstream out(dir / "rank-0.jsonl", std::ios::binary);
      out << text;
    }
    INFO(f.string());
    REQUIRE(shardcheck::fuzz::check_capture_folder(dir.string(), text).empty());
  }
  fs::remove_all(dir);
}
