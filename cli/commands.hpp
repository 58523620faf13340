// The subcommands of the `shardcheck` executable. Each registers its options on the CLI11
// app and returns the process exit code when run (run/exit_code.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>

#include "run/exit_code.hpp"
#include "run/gpu_runs.hpp"

namespace shardcheck::cli {

// The command line is options and printing over run/, whose names it uses unqualified.
using namespace shardcheck::run;

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

// An integer option's bounds: decimal, within lo..hi, or exit 2 with
// "--runs: 0 is out of range 1..100000" (cli/option_range.cpp). Attach it with
// `->transform(in_range(lo, hi))`, not `check`: it rewrites the value it read ("010" is 10),
// and CLI11 lets only a transform change the value it then converts.
CLI::Validator in_range(int64_t lo, int64_t hi);

// A word option's choices: `--help` lists them ("TEXT:{sim,gpu}"), and any other value is
// refused before anything runs, naming them ("--backend: cpu not in {sim,gpu}", exit 2).
// Attach it with `->check(one_of({...}))`.
CLI::Validator one_of(std::vector<std::string> choices);

// `--backend`, `--comm`, `--alloc`, `--amplify`, `--amplify-at` on run and compare.
void add_gpu_options(CLI::App* cmd, GpuArgs& a);

}  // namespace shardcheck::cli
