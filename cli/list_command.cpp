// `shardcheck list`: the mutations of the bug catalog and the shipped scenarios, one
// line each.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/table.hpp"
#include "core/base/text.hpp"
#include "core/strategies/training_config.hpp"
#include "run/scenario.hpp"

namespace shardcheck::cli {

namespace {

std::string first_sentence(const std::string& text) {
  const size_t dot = text.find(". ");
  std::string s = dot == std::string::npos ? text : text.substr(0, dot + 1);
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int run_list(const std::string& given) {
  std::string root = given;
  if (root.empty())
    root = std::filesystem::is_directory("scenarios") ? "scenarios"
                                                      : std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios";
  std::cout << "mutations (catalog bugs; switch on with `mutations: [name]` in a training scenario):\n";
  const int width = output_width();
  Table mutations({{""}, {""}, {"", Table::kWrap, 30}});
  for (int i = 0; i < core::kMutations; ++i) {
    const auto m = static_cast<core::Mutation>(i);
    mutations.add(
        {"  " + std::string(core::to_string(m)), core::mutation_upstream(m), core::mutation_summary(m)});
  }
  mutations.print(std::cout, width);
  for (const char* sub : {"catalog", "trace", "training"}) {
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root + "/" + sub, ec)) {
      if (e.path().extension() == ".yaml") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) continue;
    std::cout << "\n" << root << "/" << sub << "/:\n";
    // The expectation wraps; the description, its first sentence, is cut to what is left.
    Table t({{""}, {""}, {"", Table::kWrap, 26}, {"", Table::kCut, 20, 1}});
    for (const auto& f : files) {
      const std::string name = "  " + std::filesystem::path(f).filename().string();
      auto s = load_scenario(f);
      if (!s) {
        t.add({name, "", "(does not load: " + core::printable(s.error().message()) + ")", ""});
        continue;
      }
      t.add({name, std::string(s->kind()), "expects " + core::describe(s->expect),
             first_sentence(s->description)});
    }
    t.print(std::cout, width);
  }
  return kOk;
}

}  // namespace

Action add_list_command(CLI::App& app) {
  auto root = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("list", "List the catalog bugs (mutations) and the shipped scenarios");
  cmd->add_option("--scenarios", *root, "Scenario folder (default: ./scenarios)");
  return [root] { return run_list(*root); };
}

}  // namespace shardcheck::cli
