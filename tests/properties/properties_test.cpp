// The property suite on a bounded budget: every property holds on generated cases; a failing
// property shrinks to a minimal case and saves a scenario that loads and replays; a catalog bug
// of docs/semantics.md §4 yields a scenario that `shardcheck run` fails on; generation follows the
// seed and nothing else; the memory formula matches a hand count; every catalog bug is caught
// by the property meant for it; and `shardcheck props` keeps its options and exit codes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "core/base/atomic_file.hpp"
#include "core/scenario/training_scenario.hpp"
#include "properties/harness.hpp"
#include "properties/memory.hpp"
#include "properties/suite.hpp"
#include "run/scenario_run.hpp"
#include "tests/support/run_command.hpp"

using namespace shardcheck;
using properties::PropertyResult;

namespace {

// A fresh folder for counterexamples, under the system's temporary folder.
std::string out_dir(const std::string& name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("shardcheck-props-test-" + name)).string();
  std::filesystem::remove_all(dir);
  return dir;
}

properties::SuiteOptions options(int cases, const std::string& name) {
  properties::SuiteOptions o;
  o.cases = cases;
  o.seed = 1;
  o.out_dir = out_dir(name);
  o.shrink_budget = 40;
  return o;
}

// Runs one property of the suite and requires it to hold on every case.
void require_holds(const std::string& name, int cases) {
  const properties::Property* p = properties::find_property(name);
  REQUIRE(p != nullptr);
  const PropertyResult r = properties::check_property(*p, options(cases, name));
  INFO(name << ": " << r.message << "\n  case: " << r.shrunk);
  REQUIRE(r.status == PropertyResult::Status::passed);
  REQUIRE(r.cases == cases);  // not vacuous: every case was generated and checked
}

}  // namespace

// Each property fails here if the strategy code, the layout or the simulator breaks what the
// property states (see properties/README.md for the why of each).
TEST_CASE("layout_partitions holds on 200 shape lists", "[properties]") {
  require_holds("layout_partitions", 200);
}
TEST_CASE("redistribute_round_trip holds on 100 shape lists", "[properties]") {
  require_holds("redistribute_round_trip", 100);
}
TEST_CASE("matches_reference holds on 30 training cases", "[properties]") {
  require_holds("matches_reference", 30);
}
TEST_CASE("matches_distopt holds on 20 training cases", "[properties]") {
  require_holds("matches_distopt", 20);
}
TEST_CASE("collective_fingerprints holds on 30 training cases", "[properties]") {
  require_holds("collective_fingerprints", 30);
}
TEST_CASE("no_findings holds on 30 training cases", "[properties]") { require_holds("no_findings", 30); }
TEST_CASE("resting_memory holds on 30 training cases", "[properties]") {
  require_holds("resting_memory", 30);
}
TEST_CASE("grad_norm holds on 30 training cases", "[properties]") { require_holds("grad_norm", 30); }
TEST_CASE("same_seed_same_trace holds on 20 training cases", "[properties]") {
  require_holds("same_seed_same_trace", 20);
}

// The formula of memory.hpp against numbers worked out by hand from docs/semantics.md §2's layout
// (would fail if the formula dropped a buffer, or the layout's padding changed): ZeRO-1 on
// dp 2, TinyLM V64 H16 L4, fp32 params (model weights alias main), Adam, fp32 grads.
// embedding 64x16: S = 1024; each block (chunk 64): S = 2176; head: S = 32. Per element at
// rest: main 4 + Adam 8 + main_grad 4 = 16 bytes, sharded by 2; plus 16 bytes of norm state.
TEST_CASE("the resting-memory formula matches a hand count for ZeRO-1 on dp 2", "[properties]") {
  properties::TrainingCase c;
  c.config.model = {64, 16, 4, 8, true, 1234};
  c.config.strategy = core::Strategy::optim;
  c.config.precision.exact = true;
  c.config.precision.param = core::DType::f32;
  c.dp = 2;
  const int64_t expected = 16 + (1024 + 4 * 2176 + 32) * 16 / 2;
  REQUIRE(properties::resting_bytes(c, 0).bytes == expected);
  REQUIRE(properties::resting_bytes(c, 1).bytes == expected);
  c.config.precision.param = core::DType::bf16;  // a bf16 model-weight shard joins: +2 bytes per element
  REQUIRE(properties::resting_bytes(c, 0).bytes == 16 + (1024 + 4 * 2176 + 32) * 18 / 2);
}

