// The RapidCheck driver. RapidCheck's own random source is seeded explicitly per property
// (from --seed and the property's name, so --only does not change a property's cases); its
// global configuration (RC_PARAMS, which may name no seed and then draws one from the
// machine) is never consulted. Shrinking keeps the last failing case: RapidCheck accepts
// every failing candidate, so the last failure it saw is the minimal counterexample it reports.
// RapidCheck itself is single-threaded (its generation context is global), so with several
// jobs the cases are drawn first, checked on a thread pool, and RapidCheck then drives the
// property as with one job, reading each verdict already known: the same cases, shrinking
// and output for every job count.
#include "properties/suite.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <unordered_map>

#include "core/base/atomic_file.hpp"
#include "core/base/rng.hpp"
#include "run/ordered_pool.hpp"
#include "run/processes.hpp"
#include "run/scenario_run.hpp"

namespace shardcheck::properties {

namespace {

using Clock = std::chrono::steady_clock;

// Everything one check learns while RapidCheck drives it.
template <class Case>
struct Run {
  std::optional<Case> last;  // the last failing case: the minimal one once shrinking ends
  Verdict verdict;
  std::optional<Verdict::Kind> mode;  // fail or error: the kind shrinking stays within
  int evaluations = 0;
  int after_failure = 0;
  // Verdicts checked ahead on the thread pool, by case_key: a case found here is not checked
  // again (the check is a function of the case alone).
  std::unordered_map<std::string, Verdict> known;
};

// Everything that defines a case, as text: two cases with the same key check the same.
std::string case_key(const TrainingCase& c) { return training_scenario_yaml(c, "case", "", "{}"); }
std::string case_key(const LayoutCase& c) { return describe(c); }

class ShrinkCounter final : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool accepted) override {
    shrinks += accepted ? 1 : 0;
  }
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
  int shrinks = 0;
};

[[noreturn]] void rc_result(rc::detail::CaseResult::Type t, const std::string& message) {
  throw rc::detail::CaseResult(t, message);
}

template <class Case>
void evaluate(Run<Case>& run, const Case& c, const std::function<Verdict(const Case&)>& check,
              const SuiteOptions& o) {
  // Budget spent: every further candidate "passes" unchecked, so shrinking ends at once with
  // the smallest failure found so far.
  if (run.mode && run.after_failure >= o.shrink_budget) return;
  Verdict v;
  const auto known = run.known.empty() ? run.known.end() : run.known.find(case_key(c));
  if (known != run.known.end()) {
    v = known->second;
  } else {
    try {
      v = check(c);
    } catch (const std::exception& e) {
      v = Verdict::error(std::string("internal error: ") + e.what());
    }
  }
  ++run.evaluations;
  if (run.mode) ++run.after_failure;
  if (v.passed()) return;
  if (v.kind == Verdict::Kind::discard) rc_result(rc::detail::CaseResult::Type::Discard, v.message);
  // A candidate failing the other way (a crash while shrinking a wrong result, or the
  // reverse) is a different problem: do not let shrinking drift to it.
  if (run.mode && *run.mode != v.kind)
    rc_result(rc::detail::CaseResult::Type::Discard, "a different kind of failure");
  run.mode = v.kind;
  run.last = c;
  run.verdict = v;
  rc_result(rc::detail::CaseResult::Type::Failure, v.message);
}

std::string next_file(const std::string& dir, const std::string& property) {
  constexpr int kMaxFiles = 100000;
  for (int n = 1; n <= kMaxFiles; ++n) {
    const std::string f = dir + "/" + property + "-" + std::to_string(n) + ".yaml";
    if (!std::filesystem::exists(f)) return f;
  }
  throw core::InternalError(dir + " already holds " + std::to_string(kMaxFiles) + " counterexamples of " +
                            property);
}

