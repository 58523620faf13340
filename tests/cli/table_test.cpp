// The terminal's tables and durations (cli/table.hpp): long cells wrap or are cut so every
// line fits the width, and durations read as people write them.
#include "cli/table.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <sstream>

using shardcheck::cli::duration_text;
using shardcheck::cli::Table;
using shardcheck::cli::wrap_text;

namespace {

size_t longest_line(const std::string& text) {
  size_t longest = 0, chars = 0;
  for (const char c : text) {
    if (c == '\n') {
      longest = std::max(longest, chars);
      chars = 0;
    } else if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
      ++chars;
    }
  }
  return std::max(longest, chars);
}

}  // namespace

TEST_CASE("durations are rounded to what a person reads", "[cli][table]") {
  CHECK(duration_text(0.000688639) == "0.7 ms");
  CHECK(duration_text(0.0123) == "12.3 ms");
  CHECK(duration_text(0.505) == "505 ms");
  CHECK(duration_text(21.43) == "21.4 s");
  CHECK(duration_text(185) == "3 min 5 s");
  CHECK(duration_text(0.00001) == "0.01 ms");
}

TEST_CASE("a cell wider than its column wraps at spaces and cuts only a word longer than it",
          "[cli][table]") {
  CHECK(wrap_text("stream_race (allow numerics_divergence, uninitialized_read)", 20) ==
        std::vector<std::string>{"stream_race (allow", "numerics_divergence,", "uninitialized_read)"});
  CHECK(wrap_text("abcdefgh", 3) == std::vector<std::string>{"abc", "def", "gh"});
  CHECK(wrap_text("", 5) == std::vector<std::string>{""});
}

TEST_CASE("a table fits its width: wrapped and cut columns narrow, kept ones stay whole", "[cli][table]") {
  Table t({{"name"}, {"expected", Table::kWrap, 20}, {"note", Table::kCut, 10, 1}, {"n", Table::kRight}});
  t.add({"main-grad-alloc-default-stream", "stream_race (allow numerics_divergence, uninitialized_read)",
         "a long description that does not fit anywhere near the width given", "8"});
  t.add({"short", "clean", "fine", "20"});
  std::ostringstream out;
  t.print(out, 80);
  INFO(out.str());
  CHECK(longest_line(out.str()) <= 80);
  CHECK(out.str().find("main-grad-alloc-default-stream") != std::string::npos);  // kept whole
  CHECK(out.str().find("…") != std::string::npos);                               // the note was cut
  CHECK(out.str().find("uninitialized_read)") != std::string::npos);             // wrapped, not lost
  CHECK(out.str().find(" \n") == std::string::npos);                             // no trailing spaces
  // Wide enough: nothing narrows, one line per row.
  std::ostringstream wide;
  t.print(wide, 400);
  const std::string text = wide.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
}