// A deliberately broken property ("no world has 4 or more ranks") must fail, shrink every
// choice to its simplest value that still fails, and save a scenario that loads with the
// same case; `shardcheck run` of it finds nothing (the configuration is sound), which the
// result says. Would fail if shrinking or saving broke, or the file lost a field.
TEST_CASE("a broken property shrinks to a minimal case and saves a loadable scenario", "[properties]") {
  properties::Property p;
  p.name = "broken_small_worlds";
  p.why = "deliberately false, for this test";
  p.check_training = [](const properties::TrainingCase& c) {
    return c.world_size() >= 4
               ? properties::Verdict::fail("world of " + std::to_string(c.world_size()) + " ranks")
               : properties::Verdict::pass();
  };
  properties::SuiteOptions o = options(100, "broken");
  o.shrink_budget = 1000;  // checks of this property cost nothing: shrink all the way
  const PropertyResult r = properties::check_property(p, o);
  REQUIRE(r.status == PropertyResult::Status::failed);
  REQUIRE(r.shrinks > 0);
  REQUIRE(r.message == "world of 4 ranks");
  REQUIRE(r.file.size() > 0);
  auto s = run::load_scenario(r.file);
  REQUIRE(s.ok());
  const core::TrainingScenario& t = s->training()->scenario;
  REQUIRE(t.mesh->world_size() == 4);
  REQUIRE(t.config.steps == 2);
  REQUIRE(t.config.model.vocab == 2);
  REQUIRE(t.config.model.hidden == 1);
  REQUIRE(t.config.model.seq == 1);
  REQUIRE(t.config.micro_batch_size == 1);
  REQUIRE(t.schedule.seed == 1);
  REQUIRE(t.schedule.runs == 1);
  REQUIRE_THAT(r.note, Catch::Contains("visible to the property only"));
  // The suite has no property of that name, so a replay has to be told which one to run.
  REQUIRE_THAT(properties::replay_scenario(r.file, "").error, Catch::Contains("name the training property"));
}

// A catalog bug found by a property becomes a scenario that `shardcheck run` fails (expect:
// clean, found numerics_divergence) and that `props --replay` fails again. Would fail if the
// YAML did not reproduce the run the property judged.
TEST_CASE("a catalog bug shrinks to a scenario that fails when run", "[properties]") {
  properties::SuiteOptions o = options(30, "stale");
  o.mutation = core::Mutation::stale_model_weight_after_step;
  const PropertyResult r = properties::check_property(*properties::find_property("matches_reference"), o);
  REQUIRE(r.status == PropertyResult::Status::failed);
  REQUIRE_THAT(r.message, Catch::Contains("the reference has"));
  auto s = run::load_scenario(r.file);
  REQUIRE(s.ok());
  REQUIRE(s->training()->scenario.config.mutations.has(core::Mutation::stale_model_weight_after_step));
  const run::ScenarioOutcome out = run::run_scenario(*s, {});
  REQUIRE(out.explored.error.empty());
  REQUIRE_FALSE(out.judged.met);
  REQUIRE(out.judged.found == std::vector<core::FindingKind>{core::FindingKind::numerics_divergence});
  const auto replayed = properties::replay_scenario(r.file, "");
  REQUIRE(replayed.property == "matches_reference");
  REQUIRE(replayed.verdict.kind == properties::Verdict::Kind::fail);
  REQUIRE(replayed.verdict.message == r.message);
}