std::string description(const Property& p, const SuiteOptions& o, const PropertyResult& r,
                        const std::string& look) {
  std::string d = "Counterexample to the property '" + p.name + "', found by `shardcheck props --only " +
                  p.name + " --seed " + std::to_string(o.seed) + " --cases " + std::to_string(o.cases) +
                  (o.mutation ? " --mutations" : "") + "`";
  if (o.mutation) d += " with the catalog bug " + std::string(core::to_string(*o.mutation)) + " forced on";
  d += " (case " + std::to_string(r.cases) + ", shrunk " + std::to_string(r.shrinks) + " times).\n";
  d += (r.status == PropertyResult::Status::error ? "Internal error: " : "What failed: ") + r.message + "\n";
  d += "Why it must hold: " + p.why + "\n";
  return d + look + "\n";
}

// Writes the counterexample, then checks that it loads and says whether `shardcheck run` of
// it fails its expectation (it does when the oracles or detectors see the failure too).
template <class Case>
void save(const Property& p, const SuiteOptions& o, const Case& c, PropertyResult& r) {
  const std::string dir = o.out_dir + "/props";
  if (core::Status s = core::make_dirs(dir); !s) {
    r.note = "not saved: " + s.message();
    return;
  }
  const std::string file = next_file(dir, p.name);
  const std::string name = "props-" + std::filesystem::path(file).stem().string();
  std::string text, look;
  if constexpr (std::is_same_v<Case, TrainingCase>) {
    look =
        "`shardcheck run` judges the findings of this run; where it meets the expectation the failure is "
        "visible to the "
        "property only: re-check it with `shardcheck props --replay` and this file.";
    text = training_scenario_yaml(c, name, description(p, o, r, look), "{findings: []}");
    look = "re-check it with `shardcheck props --replay " + file + "`";
  } else {
    look =
        "The trace writes every tensor of the layout, reduce-scatters, all-gathers and reads every tensor "
        "back; `" +
        layout_command(c) + "` prints the layout the property judged.";
    text = layout_scenario_yaml(c, name, description(p, o, r, look));
    look = "`" + layout_command(c) + "` prints the layout";
  }
  if (core::Status s = core::write_file_atomic(file, text); !s) {
    r.note = "not saved: " + s.message();
    return;
  }
  r.file = file;
  auto loaded = run::load_scenario(file);
  if (!loaded) {
    r.note = "the saved scenario does not load (a bug of the property suite): " + loaded.error().message();
    return;
  }
  const run::ScenarioOutcome out = run::run_scenario(*loaded, {});
  if (!out.explored.error.empty()) {
    r.note = "`shardcheck run` of it stops with an internal error: " + out.explored.error;
  } else if (out.judged.met) {
    r.note = "`shardcheck run` of it finds nothing: the failure is visible to the property only; " + look;
  } else {
    r.note = "`shardcheck run` of it finds " + core::kinds_to_string(out.judged.found);
  }
}

rc::detail::TestParams test_params(const Property& p, const SuiteOptions& o) {
  rc::detail::TestParams params;
  params.seed = core::mix64(o.seed ^ core::fnv1a(p.name));
  params.maxSuccess = o.cases;
  // Up to 100 cases: sizes ramp to the nominal 100 and the cases stay in the small space.
  // Longer runs spend their extra cases on sizes past it, where the generators grow.
  params.maxSize = o.cases > rc::kNominalSize ? kMaxSize : rc::kNominalSize;
  params.maxDiscardRatio = 10;
  return params;
}

class Silent final : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

// The cases RapidCheck draws when every one passes: the cases it checks before a failure (or
// a case the check itself discards) changes its course.
template <class Case, class Draw>
std::vector<Case> draw_cases(Draw& draw, const rc::detail::TestMetadata& meta,
                             const rc::detail::TestParams& params) {
  std::vector<Case> cases;
  const rc::detail::Property prop = rc::detail::toProperty([&] { cases.push_back(draw()); });
  Silent silent;
  (void)rc::detail::checkProperty(prop, meta, params, silent, {});
  return cases;
}

