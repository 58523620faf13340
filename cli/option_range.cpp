// Integer options held to their bounds before CLI11 converts them, with a message that names
// the option, the value and the range: "--runs: 0 is out of range 1..100000"; word options
// held to their choices.
#include <charconv>

#include "cli/commands.hpp"
#include "core/base/text.hpp"

namespace shardcheck::cli {

CLI::Validator in_range(int64_t lo, int64_t hi) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& value) -> std::string {
        int64_t v = 0;
        const char* begin = value.data();
        const char* end = begin + value.size();
        const auto [stop, ec] = std::from_chars(begin, end, v);
        if (begin == end || stop != end || ec == std::errc::invalid_argument) {
          return "'" + core::printable(value) + "' is not a decimal integer (" + range + ")";
        }
        if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
          return core::printable(value) + " is out of range " + range;
        }
        // CLI11 converts with strtoll in base 0: "010" would be 8. Hand it the value read here.
        value = std::to_string(v);
        return "";
      },
      range, "RANGE");
}

CLI::Validator one_of(std::vector<std::string> choices) { return CLI::IsMember(std::move(choices)); }

}  // namespace shardcheck::cli
