// The reproducer line every finding carries (docs/semantics.md §6).
#include "reports/report_model.hpp"

#include "core/base/text.hpp"

namespace shardcheck::reports {

namespace {
std::string& command_name_storage() {
  static std::string name = "shardcheck";
  return name;
}
}  // namespace

void set_command_name(std::string name) { command_name_storage() = std::move(name); }
const std::string& command_name() { return command_name_storage(); }

std::string reproducer(const ScenarioResult& s, const core::Finding& f) {
  std::string line =
      command_name() + " replay " + core::shell_path(s.file) + " --seed " + std::to_string(f.seed);
  if (!s.policy.empty()) line += " --policy " + core::shell_word(s.policy);
  return line;
}

}  // namespace shardcheck::reports
