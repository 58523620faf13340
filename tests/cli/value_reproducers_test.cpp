// The value reproducers of examples/pytorch/values, each a bug from a public report and its
// repair, captured on CPU over gloo (tests/capture/values/README.md): what the checker says of
// each, beside the class the program's own ground truth gives it (measured without shardcheck
// against a single-process reference: python/tests/test_ground_truth.py). The table
// tests/capture/values/verdicts.tsv is what docs/values.md shows; this test holds it, and holds
// the rule a table edit could not break: no repair and no control is flagged, and what is found
// is the class the ground truth names.
#include <catch2/catch.hpp>
#include <cctype>
#include <fstream>
#include <sstream>
#include <vector>

#include "tests/support/run_command.hpp"

using shardcheck::testing::run_shardcheck;

namespace {

struct Row {
  std::string capture, truth, verdict, place;
};

std::string values_dir() { return std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/values/"; }

std::vector<Row> rows() {
  std::ifstream in(values_dir() + "verdicts.tsv");
  REQUIRE(in);
  std::vector<Row> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Row r;
    std::getline(fields, r.capture, '\t');
    std::getline(fields, r.truth, '\t');
    std::getline(fields, r.verdict, '\t');
    std::getline(fields, r.place, '\t');
    out.push_back(r);
  }
  return out;
}

// The first finding's kind in `shardcheck run` output ("clean" for none) and the first
// examples/pytorch/values/ place its first line names ("-" for none).
std::pair<std::string, std::string> verdict_of(const std::string& out) {
  const size_t at = out.find("\n[");
  if (at == std::string::npos) return {"clean", "-"};
  const size_t close = out.find(']', at);
  const std::string first = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  const std::string kind = out.substr(at + 2, close - at - 2);
  const size_t p = first.find("examples/pytorch/values/");
  if (p == std::string::npos) return {kind, "-"};
  size_t end = first.find(".py:", p) + 4;
  while (end < first.size() && std::isdigit(static_cast<unsigned char>(first[end]))) ++end;
  return {kind, first.substr(p, end - p)};
}

}  // namespace

TEST_CASE("the value reproducers from public reports get the verdicts docs/values.md shows",
          "[cli][capture][values]") {
  const auto table = rows();
  REQUIRE(table.size() == 38);
  for (const Row& row : table) {
    INFO(row.capture);
    const auto r = run_shardcheck("run " + values_dir() + row.capture);
    INFO(r.out + r.err);
    const auto [kind, place] = verdict_of(r.out);
    CHECK(kind == row.verdict);
    CHECK(place == row.place);
    CHECK(r.exit_code == (kind == "clean" ? 0 : 1));
  }
}

TEST_CASE(
    "no repair or control among the value reproducers is flagged, and what is found is a class the ground "
    "truth names",
    "[cli][capture][values]") {
  for (const Row& row : rows()) {
    INFO(row.capture);
    if (row.truth.starts_with("none")) CHECK(row.verdict == "clean");
    if (row.verdict != "clean") CHECK(row.truth.find(row.verdict) != std::string::npos);
  }
}
