// The subcommands of the `shardcheck` executable. Each registers its options on the CLI11
// app and returns the process exit code when run: 0 expectations met, 1 an expectation not
// met, 2 bad input, 3 internal error.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace shardcheck::cli {

enum ExitCode : int { kOk = 0, kExpectationFailed = 1, kBadInput = 2, kInternalError = 3 };

// A subcommand's action, set when its options are registered and run after parsing.
using Action = std::function<int()>;

Action add_layout_command(CLI::App& app);
Action add_demo_command(CLI::App& app);
Action add_run_command(CLI::App& app);
Action add_explore_command(CLI::App& app);
Action add_replay_command(CLI::App& app);
Action add_compare_command(CLI::App& app);
Action add_list_command(CLI::App& app);
Action add_props_command(CLI::App& app);

}  // namespace shardcheck::cli
