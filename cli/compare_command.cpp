// `shardcheck compare FILE --against single_rank|distopt [--steps N]`: trains the scenario's
// strategy on the simulator and the comparison run on the same data, and prints per-step
// losses side by side, the largest absolute and relative loss difference, and the first
// tensor whose weights differ.
// `shardcheck compare FILE --capture DIR`: sets a captured program's collectives beside those
// the scenario's engine issues, rank by rank (run/fidelity.hpp), and prints the first
// difference with both sides' lines and a summary of every difference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/output_paths.hpp"
#include "cli/progress.hpp"
#include "core/base/text.hpp"
#include "run/compare.hpp"
#include "run/fidelity.hpp"
#include "run/gpu_runs.hpp"
#include "run/interrupt.hpp"
#include "run/report.hpp"
#include "run/scenario.hpp"

namespace shardcheck::cli {

namespace {

struct CompareArgs {
  std::string file;
  std::string against = "single_rank";
  int steps = 0;
  std::string report;
  std::string capture;  // --capture: compare collective sequences with this captured program
  GpuArgs gpu;
  int jobs = 0;  // threads; 0: every core
};

// The report of a compare run; a run stopped by a signal or an internal error is reported as
// far as it got, marked incomplete.
bool write_compare_report(const CompareArgs& a, const LoadedScenario& s, const CompareResult& r,
                          double seconds) {
  reports::Report report;
  report.title = "shardcheck compare";
  report.command = "shardcheck compare " + core::shell_path(a.file) + " --against " + a.against +
                   (a.steps > 0 ? " --steps " + std::to_string(a.steps) : "") + " --report " +
                   core::shell_path(a.report);
  reports::ScenarioResult sr;
  sr.name = s.name;
  sr.file = s.file;
  sr.kind = s.kind();
  sr.description = s.description;
  sr.expected = r.exact ? "bitwise equal weights" : "losses side by side";
  sr.met = !(r.exact && !r.first_divergent.empty());
  sr.schedules = 1;
  sr.seconds = seconds;
  // What the training's detectors and oracles found, as `run` reports them.
  sr.findings = r.findings;
  for (const auto& f : r.findings) {
    if (std::find(sr.found.begin(), sr.found.end(), f.kind) == sr.found.end()) sr.found.push_back(f.kind);
  }
  reports::CompareData d;
  d.against = r.against;
  d.series = {{r.label, r.ours}, {r.against, r.theirs}};
  d.max_abs_diff = r.max_abs;
  d.max_rel_diff = r.max_rel;
  d.bitwise_equal = r.first_divergent.empty() && r.error.empty() && !r.cancelled;  // unknown after a stop
  d.first_divergent = r.first_divergent;
  d.achievable_loss = r.entropy_rate > 0 ? r.entropy_rate : -1;
  d.schedule = "seed " + std::to_string(r.seed) + " (the file's first schedule)";
  if (r.scheduler_steps > 0) {
    sr.checked = reports::CheckedData{
        r.scheduler_steps, r.operations, r.collectives, r.bytes_checked, static_cast<int>(r.ours.size()),
        detectors_of(s)};
  }
  if (!r.ours.empty()) sr.compare = d;  // after a stop: the curves as far as they got
  if (!r.error.empty() || r.cancelled) {
    sr.met = false;
    sr.complete = false;
    sr.error = r.error;
    if (r.cancelled) {
      mark_incomplete(report, reports::Report::kInterrupted,
                      interrupt_reason() + ", before the comparison finished");
    } else {
      mark_incomplete(report, reports::Report::kInternalError, "internal error: " + r.error);
    }
  }
  report.scenarios.push_back(std::move(sr));
  return write_report_to(report, a.report);
}

// compare_on_sim, with an exception escaping it turned into the result's internal error.
CompareResult compare_guarded(const LoadedScenario& s, const CompareArgs& a) {
  try {
    return compare_on_sim(s, a.against, a.steps, a.jobs);
  } catch (const std::exception& e) {
    CompareResult r;
    r.against = a.against;
    r.error = e.what();
    return r;
  }
}

void print_table(const CompareResult& r) {
  std::printf("%-6s %-18s %-18s %s\n", "step", r.label.c_str(), r.against.c_str(), "|delta|");
  for (size_t s = 0; s < r.ours.size(); ++s) {
    const double other = s < r.theirs.size() ? r.theirs[s] : NAN;
    std::printf("%-6zu %-18.9g %-18.9g %.3g\n", s, r.ours[s], other, std::fabs(r.ours[s] - other));
  }
}

// One side's line at a difference: its collective there, or, where it has none, its next one.
void print_side(const std::string& label, int64_t at, int64_t next, const CollectiveSequence& seq) {
  const std::string pad(label.size() < 9 ? 9 - label.size() : 1, ' ');  // the two sides' lines align
  if (at >= 0) {
    std::cout << "  " << label << pad << "#" << at << ": " << describe(seq[static_cast<size_t>(at)]) << "\n";
    return;
  }
  std::cout << "  " << label << ":" << pad << "nothing here; its next is "
            << (next < static_cast<int64_t>(seq.size())
                    ? "#" + std::to_string(next) + ": " + describe(seq[static_cast<size_t>(next)])
                    : std::string("none (its end)"))
            << "\n";
}

// The first difference in rank order, with both sides' lines there.
void print_first_difference(const FidelityResult& r, const std::vector<CollectiveSequence>& captured,
                            const std::vector<CollectiveSequence>& modeled) {
  for (const RankFidelity& rf : r.ranks) {
    if (rf.differences.empty()) continue;
    const SequenceDifference& d = rf.differences.front();
    using K = SequenceDifference::Kind;
    const char* how = d.kind == K::captured_only  ? "the capture issues a collective the model does not"
                      : d.kind == K::modeled_only ? "the model issues a collective the capture does not"
                                                  : "aligned collectives differ";
    std::cout << "\nfirst difference, rank " << rf.rank << ": " << how
              << (d.what.empty() ? "" : " (" + d.what + ")") << "\n";
    print_side("captured", d.captured, d.captured_next, captured[static_cast<size_t>(rf.rank)]);
    print_side("modeled", d.modeled, d.modeled_next, modeled[static_cast<size_t>(rf.rank)]);
    return;
  }
}

int run_capture_compare(const CompareArgs& a, const LoadedScenario& s) {
  auto cap = load_scenario(a.capture);
  if (!cap) {
    std::cerr << core::printable(cap.error().message()) << "\n";
    return kBadInput;
  }
  if (!cap->capture()) {
    std::cerr << "shardcheck compare: --capture takes a captured program's folder (rank-*.jsonl), not "
              << core::printable(a.capture) << " (kind: " << cap->kind() << ")\n";
    return kBadInput;
  }
  InterruptScope interrupts;
  auto captured = collective_sequences(*cap);
  if (!captured) {
    std::cerr << "shardcheck compare: " << core::printable(captured.error().message()) << "\n";
    return interrupted() ? interrupt_exit_code() : kInternalError;
  }
  auto modeled = collective_sequences(s);
  if (!modeled) {
    std::cerr << "shardcheck compare: " << core::printable(modeled.error().message()) << "\n";
    return interrupted() ? interrupt_exit_code() : kInternalError;
  }
  const FidelityResult r = compare_sequences(*captured, *modeled);
  std::cout << "compare the collectives of " << core::printable(a.capture) << " (captured) with "
            << core::printable(s.name) << " (modeled)\n";
  if (!r.problem.empty()) {
    std::cerr << "shardcheck compare: " << r.problem << "\n";
    return kBadInput;
  }
  if (!cap->partial.empty()) {
    std::cout << "the capture is partial, so it holds only the collectives before its ranks stopped: "
              << core::printable(cap->partial) << "\n";
  }
  for (const RankFidelity& rf : r.ranks) {
    std::cout << "rank " << rf.rank << ": " << rf.captured << " captured, " << rf.modeled << " modeled: "
              << (rf.differences.empty() ? "the same sequence"
                                         : std::to_string(rf.differences.size()) + " differences")
              << "\n";
  }
  if (r.equal()) {
    std::cout << "\nequal: every rank issues the same collectives (op, group, dtype, counts, reduce op) on "
                 "matching streams\n";
    return kOk;
  }
  print_first_difference(r, *captured, *modeled);
  std::cout << "\nevery difference, over all ranks:\n";
  for (const std::string& line : summarize(r, *captured, *modeled)) std::cout << "  " << line << "\n";
  return kExpectationFailed;
}

// Whether compare can take the loaded file; says why not on stderr.
bool is_training(const run::LoadedScenario& s, const std::string& file) {
  if (s.capture()) {
    // A folder has no line to point at: say what it is and what compare takes.
    std::cerr << "shardcheck compare: " << core::printable(file)
              << " is a captured program; compare takes a training scenario (compare FILE.yaml runs it "
                 "against the single-rank reference; compare FILE.yaml --capture "
              << core::printable(file) << " compares its collectives with the capture's)\n";
    return false;
  }
  if (!s.training()) {
    std::cerr << core::printable(file)
              << ":1:1: compare needs a training scenario (this one is kind: " << s.kind() << ")\n";
    return false;
  }
  return true;
}

int run_compare(const CompareArgs& a) {
  std::vector<std::string> inputs{a.file};
  if (!a.capture.empty()) inputs.push_back(a.capture);
  if (!outputs_ok({}, {"--report", a.report}, inputs)) return kBadInput;
  auto s = load_scenario(a.file);
  if (!s) {
    std::cerr << core::printable(s.error().message()) << "\n";
    return kBadInput;
  }
  if (!is_training(*s, a.file)) return kBadInput;
  const bool on_gpu = a.gpu.backend != "sim";
  if (!a.capture.empty()) {
    if (on_gpu || !a.report.empty() || a.steps > 0) {
      std::cerr
          << "shardcheck compare: --capture compares collective sequences on the simulator; it takes no "
             "--backend gpu, --report or --steps\n";
      return kBadInput;
    }
    return run_capture_compare(a, *s);
  }
  if (a.against != "single_rank" && a.against != "distopt" && !(on_gpu && a.against == "sim")) {
    std::cerr << "shardcheck compare: --against is single_rank or distopt" << (on_gpu ? " or sim" : "")
              << " (not '" << core::printable(a.against) << "')\n";
    return kBadInput;
  }
  if (auto why = compare_steps_problem(*s, a.against, a.steps); !why) {
    std::cerr << "shardcheck compare: " << core::printable(why.message()) << "\n";
    return kBadInput;
  }
  if (on_gpu) return compare_on_gpu(*s, a.gpu, a.against, a.steps);
  InterruptScope interrupts;
  const auto start = std::chrono::steady_clock::now();
  CompareResult r = compare_guarded(*s, a);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r.bad_input.empty()) {
    std::cerr << "shardcheck compare: " << core::printable(r.bad_input) << "\n";
    return kBadInput;
  }
  if (!r.error.empty() || r.cancelled) {
    if (r.error.empty()) {
      std::cout << "compare: " << interrupt_reason() << " before the comparison finished\n";
    } else {
      std::cerr << "shardcheck compare: internal error: " << core::printable(r.error) << "\n";
    }
    if (!a.report.empty() && !write_compare_report(a, *s, r, seconds)) return kInternalError;
    return r.error.empty() ? interrupt_exit_code() : kInternalError;
  }
  std::cout << "compare " << r.label << " (" << core::printable(s->name) << ") against " << r.against << ": "
            << r.ours.size() << " steps" << (r.exact ? ", exact mode" : "") << "\n\n";
  print_table(r);
  std::printf("\nmax |delta loss| = %.3g (relative %.3g)\n", r.max_abs, r.max_rel);
  if (r.first_divergent.empty()) {
    std::cout << "weights: bitwise equal after every step\n";
  } else {
    std::cout << "weights: first difference " << r.first_divergent << "\n";
  }
  if (r.entropy_rate > 0)
    std::printf("achievable loss (the data's entropy rate): %.4f nats\n", r.entropy_rate);
  if (!a.report.empty() && !write_compare_report(a, *s, r, seconds)) return kInternalError;
  return r.exact && !r.first_divergent.empty() ? kExpectationFailed : kOk;
}

}  // namespace

Action add_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* cmd =
      app.add_subcommand("compare", "Train a scenario and compare losses and weights against a baseline");
  cmd->add_option("file", a->file, "Training scenario file")->required();
  cmd->add_option("--against", a->against,
                  "single_rank (the reference trainer), distopt, or sim (the simulator; with --backend gpu)")
      ->check(one_of({"single_rank", "distopt", "sim"}));
  cmd->add_option("--steps", a->steps, "Steps to train (default: the file's)")
      ->transform(in_range(1, core::TrainingLimits::kMaxSteps));
  cmd->add_option("--capture", a->capture,
                  "Compare the collectives of this captured program (a folder of rank-*.jsonl) with the ones "
                  "the scenario's engine issues, rank by rank");
  add_gpu_options(cmd, a->gpu);
  cmd->add_option("--report", a->report, "Write a report with the loss curves to this folder");
  add_jobs_option(cmd, a->jobs);
  return [a] { return run_compare(*a); };
}

}  // namespace shardcheck::cli