// A saved training scenario is the run the property judged: loading the YAML and running it as
// `shardcheck run` does gives the same trace digest and findings as the property's own run
// (here an interleaved ZeRO-1 pipeline under PCT with the reuse race switched on). Would
// fail if the file dropped or reordered anything the schedule depends on.
TEST_CASE("a saved training scenario replays the run the property judged", "[properties]") {
  properties::TrainingCase c;
  c.config.model = {2, 1, 4, 1, true, 77};
  c.config.strategy = core::Strategy::optim;
  c.config.precision.exact = true;
  c.config.precision.param = core::DType::f32;
  c.config.microbatches = 4;
  c.config.steps = 2;
  c.config.optimizer.lr = 1e-2;
  c.config.data_seed = 11;
  c.config.mutations.add(core::Mutation::main_grad_alloc_default_stream);
  c.pp = c.vpp = 2;
  c.policy = sim::Policy::pct;
  c.schedule_seed = 9;
  const properties::TrainingOutcome ours = properties::run_training_case(c);
  REQUIRE(ours.error.empty());
  const std::string file = out_dir("replay") + ".yaml";
  REQUIRE(core::write_file_atomic(file,
                                  properties::training_scenario_yaml(c, "replay", "a test", "{findings: []}"))
              .ok());
  auto s = run::load_scenario(file);
  REQUIRE(s.ok());
  const run::ScenarioOutcome theirs = run::run_scenario(*s, {});
  REQUIRE(theirs.explored.digests == std::vector<uint64_t>{ours.trace_digest});
  REQUIRE(theirs.explored.findings.size() == ours.findings.size());
  for (size_t i = 0; i < ours.findings.size(); ++i)
    REQUIRE(theirs.explored.findings[i].key == ours.findings[i].key);
  REQUIRE_FALSE(ours.findings.empty());  // the race is there to be reproduced
}

// Generation depends on the seed alone: the same seed draws the same cases, another seed
// others. Would fail if anything (clock, random_device, RC_PARAMS) leaked into generation.
TEST_CASE("the same seed generates the same cases", "[properties]") {
  auto draw = [](uint64_t seed) {
    std::vector<std::string> seen;
    properties::Property p;
    p.name = "record";
    p.check_training = [&seen](const properties::TrainingCase& c) {
      seen.push_back(properties::describe(c));
      return properties::Verdict::pass();
    };
    properties::SuiteOptions o = options(40, "record");
    o.seed = seed;
    REQUIRE(properties::check_property(p, o).status == PropertyResult::Status::passed);
    return seen;
  };
  const auto a = draw(5);
  REQUIRE(a.size() == 40);
  REQUIRE(a == draw(5));
  REQUIRE(a != draw(6));
}

