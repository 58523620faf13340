// Output paths through the real binary: nothing but the named outputs changes, a device, FIFO
// or symlink is written through and never replaced, a folder shardcheck did not make is never
// a report folder, and every bad output is refused before anything runs. Each test's name says
// the harm it guards against. Device nodes and FIFOs are made in a temporary folder, never in
// /dev; where this machine cannot make one (not root, a nodev mount) the test says so and
// checks nothing more.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "tests/support/run_command.hpp"

using shardcheck::testing::CommandResult;
using shardcheck::testing::run_command;
using shardcheck::testing::run_shardcheck;

namespace {
namespace fs = std::filesystem;

std::string scenario(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/" + name;
}

std::string temp_dir() {
  char path[] = "/tmp/shardcheck-outputs-XXXXXX";
  REQUIRE(mkdtemp(path) != nullptr);
  return path;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A character device node like /dev/null (1,3) or /dev/full (1,7) at `path`, usable here; false
// (with a warning) where this machine cannot make or open one.
bool make_device(const std::string& path, unsigned minor) {
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, minor)) != 0) {
    WARN("cannot make a device node here (" << std::strerror(errno) << "): not checked");
    return false;
  }
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) {
    WARN("a device node in /tmp cannot be opened here (nodev mount?): not checked");
    return false;
  }
  ::close(fd);
  return true;
}

bool is_char_device(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// Every entry under `dir` with its inode and size: what a refused command must leave as it was.
std::map<std::string, std::pair<ino_t, off_t>> entries_under(const std::string& dir) {
  std::map<std::string, std::pair<ino_t, off_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = {st.st_ino, st.st_size};
  }
  return out;
}

// Refused before the run: exit 2, the flag and the reason on stderr, no scenario started.
void refused_up_front(const CommandResult& r, const std::string& says) {
  INFO("exit " << r.exit_code << "\nstdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains(says));
  REQUIRE_THAT(r.out, !Catch::Contains("== "));  // no scenario header: nothing ran
}
}  // namespace

TEST_CASE(
    "a null device named by --junit, --sarif or --trace is written into: replacing it would break /dev/null",
    "[cli][outputs]") {
  const std::string root = temp_dir(), null = root + "/null";
  if (!make_device(null, 3)) return;
  const std::string race = scenario("reuse-race.yaml");
  REQUIRE(run_shardcheck("run " + race + " --junit " + null + " --sarif " + null).exit_code == 0);
  REQUIRE(is_char_device(null));
  REQUIRE(run_shardcheck("replay " + race + " --trace " + null).exit_code == 0);
  REQUIRE(is_char_device(null));
  fs::remove_all(root);
}

TEST_CASE("an output on a device that refuses writes is exit 2 before the run: a lost report is no pass",
          "[cli][outputs]") {
  const std::string root = temp_dir(), full = root + "/full";
  if (!make_device(full, 7)) return;
  const std::string race = scenario("reuse-race.yaml");
  refused_up_front(run_shardcheck("run " + race + " --junit " + full),
                   "--junit: cannot write " + full + ": No space left on device");
  refused_up_front(run_shardcheck("explore " + race + " --sarif " + full), "--sarif: cannot write " + full);
  const CommandResult r = run_shardcheck("replay " + race + " --trace " + full);
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("--trace: cannot write " + full));
  REQUIRE_THAT(r.out, !Catch::Contains("replayed"));
  REQUIRE(is_char_device(full));
  fs::remove_all(root);
}

TEST_CASE("standard output that refuses writes is exit 2: a CI step would take a lost log for a pass",
          "[cli][outputs]") {
  const std::string race = scenario("reuse-race.yaml");
  const CommandResult r = run_command(std::string(SHARDCHECK_BINARY) + " run " + race + " > /dev/full");
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("cannot write standard output: No space left on device"));
  REQUIRE(run_command(std::string(SHARDCHECK_BINARY) + " --version > /dev/full").exit_code == 2);
}

TEST_CASE("an output through a symlink writes its target and keeps the link: replacing it loses the link",
          "[cli][outputs]") {
  const std::string root = temp_dir();
  fs::create_directory(root + "/results");
  fs::create_symlink("results/ci.xml", root + "/latest.xml");
  const std::string race = scenario("reuse-race.yaml");
  REQUIRE(run_shardcheck("run " + race + " --junit " + root + "/latest.xml").exit_code == 0);
  REQUIRE(fs::is_symlink(fs::symlink_status(root + "/latest.xml")));
  REQUIRE_THAT(read_text(root + "/results/ci.xml"), Catch::Contains("<testsuites"));
  fs::remove_all(root);
}

