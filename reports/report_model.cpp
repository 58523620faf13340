// The reproducer line every finding carries (DESIGN.md §6).
#include "reports/report_model.hpp"

namespace shardcheck::reports {

namespace {
// Paths are printed as the user can paste them into a shell: quoted only when they need it.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of(
                                       "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                       "0123456789_./-+=:,@%") == std::string::npos;
  if (plain) return s;
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

std::string reproducer(const ScenarioResult& s, const core::Finding& f) {
  std::string line = "shardcheck replay " + shell_word(s.file) + " --seed " + std::to_string(f.seed);
  if (!s.policy.empty()) line += " --policy " + shell_word(s.policy);
  return line;
}

}  // namespace shardcheck::reports