// Runs of up to 100 cases (this file's, and `props` by default) stay in the small space;
// longer runs (CI's) grow past it: larger TinyLM models, more microbatches, dp up to 16 and
// longer shape lists, each still a valid case. Would fail if the growth leaked into bounded
// runs (slowing `make test`) or never happened.
TEST_CASE("long runs grow past the small space, bounded runs do not", "[properties]") {
  struct Seen {
    int64_t vocab = 0, hidden = 0, seq = 0, layers = 0;
    int microbatches = 0, dp = 0, world = 0;
    size_t tensors = 0;
    int64_t dim0 = 0;
  };
  auto draw = [](int cases) {
    Seen seen;
    properties::Property t;
    t.name = "record_training";
    t.check_training = [&seen](const properties::TrainingCase& c) {
      const core::ModelConfig& m = c.config.model;
      seen.vocab = std::max(seen.vocab, m.vocab);
      seen.hidden = std::max(seen.hidden, m.hidden);
      seen.seq = std::max(seen.seq, m.seq);
      seen.layers = std::max(seen.layers, m.layers);
      seen.microbatches = std::max(seen.microbatches, c.config.microbatches);
      seen.dp = std::max(seen.dp, c.dp_total());
      seen.world = std::max(seen.world, c.world_size());
      // Still a case the suite can run: layers cover the stages, vpp needs whole rounds.
      REQUIRE(m.layers >= c.pp * c.vpp);
      if (c.vpp > 1) REQUIRE(c.config.microbatches % c.pp == 0);
      REQUIRE(core::training_limits_exceeded(c.config, *c.mesh(), true).ok());
      return properties::Verdict::pass();
    };
    properties::Property l;
    l.name = "record_layout";
    l.check_layout = [&seen](const properties::LayoutCase& c) {
      seen.tensors = std::max(seen.tensors, c.shapes.size());
      for (const auto& s : c.shapes) seen.dim0 = std::max(seen.dim0, s[0]);
      REQUIRE(c.ranks % c.outer == 0);
      return properties::Verdict::pass();
    };
    properties::SuiteOptions o = options(cases, "grow");
    REQUIRE(properties::check_property(t, o).status == PropertyResult::Status::passed);
    REQUIRE(properties::check_property(l, o).status == PropertyResult::Status::passed);
    return seen;
  };
  const Seen bounded = draw(100);
  CHECK(bounded.vocab <= 64);
  CHECK(bounded.hidden <= 16);
  CHECK(bounded.seq <= 8);
  CHECK(bounded.layers <= 6);
  CHECK(bounded.microbatches <= 4);
  CHECK(bounded.dp <= 8);
  CHECK(bounded.world <= 16);
  CHECK(bounded.tensors <= 8);
  CHECK(bounded.dim0 <= 16);
  const Seen grown = draw(400);
  CHECK(grown.vocab > 64);
  CHECK(grown.hidden > 16);
  CHECK(grown.seq > 8);
  CHECK(grown.layers > 6);
  CHECK(grown.microbatches > 4);
  CHECK(grown.dp > 8);
  CHECK(grown.world > 16);
  CHECK(grown.tensors > 8);
  CHECK(grown.dim0 > 16);
  CHECK(grown.vocab <= 256);
  CHECK(grown.hidden <= 64);
  CHECK(grown.layers <= 8);
  CHECK(grown.dp <= 16);
  CHECK(grown.world <= 32);
}

// A catalog bug is forced only on the cases it can change (core::mutation_unmet_need), so no case
// passes because the bug was never there and every saved case loads. Would fail if the suite
// forced a mutation on every generated case again.
TEST_CASE("a catalog bug is forced only on cases it can change", "[properties][mutations]") {
  for (core::Mutation m :
       {core::Mutation::tied_grad_norm_double_count, core::Mutation::post_step_sync_set_order}) {
    int cases = 0;
    std::vector<std::string> wrong;  // cases the mutation was forced on but cannot change
    properties::Property p;
    p.name = "record";
    p.check_training = [&](const properties::TrainingCase& c) {
      ++cases;
      const bool tied_pipeline = c.pp >= 2 && c.config.model.tied;
      if (!c.config.mutations.has(m) || !core::mutation_unmet_need(m, c.config, *c.mesh()).ok() ||
          (m == core::Mutation::tied_grad_norm_double_count && !tied_pipeline)) {
        wrong.push_back(properties::describe(c));
      }
      return properties::Verdict::pass();
    };
    properties::SuiteOptions o = options(40, "forced");
    o.mutation = m;
    INFO(core::to_string(m));
    REQUIRE(properties::check_property(p, o).status == PropertyResult::Status::passed);
    REQUIRE(cases == 40);
    REQUIRE(wrong.empty());
  }
}