// Checks `cases` on o.jobs threads, in order, up to the first that does not pass (RapidCheck
// checks nothing after it but shrink candidates), and keeps their verdicts for `evaluate`.
// Across processes each checks every count-th case (from its index) and all verdicts are
// exchanged: every case before the first that does not pass is checked by some process.
template <class Case>
void check_ahead(Run<Case>& run, const std::vector<Case>& cases,
                 const std::function<Verdict(const Case&)>& check, const SuiteOptions& o) {
  const run::Processes& procs = run::processes();
  const bool shared = o.across_processes && procs.count > 1;
  const size_t step = shared ? static_cast<size_t>(procs.count) : 1;
  const size_t first = shared ? static_cast<size_t>(procs.index) : 0;
  std::vector<size_t> mine;
  for (size_t i = first; i < cases.size(); i += step) mine.push_back(i);
  std::string bytes;  // index, kind, message length, message: this process's verdicts
  auto put = [&bytes](uint64_t v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); };
  run::ordered_pool<Verdict>(
      mine.size(), sim::resolve_jobs(o.jobs),
      [&](size_t k) {
        try {
          return check(cases[mine[k]]);
        } catch (const std::exception& e) {
          return Verdict::error(std::string("internal error: ") + e.what());
        }
      },
      [](size_t) {},
      [&](size_t k, Verdict v) {
        const bool passed = v.passed();
        put(mine[k]);
        put(static_cast<uint64_t>(v.kind));
        put(v.message.size());
        bytes += v.message;
        return passed;
      });
  for (const std::string& all : shared ? run::all_gather(bytes) : std::vector<std::string>{bytes}) {
    auto get = [&all](size_t& at) {
      uint64_t v = 0;
      std::memcpy(&v, all.data() + at, sizeof v);
      at += sizeof v;
      return v;
    };
    for (size_t at = 0; at < all.size();) {
      const size_t i = get(at);
      Verdict v;
      v.kind = static_cast<Verdict::Kind>(get(at));
      const size_t n = get(at);
      v.message = all.substr(at, n);
      at += n;
      run.known.emplace(case_key(cases[i]), std::move(v));
    }
  }
}

