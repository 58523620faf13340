// The strategy table (core/strategies/strategy.hpp) is the one list of strategies: every row is
// whole and in the enum's order, its placements are valid, and each consumer (parsing, the
// scenario loader's meshes and messages, docs/scenarios.md's table) covers every row, so a new
// strategy that misses one fails here.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/scenario/training_scenario.hpp"
#include "core/strategies/strategy.hpp"

using namespace shardcheck::core;

namespace {
// A small training file for `strategy`, on the mesh its row asks for.
std::string training_file(const StrategyInfo& row) {
  const std::string mesh = row.placed_axes() == 2 ? "{dp_outer: 2, dp_inner: 2}" : "{dp: 2}";
  return "kind: training\nname: t\nmesh: " + mesh +
         "\nmodel: {vocab: 64, hidden: 16, layers: 2, seq: 8, tied_embeddings: true}\nstrategy: " +
         std::string(row.name) + "\nsteps: 1\n";
}
}  // namespace

TEST_CASE("every strategy has one whole row, in the enum's order, with valid placements",
          "[core][strategies]") {
  std::set<std::string_view> names;
  for (int i = 0; i < kStrategies; ++i) {
    const StrategyInfo& row = kStrategyTable[i];
    INFO(row.name);
    REQUIRE(static_cast<int>(row.strategy) == i);  // info(s) indexes the table
    REQUIRE(&info(row.strategy) == &row);
    REQUIRE(!row.name.empty());
    REQUIRE(names.insert(row.name).second);
    REQUIRE(parse_strategy(row.name) == row.strategy);
    REQUIRE(to_string(row.strategy) == row.name);
    REQUIRE(!row.known_as.empty());
    REQUIRE(is_two_dimensional(row.strategy) == (row.placed_axes() == 2));
    if (row.placed_axes() == 0) {
      REQUIRE(row.strategy == Strategy::distopt);  // the one engine without FSDP placements
      REQUIRE_THROWS_AS(placements_for(row.strategy), InternalError);
      continue;
    }
    const StrategyPlacements p = placements_for(row.strategy);
    for (const Placements* each : {&p.model, &p.grad, &p.main}) {
      REQUIRE(each->size() == static_cast<size_t>(row.placed_axes()));
      REQUIRE(validate_placements(*each).ok());
    }
  }
  REQUIRE_FALSE(parse_strategy("zero4"));
}

TEST_CASE("every strategy loads in a training file on the mesh its row asks for", "[core][strategies]") {
  for (const StrategyInfo& row : kStrategyTable) {
    INFO(row.name);
    const auto s = parse_training_scenario(training_file(row), "t.yaml");
    INFO((s ? std::string() : s.error().message()));
    REQUIRE(s);
    REQUIRE(s->config.strategy == row.strategy);
  }
}

TEST_CASE("the loader's messages offer every strategy of the table", "[core][strategies]") {
  // Both messages were once written by hand.
  std::string text = training_file(kStrategyTable[0]);
  text.replace(text.find("strategy: no_shard"), 18, "strategy: zero4");
  const auto unknown = parse_training_scenario(text, "t.yaml");
  REQUIRE_FALSE(unknown);
  REQUIRE(unknown.error().message() ==
          "t.yaml:5:11: unknown strategy 'zero4' (expected " + strategy_names() + ")");
  REQUIRE(strategy_names() == "no_shard, optim, optim_grads, optim_grads_params, hsdp, hfsdp or distopt");
  for (const StrategyInfo& row : kStrategyTable)
    REQUIRE(strategy_names().find(row.name) != std::string::npos);

  text = training_file(kStrategyTable[0]);
  text.replace(text.find("{dp: 2}"), 7, "{dp_outer: 2, dp_inner: 1}");
  const auto flat = parse_training_scenario(text, "t.yaml");
  REQUIRE_FALSE(flat);
  REQUIRE(flat.error().message().find("(use hsdp or hfsdp)") != std::string::npos);
  REQUIRE(two_dimensional_strategy_names() == "hsdp or hfsdp");
}

TEST_CASE("docs/scenarios.md's strategy table has each row's name and what it is known as",
          "[core][strategies]") {
  std::ifstream in(std::string(SHARDCHECK_SOURCE_DIR) + "/docs/scenarios.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  REQUIRE(!doc.empty());
  for (const StrategyInfo& row : kStrategyTable) {
    const std::string line = "| `" + std::string(row.name) + "` | " + std::string(row.known_as) + " |";
    INFO(line);
    REQUIRE(doc.find(line) != std::string::npos);
  }
}