// Each catalog bug, forced on, is caught by the property aimed at it, on a small budget (the
// full score, every property per bug, is `shardcheck props --mutations`). Would fail if a
// generator stopped covering the configuration a bug needs, or a property went blind.
TEST_CASE("every catalog bug is caught by the property aimed at it", "[properties][mutations]") {
  const std::pair<core::Mutation, const char*> aimed[] = {
      {core::Mutation::main_grad_alloc_default_stream, "no_findings"},
      {core::Mutation::post_step_sync_set_order, "collective_fingerprints"},
      {core::Mutation::stale_model_weight_after_step, "resting_memory"},
      {core::Mutation::tied_grad_norm_double_count, "grad_norm"},
      {core::Mutation::pp_embedding_allreduce_raw_shards, "no_findings"},
      {core::Mutation::vpp_separate_contexts, "matches_reference"},
      {core::Mutation::zero1_missing_no_sync, "matches_distopt"},
      {core::Mutation::grad_divisor_on_running_sum, "matches_reference"},
      {core::Mutation::no_initial_broadcast, "no_findings"},
      {core::Mutation::prefetch_missing_wait, "no_findings"},
  };
  for (const auto& [m, name] : aimed) {
    properties::SuiteOptions o = options(60, "mutations");
    o.shrink_budget = 10;
    const properties::MutationResult r = properties::check_mutation(m, o, properties::find_property(name));
    INFO(core::to_string(m) << " with " << name);
    REQUIRE(r.results.size() == 1);
    REQUIRE(r.caught());
    REQUIRE(r.first()->file.size() > 0);
  }
}

// The command line: an unknown property name is bad input (exit 2) and lists the names; a
// passing run prints one line per property and a summary and exits 0; a mutation score short
// of total (one property cannot catch every catalog bug) prints `mutation score: k/9`, exits 1.
TEST_CASE("shardcheck props: options, output and exit codes", "[properties][cli]") {
  const auto bad = testing::run_shardcheck("props --only nope");
  REQUIRE(bad.exit_code == 2);
  REQUIRE_THAT(bad.err, Catch::Contains("--only: nope not in {") && Catch::Contains("layout_partitions") &&
                            Catch::Contains("same_seed_same_trace"));
  const auto ok =
      testing::run_shardcheck("props --only layout_partitions --cases 5 --seed 3 --out " + out_dir("cli"));
  REQUIRE(ok.exit_code == 0);
  REQUIRE_THAT(ok.out, Catch::Contains("layout_partitions") && Catch::Contains("5 cases") &&
                           Catch::Contains("passed") && Catch::Contains("1 property: 1 passed, 0 failed"));
  const auto partial = testing::run_shardcheck("props --mutations --only grad_norm --cases 10 --out " +
                                               out_dir("cli-mutations"));
  REQUIRE(partial.exit_code == 1);
  REQUIRE_THAT(partial.out, Catch::Contains("tied_grad_norm_double_count") &&
                                Catch::Contains("caught by grad_norm") && Catch::Contains("MISSED") &&
                                Catch::Contains("\nmutation score: 1/10\n"));
}

// `props -j N`: the cases are drawn on one thread and only their checks spread over threads,
// so a property passes or fails at the same case, shrinks the same steps to the same case and
// saves the same file for every N. Would fail if a verdict checked ahead were attached to the
// wrong case, or if checking ahead changed the cases RapidCheck draws.
TEST_CASE("a property gives the same result on 1, 2 and 4 threads", "[properties][parallel]") {
  auto fingerprint = [](const PropertyResult& r) {
    return std::string(properties::to_string(r.status)) + " cases " + std::to_string(r.cases) + " shrinks " +
           std::to_string(r.shrinks) + " evaluations " + std::to_string(r.evaluations) + "\n" + r.message +
           "\n" + r.shrunk + "\n" + r.file + "\n" + r.note;
  };
  struct Run {
    const char* property;
    std::optional<core::Mutation> mutation;
  };
  for (const Run& run : {Run{"matches_reference", core::Mutation::grad_divisor_on_running_sum},
                         Run{"no_findings", std::nullopt}, Run{"layout_partitions", std::nullopt}}) {
    std::string want;
    for (int jobs : {1, 2, 4}) {
      properties::SuiteOptions o = options(12, "jobs");
      o.mutation = run.mutation;
      o.jobs = jobs;
      const PropertyResult r = properties::check_property(*properties::find_property(run.property), o);
      INFO(run.property << " on " << jobs << " threads");
      if (jobs == 1) {
        want = fingerprint(r);
        REQUIRE(r.status == (run.mutation ? PropertyResult::Status::failed : PropertyResult::Status::passed));
      }
      REQUIRE(fingerprint(r) == want);
    }
  }
}