TEST_CASE("a FIFO named by --trace is streamed into: a rename would replace the reader's pipe with a file",
          "[cli][outputs]") {
  const std::string root = temp_dir(), fifo = root + "/trace.pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] {
    const int fd = ::open(fifo.c_str(), O_RDONLY);
    char buf[65536];
    for (ssize_t n; fd >= 0 && (n = ::read(fd, buf, sizeof buf)) > 0;)
      got.append(buf, static_cast<size_t>(n));
    if (fd >= 0) ::close(fd);
  });
  const CommandResult r = run_shardcheck("replay " + scenario("reuse-race.yaml") + " --trace " + fifo);
  reader.join();
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(got, Catch::Contains("traceEvents"));
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  REQUIRE(S_ISFIFO(st.st_mode));
  fs::remove_all(root);
}

TEST_CASE("an output in a folder that does not exist is refused before the run, not after its work",
          "[cli][outputs]") {
  const std::string race = scenario("reuse-race.yaml");
  refused_up_front(
      run_shardcheck("run " + race + " --sarif /nonexistent-folder/out.sarif"),
      "--sarif: cannot write /nonexistent-folder/out.sarif: folder /nonexistent-folder does not exist");
  const std::string root = temp_dir();
  refused_up_front(run_shardcheck("run " + race + " --junit " + root),
                   "--junit: cannot write " + root + ": it is a folder");
  fs::remove_all(root);
}

TEST_CASE("a report folder shardcheck did not make is refused and untouched: a swap would move its entries",
          "[cli][outputs]") {
  const std::string root = temp_dir(), home = root + "/home";
  fs::create_directories(home + "/projects/src");
  std::ofstream(home + "/projects/src/main.cpp") << "int main() {}";
  std::ofstream(home + "/.profile") << "PATH=/bin";
  const auto before = entries_under(root);
  const std::string race = scenario("reuse-race.yaml");
  refused_up_front(run_shardcheck("run " + race + " --report " + home),
                   "--report: report folder " + home + " holds files no report of shardcheck's wrote");
  refused_up_front(run_shardcheck("explore " + race + " --report " + home), "--report: report folder");
  refused_up_front(run_shardcheck("demo --out " + home), "--out: report folder");
  REQUIRE(entries_under(root) == before);
  // The file system's root is such a folder too (read only here: nothing is written to refuse it).
  refused_up_front(run_shardcheck("run " + race + " --report /"), "--report: report folder / holds files");
  fs::remove_all(root);
}

TEST_CASE(
    "a report into the empty working folder keeps that folder: a swap would leave the shell in a removed one",
    "[cli][outputs]") {
  const std::string root = temp_dir(), here = root + "/here";
  fs::create_directory(here);
  struct stat before {
  }, after{};
  REQUIRE(::stat(here.c_str(), &before) == 0);
  const std::string run =
      "cd " + here + " && " + SHARDCHECK_BINARY + " run " + scenario("reuse-race.yaml") + " --report .";
  REQUIRE(run_command(run).exit_code == 0);
  REQUIRE(run_command(run).exit_code == 0);  // and again, into the folder the first made
  REQUIRE(::stat(here.c_str(), &after) == 0);
  REQUIRE(after.st_ino == before.st_ino);
  REQUIRE(fs::exists(here + "/report.json"));
  REQUIRE(fs::exists(here + "/.shardcheck-report"));
  fs::remove_all(root);
}

TEST_CASE("a capture rank file that is a FIFO is refused at once: reading it would hang CI forever",
          "[cli][outputs][capture]") {
  const std::string root = temp_dir(), cap = root + "/capture";
  fs::create_directory(cap);
  fs::copy_file(std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/fixtures/megatron-6137/rank-0.jsonl",
                cap + "/rank-0.jsonl");
  REQUIRE(::mkfifo((cap + "/rank-1.jsonl").c_str(), 0600) == 0);
  const CommandResult r = run_command("timeout 20 " + std::string(SHARDCHECK_BINARY) + " run " + cap);
  INFO(r.err);
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("rank-1.jsonl"));
  REQUIRE_THAT(r.err, Catch::Contains("a FIFO (named pipe), not a regular file"));
  fs::remove_all(root);
}

TEST_CASE("a capture rank file linked to an endless device is refused at once: memory would grow without end",
          "[cli][outputs][capture]") {
  const std::string root = temp_dir(), cap = root + "/capture";
  fs::create_directory(cap);
  fs::copy_file(std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/fixtures/megatron-6137/rank-0.jsonl",
                cap + "/rank-0.jsonl");
  fs::create_symlink("/dev/zero", cap + "/rank-1.jsonl");
  // 512 MiB: a loader that read the endless line whole would be killed.
  const CommandResult r = run_command(shardcheck::testing::memory_cap(512) + "timeout 20 " +
                                      std::string(SHARDCHECK_BINARY) + " run " + cap);
  INFO(r.err);
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("rank-1.jsonl"));
  fs::remove_all(root);
}
