// The judgments behind the fuzz targets: loads and parses go through the same functions
// users reach (run::load_scenario, cli::CommandLine), and the outcome is held against the
// contract of docs/semantics.md §5-6 and the limits in docs/limits.md.
#include "tests/fuzz/checks.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/app.hpp"
#include "core/base/text.hpp"
#include "core/scenario/trace_scenario.hpp"
#include "core/scenario/training_scenario.hpp"
#include "reports/chrome_trace.hpp"
#include "run/scenario.hpp"

namespace shardcheck::fuzz {

namespace {

// Output of subcommands that are run (layout) goes nowhere: a fuzzer prints millions.
class StdoutDiscarded {
 public:
  StdoutDiscarded() {
    std::fflush(stdout);
    saved_ = dup(1);
    FILE* null = std::fopen("/dev/null", "w");
    if (null) {
      dup2(fileno(null), 1);
      std::fclose(null);
    }
  }
  ~StdoutDiscarded() {
    std::fflush(stdout);
    if (saved_ >= 0) {
      dup2(saved_, 1);
      close(saved_);
    }
  }
  StdoutDiscarded(const StdoutDiscarded&) = delete;
  StdoutDiscarded& operator=(const StdoutDiscarded&) = delete;

 private:
  int saved_ = -1;
};

class CerrTo {
 public:
  explicit CerrTo(std::ostream& to) : saved_(std::cerr.rdbuf(to.rdbuf())) {}
  ~CerrTo() { std::cerr.rdbuf(saved_); }
  CerrTo(const CerrTo&) = delete;
  CerrTo& operator=(const CerrTo&) = delete;

