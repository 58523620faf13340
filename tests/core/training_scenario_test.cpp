// Training scenario loading: the DESIGN example parses, and bad input is rejected at its
// line and column.
#include <catch2/catch.hpp>

#include "core/scenario/training_scenario.hpp"

using namespace shardcheck::core;

namespace {
const char* kGood = R"(kind: training
name: zero1-first-step-race
mesh: {dp: 4}
model: {vocab: 64, hidden: 16, layers: 4, seq: 8, tied_embeddings: true}
data: {source: markov, order: 1, seed: 7}
strategy: optim
precision: {param: bf16, main: fp32, grad: fp32}
microbatches: 4
micro_batch_size: 2
steps: 3
optimizer: {kind: adam, lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, clip_grad: 1.0}
streams: {unified_comm: false}
mutations: [main_grad_alloc_default_stream]
schedule: {policy: pct, depth: 3, seed: 1, runs: 200}
reference: single_rank
expect: {findings: [stream_race]}
)";

std::string error_of(const std::string& from, const std::string& to) {
  std::string text = kGood;
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  auto s = parse_training_scenario(text, "t.yaml");
  REQUIRE_FALSE(s.ok());
  return s.error().message();
}
}  // namespace

TEST_CASE("the DESIGN training example loads", "[core][scenario]") {
  auto s = parse_training_scenario(kGood, "t.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE(s->mesh->world_size() == 4);
  REQUIRE(s->config.strategy == Strategy::optim);
  REQUIRE(s->config.precision.param == DType::bf16);
  REQUIRE(s->config.optimizer.beta2 == 0.95);
  REQUIRE(s->config.mutations.has(Mutation::main_grad_alloc_default_stream));
  REQUIRE(s->schedule.runs == 200);
  REQUIRE(s->config.divisor() == 4);
}

TEST_CASE("bad training scenarios are rejected at their line and column", "[core][scenario]") {
  struct Case {
    const char* from;
    const char* to;
    const char* says;
  };
  const Case cases[] = {
      {"strategy: optim", "strategy: zero4", "t.yaml:6:11: unknown strategy 'zero4'"},
      {"mesh: {dp: 4}", "mesh: {tp: 4}", "t.yaml:3:7: unknown mesh axis 'tp'"},
      {"mesh: {dp: 4}", "mesh: {dp: 0}", "t.yaml:3:12: a mesh axis size is 0"},
      {"[main_grad_alloc_default_stream]", "[main_grad_alloc_on_mars]",
       "t.yaml:13:13: unknown mutation 'main_grad_alloc_on_mars'"},
      {"lr: 1.0e-3", "lr: fast", "t.yaml:11:29: lr must be a number, not 'fast'"},
      {"lr: 1.0e-3", "lr: -1", "optimizer.lr must be positive"},
      {"betas: [0.9, 0.95]", "betas: [0.9]", "optimizer.betas has two values"},
      {"param: bf16", "param: fp8", "precision.param is fp32 or bf16, not 'fp8'"},
      {"layers: 4", "layers: 0", "model.layers is 0"},
      {"strategy: optim", "strategy: hsdp", "hsdp needs a mesh with dp_outer and dp_inner"},
      {"mesh: {dp: 4}", "mesh: {pp: 8, dp: 1}", "model has 4 layers but the pipeline has 8 virtual stages"},
      {"mesh: {dp: 4}", "mesh: {pp: 2, dp: 1, vpp: 2}\nmicrobatches_x: 1", "unknown key 'microbatches_x'"},
      {"microbatches: 4", "microbatches: 3\nmesh_: 1", "unknown key 'mesh_'"},
      {"steps: 3", "steps: 100000", "steps is 100000; it must be between 1 and 10000"},
      {"mesh: {dp: 4}", "mesh: {pp: 2}",
       "t.yaml:3:7: optim needs a 'dp' axis in the mesh (dp: 1 for a single data-parallel rank)"},
      {"mesh: {dp: 4}", "mesh: {}", "t.yaml:3:7: optim needs a 'dp' axis"},
      {"kind: training", "kind: trace", "expected 'kind: training'"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.from, c.to);
    INFO(c.to << "\n  -> " << e);
    REQUIRE_THAT(e, Catch::Contains(c.says));
    REQUIRE_THAT(e, Catch::StartsWith("t.yaml:"));
  }
}

TEST_CASE("interleaving and the vpp mutation check the pipeline shape", "[core][scenario]") {
  std::string text = kGood;
  text.replace(text.find("mesh: {dp: 4}"), 13, "mesh: {pp: 2, dp: 2, vpp: 2}");
  text.replace(text.find("microbatches: 4"), 15, "microbatches: 3");
  REQUIRE_THAT(parse_training_scenario(text, "t.yaml").error().message(), Catch::Contains("multiple of pp"));
  std::string t2 = kGood;
  t2.replace(t2.find("[main_grad_alloc_default_stream]"), 32, "[vpp_separate_contexts]");
  REQUIRE_THAT(parse_training_scenario(t2, "t.yaml").error().message(),
               Catch::Contains("needs a mesh with vpp >= 2"));
}

TEST_CASE("training scenarios past a memory limit are rejected with the limit named",
          "[core][scenario][limits]") {
  struct Case {
    const char* from;
    const char* to;
    const char* says;
  };
  const Case cases[] = {
      {"model: {vocab: 64, hidden: 16, layers: 4, seq: 8, tied_embeddings: true}",
       "model: {vocab: 65536, hidden: 4096, layers: 4, seq: 8}", "parameters; the limit is 2^27"},
      {"model: {vocab: 64, hidden: 16, layers: 4, seq: 8, tied_embeddings: true}",
       "model: {vocab: 65536, hidden: 16, layers: 4, seq: 4096}",
       "t.yaml:4:8: one microbatch keeps seq * micro_batch_size * (2 * vocab + 12 * hidden * layers) = 8192 "
       "* 131840"},
      {"steps: 3", "steps: 10\ngradient_divisor: inf",
       "t.yaml:11:19: gradient_divisor must be a finite number, not 'inf'"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.from, c.to);
    INFO(c.to << "\n  -> " << e);
    REQUIRE_THAT(e, Catch::Contains(c.says));
  }
}

TEST_CASE("the reference's history bounds parameters times steps, unless there is no reference",
          "[core][scenario][limits]") {
  std::string text = kGood;
  text.replace(text.find("model: {vocab: 64, hidden: 16, layers: 4, seq: 8, tied_embeddings: true}"), 72,
               "model: {vocab: 65536, hidden: 1024, layers: 1, seq: 8}");
  text.replace(text.find("steps: 3"), 8, "steps: 5");
  auto s = parse_training_scenario(text, "t.yaml");
  REQUIRE_FALSE(s.ok());
  REQUIRE_THAT(
      s.error().message(),
      Catch::Contains("t.yaml:10:8: the single-rank reference keeps every step's weights and gradients"));
  text.replace(text.find("reference: single_rank"), 22, "reference: none");
  auto none = parse_training_scenario(text, "t.yaml");
  INFO((none.ok() ? "" : none.error().message()));
  REQUIRE(none.ok());
  REQUIRE(training_limits_exceeded(none->config, *none->mesh, false).empty());
  REQUIRE_THAT(training_limits_exceeded(none->config, *none->mesh, true), Catch::Contains("2^28"));
}
