// What the fuzz targets and their regression test demand of one input: the scenario loader
// either accepts a file that stays inside the documented limits or rejects it with
// `file:line:column: message`; the command-line parser either picks a subcommand or answers
// with exit code 0 (help) or 2 (bad input). Each check returns what is wrong, or "" when
// nothing is; a crash, a hang or a sanitizer report is wrong too, and ends the process.
//   std::string wrong = check_scenario_file("case.yaml", text);
//   if (!wrong.empty()) { std::fputs(wrong.c_str(), stderr); std::abort(); }
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardcheck::fuzz {

struct ScenarioCheck {
  // Run one short simulated schedule of an accepted trace scenario whose program has at
  // most this many operations over all ranks (0: never run).
  int run_ops_max = 2000;
  // Train an accepted training scenario for one schedule when parameters * steps (and the
  // tokens' activations, over 4) stay within this (0: never). At 200 000 a valid 26-layer
  // model trained for over 10 s under the fuzz build's instrumentation (libFuzzer stopped it
  // at 14 s; about 0.5 s in a release build): a slow input, not a hang.
  int64_t train_work_max = 60000;
};

// `text` is the content of the file at `path` (the loader reads the file itself).
std::string check_scenario_file(const std::string& path, std::string_view text, const ScenarioCheck& c = {});

// A captured program's folder `dir` holding one file, rank-0.jsonl, whose content is `text`:
// the loader accepts it and one short simulated schedule runs without an internal error, or
// it refuses it naming the file and a line (`DIR/rank-0.jsonl:LINE: message`) or the folder.
std::string check_capture_folder(const std::string& dir, std::string_view text);

// A command line as the fuzzer writes it: arguments separated by newlines (argv[0] is
// supplied). `layout` and `list`, which are cheap and touch no files, are run as well, with
// their output discarded; every other subcommand is parsed only.
std::vector<std::string> split_arguments(std::string_view input);
std::string check_command_line(std::string_view input);

}  // namespace shardcheck::fuzz
