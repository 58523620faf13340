// The reproducer line every finding carries (docs/semantics.md §6).
#include "reports/report_model.hpp"

#include "core/base/text.hpp"

namespace shardcheck::reports {

std::string reproducer(const ScenarioResult& s, const core::Finding& f) {
  std::string line = "shardcheck replay " + core::shell_word(s.file) + " --seed " + std::to_string(f.seed);
  if (!s.policy.empty()) line += " --policy " + core::shell_word(s.policy);
  return line;
}

}  // namespace shardcheck::reports
