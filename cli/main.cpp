// `shardcheck`: the command line. Parses with CLI11, dispatches to a subcommand, and maps
// failures to the documented exit codes (2 bad input, 3 internal error).
#include <exception>
#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "core/status.hpp"

int main(int argc, char** argv) {
  using namespace shardcheck::cli;
  CLI::App app{"shardcheck: verification harness for sharded data-parallel training"};
  app.require_subcommand(1);
  std::map<std::string, Action> actions;
  actions["layout"] = add_layout_command(app);
  actions["demo"] = add_demo_command(app);
  actions["run"] = add_run_command(app);
  actions["explore"] = add_explore_command(app);
  actions["replay"] = add_replay_command(app);
  actions["compare"] = add_compare_command(app);
  actions["list"] = add_list_command(app);
  actions["props"] = add_props_command(app);
  // CLI11 would only say "a subcommand is required"; name the unknown word instead.
  if (argc > 1 && argv[1][0] != '-' && actions.count(argv[1]) == 0) {
    std::cerr << "shardcheck: unknown command '" << argv[1] << "'; commands:";
    for (const auto& [name, action] : actions) std::cerr << " " << name;
    std::cerr << "\nrun 'shardcheck --help' for usage\n";
    return kBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "shardcheck: " << e.what() << "\n";
    std::cerr << "run 'shardcheck --help' for usage\n";
    return kBadInput;
  }
  try {
    for (auto* sub : app.get_subcommands()) return actions.at(sub->get_name())();
  } catch (const std::exception& e) {
    std::cerr << "shardcheck: internal error: " << e.what() << "\n";
    return kInternalError;
  }
  return kInternalError;
}
