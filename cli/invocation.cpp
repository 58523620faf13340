// invocation_name: this executable against what PATH would run.
#include "cli/invocation.hpp"

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "core/base/text.hpp"

namespace shardcheck::cli {

namespace {
namespace fs = std::filesystem;

// Whether `shardcheck` typed at a shell prompt runs `exe`: the first PATH entry holding an
// executable of that name is it.
bool path_runs(const fs::path& exe) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string_view rest(path);
  while (true) {
    const size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    std::error_code ec;
    const fs::path candidate = fs::path(dir.empty() ? "." : std::string(dir)) / "shardcheck";
    if (fs::is_regular_file(candidate, ec)) {
      const fs::path resolved = fs::canonical(candidate, ec);
      return !ec && resolved == exe;
    }
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}
}  // namespace

std::string invocation_name() {
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (ec) return "shardcheck";
  if (path_runs(exe)) return "shardcheck";
  const fs::path cwd = fs::current_path(ec);
  if (!ec) {
    const fs::path rel = exe.lexically_relative(cwd);
    if (!rel.empty() && *rel.begin() != "..") return core::shell_word("./" + rel.string());
  }
  return core::shell_word(exe.string());
}

}  // namespace shardcheck::cli