template <class Case>
PropertyResult drive(const Property& p, const SuiteOptions& o, rc::Gen<Case> gen,
                     std::function<Verdict(const Case&)> check) {
  const auto t0 = Clock::now();
  PropertyResult r;
  r.property = p.name;
  Run<Case> run;
  const std::optional<core::Mutation> mutation = o.mutation;
  auto draw = [&] {
    Case c = *gen;
    if constexpr (std::is_same_v<Case, TrainingCase>) {
      if (mutation) {
        // A case the catalog bug cannot change says nothing about catching it, and the loader
        // would refuse its scenario file: draw another (shrinking never moves onto one).
        if (!core::mutation_unmet_need(*mutation, c.config, *c.mesh(), "this case")) {
          rc_result(rc::detail::CaseResult::Type::Discard, "the catalog bug cannot change this case");
        }
        c.config.mutations.add(*mutation);
      }
    }
    return c;
  };
  const rc::detail::TestParams params = test_params(p, o);
  rc::detail::TestMetadata meta;
  meta.id = meta.description = p.name;
  if (sim::resolve_jobs(o.jobs) > 1 || o.across_processes)
    check_ahead(run, draw_cases<Case>(draw, meta, params), check, o);
  const rc::detail::Property prop = rc::detail::toProperty([&] { evaluate(run, draw(), check, o); });
  ShrinkCounter counter;
  const rc::detail::TestResult result = rc::detail::checkProperty(prop, meta, params, counter, {});
  rc::detail::SuccessResult success;
  rc::detail::FailureResult failure;
  rc::detail::GaveUpResult gave_up;
  rc::detail::Error error;
  r.evaluations = run.evaluations;
  r.shrinks = counter.shrinks;
  if (result.match(success)) {
    r.cases = success.numSuccess;
  } else if (result.match(failure) && run.last) {
    r.cases = failure.numSuccess + 1;
    r.status =
        *run.mode == Verdict::Kind::error ? PropertyResult::Status::error : PropertyResult::Status::failed;
    r.message = run.verdict.message;
    r.shrunk = describe(*run.last);
    if (o.save) save(p, o, *run.last, r);
  } else if (result.match(gave_up)) {
    r.status = PropertyResult::Status::gave_up;
    r.cases = gave_up.numSuccess;
    r.message = gave_up.description;
  } else {
    r.status = PropertyResult::Status::error;
    r.message =
        result.match(error) ? "RapidCheck: " + error.description : "RapidCheck: " + failure.description;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

TrainingCase case_of(const core::TrainingScenario& s) {
  TrainingCase c;
  c.config = s.config;
  const core::Mesh& m = *s.mesh;
  c.pp = m.size_or_one("pp");
  c.vpp = m.virtual_stages();
  c.dp = m.size_or_one("dp");
  c.dp_outer = m.size_or_one("dp_outer");
  c.dp_inner = m.size_or_one("dp_inner");
  c.policy = sim::parse_policy(s.schedule.policy).value_or(sim::Policy::random);
  c.schedule_seed = s.schedule.seed;
  c.pct_depth = s.schedule.depth;
  c.reuse_earliest = s.reuse == core::PoolReuse::earliest;
  return c;
}

}  // namespace

std::string_view to_string(PropertyResult::Status s) {
  switch (s) {
    case PropertyResult::Status::passed:
      return "passed";
    case PropertyResult::Status::failed:
      return "FAILED";
    case PropertyResult::Status::error:
      return "ERROR";
    case PropertyResult::Status::gave_up:
      return "GAVE UP";
  }
  return "?";
}

PropertyResult check_property(const Property& p, const SuiteOptions& o) {
  if (p.training()) return drive<TrainingCase>(p, o, gen_training_case(p.space), p.check_training);
  return drive<LayoutCase>(p, o, gen_layout_case(), p.check_layout);
}

const PropertyResult* MutationResult::first() const {
  for (const PropertyResult& r : results) {
    if (r.status == PropertyResult::Status::failed) return &r;
  }
  return nullptr;
}

MutationResult check_mutation(core::Mutation m, const SuiteOptions& o, const Property* only) {
  const auto t0 = Clock::now();
  MutationResult out;
  out.mutation = m;
  SuiteOptions mo = o;
  mo.mutation = m;
  for (const Property& p : all_properties()) {
    if (!p.training() || (only && only != &p)) continue;
    out.results.push_back(check_property(p, mo));
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

ReplayResult replay_scenario(const std::string& path, std::string property) {
  ReplayResult r;
  auto s = run::load_scenario(path);
  if (!s) {
    r.error = s.error().message();
    return r;
  }
  if (!s->training()) {
    r.error = path + ": a " + std::string(s->kind()) +
              " scenario; layout counterexamples replay with `shardcheck run`";
    return r;
  }
  if (property.empty() && s->name.rfind("props-", 0) == 0) {
    property = s->name.substr(6, s->name.find_last_of('-') - 6);
  }
  const Property* p = find_property(property);
  if (!p || !p->training()) {
    r.error =
        path + ": name the training property to re-check with --only (the scenario's name does not say)";
    return r;
  }
  r.property = p->name;
  try {
    r.verdict = p->check_training(case_of(s->training()->scenario));
  } catch (const std::exception& e) {
    r.verdict = Verdict::error(std::string("internal error: ") + e.what());
  }
  return r;
}

void print_result(std::ostream& out, const PropertyResult& r) {
  char line[160];
  std::snprintf(line, sizeof line, "%-26s %5d cases  %-7s %7.1f s", r.property.c_str(), r.cases,
                std::string(to_string(r.status)).c_str(), r.seconds);
  out << line << "\n";
  if (r.status == PropertyResult::Status::passed) return;
  out << "    " << r.message << "\n";
  if (!r.shrunk.empty()) out << "    shrunk (" << r.shrinks << " steps) to: " << r.shrunk << "\n";
  if (!r.file.empty()) out << "    saved: " << r.file << "\n    reproduce: shardcheck run " << r.file << "\n";
  if (!r.note.empty()) out << "    note: " << r.note << "\n";
}

}  // namespace shardcheck::properties
