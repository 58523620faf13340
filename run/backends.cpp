// The backends this binary has, and the hand-off to `shardcheck-gpu` for those it lacks.
#include "run/backends.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "reports/report_model.hpp"
#include "run/exit_code.hpp"

namespace shardcheck::run {

namespace {
namespace fs = std::filesystem;

std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}

// Set in the environment of the binary handed to, so that it never hands on again.
constexpr const char* kHandedOff = "SHARDCHECK_HANDED_OFF";
constexpr const char* kCommandName = "SHARDCHECK_COMMAND_NAME";

fs::path gpu_binary() {
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (ec) return {};
  for (const fs::path& p : {exe.parent_path() / "shardcheck-gpu",
                            exe.parent_path().parent_path() / "libexec" / "shardcheck" / "shardcheck-gpu"}) {
    if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0 && fs::canonical(p, ec) != exe) return p;
  }
  return {};
}
}  // namespace

Backends& backends() {
  static Backends b;
  return b;
}

void remember_command_line(int argc, char** argv) { command_line().assign(argv, argv + argc); }

bool can_hand_off() { return std::getenv(kHandedOff) == nullptr && !gpu_binary().empty(); }

int hand_off(const std::string& needs) {
  const fs::path to = gpu_binary();
  if (std::getenv(kHandedOff) != nullptr || to.empty() || command_line().empty()) {
    std::cerr << "shardcheck: " << needs
              << " needs shardcheck-gpu, the build with the GPU backend and MPI, beside this binary; this "
                 "build has none (nvcc or MPI was not found when it was configured)\n";
    return kBadInput;
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::setenv(kHandedOff, "1", 1);
  // Reproducer lines name the command the user ran, not the one it was handed to.
  ::setenv(kCommandName, reports::command_name().c_str(), 1);
  std::vector<std::string> args = command_line();
  args[0] = to.string();
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(to.c_str(), argv.data());
  std::cerr << "shardcheck: cannot start " << to.string() << " for " << needs << ": " << std::strerror(errno)
            << "\n";
  return kInternalError;
}

std::string handed_command_name() {
  const char* name = std::getenv(kHandedOff) ? std::getenv(kCommandName) : nullptr;
  return name ? name : "";
}

bool launched_as_several() { return launch_of_environment().second > 1; }

}  // namespace shardcheck::run