 private:
  std::streambuf* saved_;
};

bool digits(std::string_view s, size_t& pos, int64_t& value) {
  const size_t start = pos;
  value = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9' && pos - start < 12)
    value = value * 10 + (s[pos++] - '0');
  return pos > start;
}

// "" when `message` can go to a terminal as it is: UTF-8 without control characters but
// line breaks (a byte from the input must come back escaped, never raw).
std::string printable_problem(std::string_view message) {
  if (!core::is_valid_utf8(message)) return "the message is not UTF-8";
  for (size_t i = 0; i < message.size();) {
    const core::Utf8Sequence seq = core::utf8_sequence_at(message, i);
    if (core::is_control(seq.code_point) && seq.code_point != '\n') {
      return "the message holds the raw control character " + core::printable(message.substr(i, seq.length));
    }
    i += seq.length;
  }
  return "";
}

// "" when `message` is `path:line:column: text` with a line inside the file.
std::string position_problem(const std::string& path, std::string_view text, std::string_view message) {
  const std::string head = path + ":";
  if (message.substr(0, head.size()) != head) return "the error does not start with '" + head + "'";
  size_t pos = head.size();
  int64_t line = 0, column = 0;
  if (!digits(message, pos, line) || pos >= message.size() || message[pos++] != ':')
    return "the error has no line number";
  if (!digits(message, pos, column) || message.substr(pos, 2) != ": ")
    return "the error has no column number";
  if (line < 1 || column < 1) return "line and column count from 1";
  int64_t lines = 1;
  for (char ch : text) lines += ch == '\n';
  if (line > lines + 1)
    return "line " + std::to_string(line) + " is past the end of the file (" + std::to_string(lines) +
           " lines)";
  if (message.size() <= pos + 2) return "the error has no message after its position";
  return printable_problem(message);
}

std::string trace_limits_problem(const core::TraceScenario& t) {
  using L = core::TraceLimits;
  if (t.ranks < 1 || t.ranks > L::kMaxRanks) return "accepted " + std::to_string(t.ranks) + " ranks";
  if (t.streams.empty() || static_cast<int>(t.streams.size()) > L::kMaxStreams)
    return "accepted " + std::to_string(t.streams.size()) + " streams";
  if (static_cast<int>(t.groups.size()) > L::kMaxGroups)
    return "accepted " + std::to_string(t.groups.size()) + " groups";
  if (static_cast<int64_t>(t.program.size()) > L::kMaxProgramSteps)
    return "accepted a program of " + std::to_string(t.program.size()) + " steps";
  int64_t ops = 0, accesses = 0, device_bytes = 0;
  for (int r = 0; r < t.ranks; ++r) {
    int64_t live = 0, peak = 0;
    std::map<std::string, int64_t> sizes;
    for (const auto& s : t.program) {
      if (!t.runs_on(s, r)) continue;
      ++ops;
      const int64_t n = static_cast<int64_t>(s.reads.size() + s.writes.size());
      if (n > L::kMaxAccessesPerKernel)
        return "accepted a kernel with " + std::to_string(n) + " reads and writes";
      accesses += n;
      if (s.kind == core::TraceStep::Kind::alloc) {
        if (s.bytes < 1 || s.bytes > L::kMaxBufferBytes)
          return "accepted a buffer of " + std::to_string(s.bytes) + " bytes";
        live += s.bytes;
        sizes[s.buffer] = s.bytes;
        peak = std::max(peak, live);
      } else if (s.kind == core::TraceStep::Kind::free) {
        live -= sizes[s.buffer];
      }
    }
    device_bytes += peak;
  }
  if (ops > L::kMaxOperations) return "accepted " + std::to_string(ops) + " operations over all ranks";
  if (accesses > L::kMaxAccesses)
    return "accepted " + std::to_string(accesses) + " kernel accesses over all ranks";
  if (device_bytes > L::kMaxDeviceBytes)
    return "accepted " + std::to_string(device_bytes) + " bytes allocated at once over all ranks";
  return "";
}

std::string training_limits_problem(const core::TrainingScenario& t) {
  using L = core::TrainingLimits;
  const core::TrainingConfig& c = t.config;
  if (t.mesh->world_size() > L::kMaxRanks)
    return "accepted " + std::to_string(t.mesh->world_size()) + " ranks";
  if (c.steps < 1 || c.steps > L::kMaxSteps) return "accepted " + std::to_string(c.steps) + " steps";
  if (c.microbatches < 1 || c.microbatches > L::kMaxMicrobatches)
    return "accepted " + std::to_string(c.microbatches) + " microbatches";
  if (auto why = core::training_limits_exceeded(c, *t.mesh, t.reference != "none"); !why)
    return "accepted: " + why.message();
  return "";
}

// A training run of a few milliseconds: the reference and the sharded run on a tiny model.
bool small_enough_to_train(const core::TrainingScenario& t, const ScenarioCheck& c) {
  const core::TrainingConfig& k = t.config;
  const core::ModelConfig& m = k.model;
  const int64_t params =
      m.vocab * m.hidden + m.layers * (8 * m.hidden * m.hidden + 7 * m.hidden) + 2 * m.hidden;
  const int64_t tokens = m.seq * k.micro_batch_size * k.microbatches * k.steps;
  return c.train_work_max > 0 && t.mesh->world_size() <= 8 && params * k.steps <= c.train_work_max &&
         tokens * (m.vocab + m.hidden * m.layers) <= c.train_work_max * 4;
}

// One schedule on the simulator with small bounds: a validated scenario may run out of them
// (that is reported, not an error), but must not make the simulator fail otherwise. A trace
// scenario's names are the file's: its run is rendered as a Chrome trace too.
std::string run_problem(const run::LoadedScenario& s) {
  auto opt = run::options_for(s, {});
  if (!opt) return "options_for rejected a loaded scenario: " + opt.error().message();
  sim::Options o = opt.value();
  o.max_steps = 200'000;
  o.max_device_bytes = int64_t{64} << 20;
  sim::RunResult r;
  if (s.trace()) {
    const sim::Replay replay = sim::replay(s.factory, o);
    r = replay.result;
    try {
      (void)reports::chrome_trace(replay.log, r.findings);
    } catch (const std::exception& e) {
      return std::string("the Chrome trace of an accepted scenario threw: ") + e.what();
    }
  } else {
    sim::World w(o);
    r = sim::run_once(w, s.factory);
  }
  if (r.error.empty()) return "";
  if (r.error.find("simulated device memory exhausted") != std::string::npos) return "";
  if (r.error.find("exceeded its bound of") != std::string::npos) return "";
  return "the simulator failed on a validated scenario: " + r.error;
}

}  // namespace

std::string check_scenario_file(const std::string& path, std::string_view text, const ScenarioCheck& c) {
  auto loaded = run::load_scenario(path);
  if (!loaded) {
    const std::string& m = loaded.error().message();
    if (auto why = position_problem(path, text, m); !why.empty())
      return "rejected without a position (" + why + "): " + m;
    return "";
  }
  const run::LoadedScenario& s = *loaded;
  if (s.trace()) {
    auto t = core::load_trace_scenario(path);
    if (!t) return "load_scenario accepted what load_trace_scenario rejects: " + t.error().message();
    if (auto why = trace_limits_problem(*t); !why.empty()) return why;
    int64_t ops = 0;
    for (int r = 0; r < t->ranks; ++r) {
      for (const auto& step : t->program) ops += t->runs_on(step, r);
    }
    if (ops <= c.run_ops_max) return run_problem(s);
    return "";
  }
  if (s.training()) {
    if (!s.training()) return "a training scenario without its training state";
    const core::TrainingScenario& t = s.training()->scenario;
    if (auto why = training_limits_problem(t); !why.empty()) return why;
    if (small_enough_to_train(t, c)) return run_problem(s);
    return "";
  }
  return "load_scenario accepted a scenario of kind '" + std::string(s.kind()) + "'";
}

std::string check_capture_folder(const std::string& dir, std::string_view text) {
  auto loaded = run::load_scenario(dir);
  if (!loaded) {
    const std::string& m = loaded.error().message();
    const std::string file = dir + "/rank-0.jsonl:";
    if (m.rfind(file, 0) == 0) {
      size_t i = file.size();
      while (i < m.size() && m[i] >= '0' && m[i] <= '9') ++i;
      if (i == file.size() || i >= m.size() || m[i] != ':') return "refused without the line: " + m;
      return "";
    }
    if (m.rfind(dir, 0) == 0) return "";  // about the folder: a missing rank, a world size
    return "refused without naming the file: " + m;
  }
  if (!loaded->capture())
    return "a capture folder loaded as a scenario of kind '" + std::string(loaded->kind()) + "'";
  (void)text;
  auto opt = run::options_for(*loaded, {});
  if (!opt) return "options_for rejected a loaded capture: " + opt.error().message();
  sim::Options o = opt.value();
  o.max_steps = 200'000;
  sim::World w(o);
  const sim::RunResult r = sim::run_once(w, loaded->factory);
  if (r.error.empty() || r.limit) return "";
  return "the simulator failed on a loaded capture: " + r.error;
}

std::vector<std::string> split_arguments(std::string_view input) {
  std::vector<std::string> args{"shardcheck"};
  size_t pos = 0;
  while (pos <= input.size() && !input.empty()) {
    size_t nl = input.find('\n', pos);
    if (nl == std::string_view::npos) nl = input.size();
    args.emplace_back(input.substr(pos, nl - pos));
    pos = nl + 1;
  }
  // A trailing newline ends the last argument; it does not start an empty one.
  if (args.size() > 1 && !input.empty() && input.back() == '\n') args.pop_back();
  return args;
}

std::string check_command_line(std::string_view input) {
  const std::vector<std::string> args = split_arguments(input);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  cli::CommandLine cl;
  const cli::CommandLine::Parsed p = cl.parse(static_cast<int>(argv.size()), argv.data(), out, err);
  if (!p.action) {
    if (p.exit_code == run::kBadInput && err.str().empty()) return "exit code 2 without a message";
    if (auto why = printable_problem(err.str()); !why.empty()) return why + ": " + core::printable(err.str());
    if (p.exit_code == run::kBadInput) return "";
    if (p.exit_code == run::kOk)
      return out.str().empty() ? "exit code 0 without running anything or printing help" : "";
    return "parsing ended with exit code " + std::to_string(p.exit_code) +
           " (expected 0 for help or 2 for bad input)";
  }
  if (p.command != "layout") return "";
  int code = 0;
  std::ostringstream errors;
  try {
    StdoutDiscarded quiet;
    CerrTo capture(errors);
    code = (*p.action)();
  } catch (const std::exception& e) {
    return std::string("layout threw (an internal error, exit 3): ") + e.what();
  }
  if (code == run::kBadInput && errors.str().empty()) return "layout exited 2 without a message";
  if (auto why = printable_problem(errors.str()); !why.empty()) return "layout: " + why;
  if (code != run::kOk && code != run::kBadInput)
    return "layout exited " + std::to_string(code) + ": " + errors.str();
  return "";
}

}  // namespace shardcheck::fuzz
