// `shardcheck props`: the property suite under RapidCheck (properties/), the mutation score,
// and the re-check of a saved counterexample.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "core/base/text.hpp"
#include "properties/suite.hpp"
#include "reports/report_model.hpp"

namespace shardcheck::cli {

namespace {

struct PropsArgs {
  int cases = 100;
  int64_t seed = 1;
  std::string only;
  bool mutations = false;
  std::string out = "out";
  std::string replay;
  int jobs = 0;  // threads checking cases; 0: every core
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_suite(const PropsArgs& a, const properties::SuiteOptions& o, const properties::Property* only) {
  const auto t0 = std::chrono::steady_clock::now();
  int failed = 0, errors = 0, run = 0;
  std::cout << "property suite: " << o.cases << " cases per property, seed " << o.seed << "\n\n";
  for (const properties::Property& p : properties::all_properties()) {
    if (only && only != &p) continue;
    const properties::PropertyResult r = properties::check_property(p, o);
    properties::print_result(std::cout, r);
    std::cout.flush();
    ++run;
    failed += r.status == properties::PropertyResult::Status::failed;
    errors += r.status == properties::PropertyResult::Status::error ||
              r.status == properties::PropertyResult::Status::gave_up;
  }
  std::printf(
      "\n%d propert%s: %d passed, %d failed, %d internal errors (seed %lld, %d cases each) in %.1f s\n", run,
      run == 1 ? "y" : "ies", run - failed - errors, failed, errors, static_cast<long long>(a.seed), o.cases,
      since(t0));
  if (failed) return kExpectationFailed;
  return errors ? kInternalError : kOk;
}

void print_mutation(const properties::MutationResult& r) {
  using S = properties::PropertyResult::Status;
  const properties::PropertyResult* first = r.first();
  std::string caught_by;
  for (const auto& p : r.results) {
    if (p.status == S::failed) caught_by += (caught_by.empty() ? "" : ", ") + p.property;
  }
  char line[240];
  std::snprintf(line, sizeof line, "%-34s %-13s %s  (%.1f s)",
                std::string(core::to_string(r.mutation)).c_str(), core::mutation_upstream(r.mutation),
                first ? ("caught by " + caught_by).c_str() : "MISSED: no property failed", r.seconds);
  std::cout << line << "\n";
  if (first) {
    std::cout << "    first: " << first->property << ", at case " << first->cases << ": " << first->message
              << "\n";
    std::cout << "    shrunk (" << first->shrinks << " steps) to: " << first->shrunk << "\n";
    if (!first->file.empty())
      std::cout << "    saved: " << first->file << "\n    reproduce: " << reports::command_name() << " run "
                << first->file << "\n";
    if (!first->note.empty()) std::cout << "    note: " << first->note << "\n";
    for (const auto& p : r.results) {
      if (p.status == S::failed && &p != first && !p.file.empty())
        std::cout << "    also " << p.property << ": " << p.file << "\n";
    }
  }
  for (const auto& p : r.results) {
    if (p.status == S::error || p.status == S::gave_up) {
      std::cout << "    internal error in " << p.property << " (not counted as catching it): " << p.message
                << "\n";
    }
  }
  std::cout.flush();
}

int run_mutations(const properties::SuiteOptions& o, const properties::Property* only) {
  const auto t0 = std::chrono::steady_clock::now();
  int caught = 0;
  std::cout << "mutations: the training properties, once per catalog bug of docs/semantics.md §4 forced on ("
            << o.cases << " cases per property, seed " << o.seed << ")\n\n";
  for (int i = 0; i < core::kMutations; ++i) {
    const properties::MutationResult r = properties::check_mutation(static_cast<core::Mutation>(i), o, only);
    print_mutation(r);
    caught += r.caught();
  }
  std::printf("\nmutation score: %d/%d\n(in %.1f s)\n", caught, core::kMutations, since(t0));
  return caught == core::kMutations ? kOk : kExpectationFailed;
}

int replay(const PropsArgs& a) {
  const properties::ReplayResult r = properties::replay_scenario(a.replay, a.only);
  if (!r.error.empty()) {
    std::cerr << core::printable(r.error) << "\n";
    return kBadInput;
  }
  using K = properties::Verdict::Kind;
  const char* verdict = r.verdict.kind == K::pass      ? "holds"
                        : r.verdict.kind == K::fail    ? "FAILS"
                        : r.verdict.kind == K::discard ? "cannot be judged"
                                                       : "internal error";
  std::cout << r.property << " on " << a.replay << ": " << verdict
            << (r.verdict.message.empty() ? "" : ": " + r.verdict.message) << "\n";
  if (r.verdict.kind == K::fail) return kExpectationFailed;
  return r.verdict.kind == K::error ? kInternalError : kOk;
}

int props(const PropsArgs& a) {
  const properties::Property* only = nullptr;
  if (!a.only.empty()) {
    only = properties::find_property(a.only);
    if (!only) {
      std::cerr << "shardcheck: unknown property '" << core::printable(a.only) << "'; properties:";
      for (const auto& p : properties::all_properties()) std::cerr << " " << p.name;
      std::cerr << "\n";
      return kBadInput;
    }
    if (a.mutations && !only->training()) {
      std::cerr << "shardcheck: " << a.only << " is not a training property; no catalog bug can break it\n";
      return kBadInput;
    }
  }
  if (!a.replay.empty()) return replay(a);
  properties::SuiteOptions o;
  o.cases = a.cases;
  o.seed = static_cast<uint64_t>(a.seed);
  o.out_dir = a.out;
  o.jobs = a.jobs;
  const LaunchRole role = join_launch();
  if (role.leave) return kOk;
  o.across_processes = role.shared;
  o.save = role.prints;  // one process writes the counterexamples
  return a.mutations ? run_mutations(o, only) : run_suite(a, o, only);
}

}  // namespace

Action add_props_command(CLI::App& app) {
  auto a = std::make_shared<PropsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "props",
      "Property-test the sharding strategies (RapidCheck), or score the mutations of the bug catalog");
  cmd->add_option("--cases", a->cases, "Cases per property (default 100)")->transform(in_range(1, INT32_MAX));
  cmd->add_option("--seed", a->seed, "Seed of the generated cases (default 1)")
      ->transform(in_range(0, INT64_MAX));
  std::vector<std::string> names;
  for (const auto& p : properties::all_properties()) names.push_back(p.name);
  cmd->add_option("--only", a->only, "Run one property (see properties/README.md)")->check(one_of(names));
  cmd->add_flag("--mutations", a->mutations,
                "Run the suite once per catalog bug and print the mutation score");
  cmd->add_option("--out", a->out, "Folder for counterexamples (written to DIR/props/; default out)");
  cmd->add_option("--replay", a->replay,
                  "Re-check the property on a saved counterexample (named by --only or by the file)");
  cmd->add_option(
         "-j,--jobs", a->jobs,
         "Threads checking cases at once (default: every core); the output is the same for any number")
      ->transform(in_range(1, 4096));
  return [a] { return props(*a); };
}

}  // namespace shardcheck::cli
