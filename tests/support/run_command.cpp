// popen-based command runner; stderr goes to a temporary file.
#include "tests/support/run_command.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace shardcheck::testing {

CommandResult run_command(const std::string& command) {
  char path[] = "/tmp/shardcheck-test-XXXXXX";
  const int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  CommandResult r;
  FILE* p = popen((command + " 2>" + path).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  unlink(path);
  return r;
}

CommandResult run_shardcheck(const std::string& args) {
  return run_command(std::string(SHARDCHECK_BINARY) + " " + args);
}

std::string printed_binary() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::canonical(SHARDCHECK_BINARY, ec);
  const std::filesystem::path rel = exe.lexically_relative(std::filesystem::current_path(ec));
  if (!rel.empty() && *rel.begin() != "..") return "./" + rel.string();
  return exe.string();
}

bool under_address_sanitizer() {
#if defined(SHARDCHECK_ASAN) && SHARDCHECK_ASAN
  return true;
#else
  return false;
#endif
}

std::string memory_cap(long mib) {
  if (under_address_sanitizer())
    return "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}hard_rss_limit_mb=" + std::to_string(mib) +
           "\"; ";
  return "ulimit -v " + std::to_string(mib * 1024) + "; ";
}

}  // namespace shardcheck::testing
