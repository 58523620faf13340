// write_file_atomic never replaces what an output path names: a device, a FIFO or a symlink.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/base/atomic_file.hpp"

namespace fs = std::filesystem;
using shardcheck::core::check_output_path;
using shardcheck::core::write_file_atomic;

namespace {
fs::path fresh_dir(const char* name) {
  fs::path d =
      fs::temp_directory_path() / (std::string("shardcheck-") + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("a symlinked output path would lose its link if renamed over: the target is written") {
  const fs::path d = fresh_dir("symlink");
  fs::create_symlink("real.xml", d / "link.xml");
  REQUIRE(write_file_atomic((d / "link.xml").string(), "<a/>").ok());
  CHECK(fs::is_symlink(fs::symlink_status(d / "link.xml")));
  CHECK(slurp(d / "real.xml") == "<a/>");
  fs::remove_all(d);
}

TEST_CASE("a FIFO output path would become a regular file if renamed over: it is streamed into") {
  const fs::path d = fresh_dir("fifo");
  const fs::path fifo = d / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] { got = slurp(fifo); });
  REQUIRE(write_file_atomic(fifo.string(), "streamed").ok());
  reader.join();
  CHECK(got == "streamed");
  CHECK(fs::is_fifo(fs::status(fifo)));
  fs::remove_all(d);
}

TEST_CASE("a device output path that fails to take the bytes (/dev/full) is an error, and stays a device") {
  if (!fs::exists("/dev/full")) return;  // not every machine has it
  const auto s = write_file_atomic("/dev/full", "x");
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message().find("/dev/full") != std::string::npos);
  CHECK(fs::is_character_file(fs::status("/dev/full")));
  REQUIRE(write_file_atomic("/dev/null", "gone").ok());
  CHECK(fs::is_character_file(fs::status("/dev/null")));
}

TEST_CASE("a folder named as an output file would be refused only after the run: it is refused up front") {
  const fs::path d = fresh_dir("folder");
  CHECK_FALSE(check_output_path(d.string()).ok());
  CHECK(check_output_path((d / "new.json").string()).ok());
  fs::remove_all(d);
}
