// `shardcheck list`: the mutations of the seed-bug catalog and the shipped scenarios, one
// line each.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
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
  std::cout << "mutations (seed bugs; switch on with `mutations: [name]` in a training scenario):\n";
  for (int i = 0; i < core::kMutations; ++i) {
    const auto m = static_cast<core::Mutation>(i);
    std::printf("  %-36s %-13s %s\n", std::string(core::to_string(m)).c_str(), core::mutation_upstream(m),
                core::mutation_summary(m));
  }
  for (const char* sub : {"catalog", "trace", "training"}) {
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root + "/" + sub, ec)) {
      if (e.path().extension() == ".yaml") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) continue;
    std::cout << "\n" << root << "/" << sub << "/:\n";
    for (const auto& f : files) {
      auto s = load_scenario(f);
      if (!s) {
        std::printf("  %-44s (does not load: %s)\n", std::filesystem::path(f).filename().c_str(),
                    s.error().message().c_str());
        continue;
      }
      std::printf("  %-44s %-9s expects %-28s %s\n", std::filesystem::path(f).filename().c_str(),
                  s->kind.c_str(), core::describe(s->expect).c_str(), first_sentence(s->description).c_str());
    }
  }
  return kOk;
}

}  // namespace

Action add_list_command(CLI::App& app) {
  auto root = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("list", "List the seed-bug mutations and the shipped scenarios");
  cmd->add_option("--scenarios", *root, "Scenario folder (default: ./scenarios)");
  return [root] { return run_list(*root); };
}

}  // namespace shardcheck::cli
