// The CLI11 app of `shardcheck` and parsing without running: unknown commands and options,
// malformed or out-of-range values all end here as exit code 2 with a message, its control
// characters escaped.
#include "cli/app.hpp"

#include <ostream>
#include <string>

#include "cli/version.hpp"

#include "core/base/text.hpp"

namespace shardcheck::cli {

CommandLine::CommandLine() : app_("shardcheck: verification harness for sharded data-parallel training") {
  app_.require_subcommand(1);
  app_.set_version_flag("--version", std::string("shardcheck ") + kVersion + " (commit " + kCommit + ")");
  actions_["layout"] = add_layout_command(app_);
  actions_["demo"] = add_demo_command(app_);
  actions_["run"] = add_run_command(app_);
  actions_["explore"] = add_explore_command(app_);
  actions_["replay"] = add_replay_command(app_);
  actions_["compare"] = add_compare_command(app_);
  actions_["list"] = add_list_command(app_);
  actions_["props"] = add_props_command(app_);
}

CommandLine::Parsed CommandLine::parse(int argc, const char* const* argv, std::ostream& out,
                                       std::ostream& err) {
  Parsed p;
  // CLI11 would only say "a subcommand is required"; name the unknown word instead.
  if (argc > 1 && argv[1][0] != '-' && actions_.count(argv[1]) == 0) {
    err << "shardcheck: unknown command '" << core::printable(argv[1]) << "'; commands:";
    for (const auto& [name, action] : actions_) err << " " << name;
    err << "\nrun 'shardcheck --help' for usage\n";
    p.exit_code = kBadInput;
    return p;
  }
  try {
    app_.parse(argc, argv);
  } catch (const CLI::CallForVersion& e) {
    p.exit_code = app_.exit(e, out, err);
    return p;
  } catch (const CLI::CallForHelp& e) {
    p.exit_code = app_.exit(e, out, err);
    return p;
  } catch (const CLI::CallForAllHelp& e) {
    p.exit_code = app_.exit(e, out, err);
    return p;
  } catch (const CLI::ParseError& e) {
    // CLI11's messages quote the arguments: a control character in one must not reach the terminal raw.
    err << "shardcheck: " << core::printable(e.what()) << "\nrun 'shardcheck --help' for usage\n";
    p.exit_code = kBadInput;
    return p;
  }
  for (CLI::App* sub : app_.get_subcommands()) {
    p.command = sub->get_name();
    p.action = &actions_.at(p.command);
    return p;
  }
  err << "shardcheck: no command given\nrun 'shardcheck --help' for usage\n";
  p.exit_code = kBadInput;
  return p;
}

}  // namespace shardcheck::cli
