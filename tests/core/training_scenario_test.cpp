// Training scenario loading: the semantics.md examples parses, and bad input is rejected at its
// line and column.
#include <catch2/catch.hpp>

#include "core/scenario/training_scenario.hpp"
#include "core/strategies/mutations.hpp"

using namespace shardcheck::core;

namespace {
const char* kGood = R"(kind: training
name: zero1-interleaved-race
mesh: {pp: 2, dp: 2, vpp: 2}
model: {vocab: 64, hidden: 16, layers: 4, seq: 8, tied_embeddings: true}
data: {source: markov, order: 1, seed: 7}
strategy: optim
precision: {exact: true}
microbatches: 4
micro_batch_size: 2
steps: 3
optimizer: {kind: adam, lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, clip_grad: 1.0}
streams: {unified_comm: false}
allocator: {model: caching, reuse: earliest}
mutations: [main_grad_alloc_default_stream]
schedule: {policy: pct, depth: 3, seed: 1, runs: 20}
reference: single_rank
expect: {findings: [stream_race], allow: [numerics_divergence]}
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

TEST_CASE("the semantics.md training example loads", "[core][scenario]") {
  auto s = parse_training_scenario(kGood, "t.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE(s->mesh->world_size() == 4);
  REQUIRE(s->config.strategy == Strategy::optim);
  REQUIRE(s->config.precision.exact);
  REQUIRE(s->config.precision.param == DType::f32);
  REQUIRE(s->reuse == PoolReuse::earliest);
  REQUIRE(s->config.optimizer.beta2 == 0.95);
  REQUIRE(s->config.mutations.has(Mutation::main_grad_alloc_default_stream));
  REQUIRE(s->schedule.runs == 20);
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
      {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {tp: 4}", "t.yaml:3:7: unknown mesh axis 'tp'"},
      {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {dp: 0}", "t.yaml:3:12: a mesh axis size is 0"},
      {"[main_grad_alloc_default_stream]", "[main_grad_alloc_on_mars]",
       "t.yaml:14:13: unknown mutation 'main_grad_alloc_on_mars'"},
      {"lr: 1.0e-3", "lr: fast", "t.yaml:11:29: lr must be a number, not 'fast'"},
      {"lr: 1.0e-3", "lr: -1", "optimizer.lr must be positive"},
      {"betas: [0.9, 0.95]", "betas: [0.9]", "optimizer.betas has two values"},
      {"{exact: true}", "{exact: true, param: fp8}", "precision.param is fp32 or bf16, not 'fp8'"},
      {"layers: 4", "layers: 0", "model.layers is 0"},
      {"strategy: optim", "strategy: hsdp", "hsdp needs a mesh with dp_outer and dp_inner"},
      {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {pp: 8, dp: 1}",
       "model has 4 layers but the pipeline has 8 virtual stages"},
      {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {pp: 2, dp: 1, vpp: 2}\nmicrobatches_x: 1",
       "unknown key 'microbatches_x'"},
      {"microbatches: 4", "microbatches: 3\nmesh_: 1", "unknown key 'mesh_'"},
      {"steps: 3", "steps: 100000", "steps is 100000; it must be between 1 and 10000"},
      {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {pp: 2}",
       "t.yaml:3:7: optim needs a 'dp' axis in the mesh (dp: 1 for a single data-parallel rank)"},
      {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {}", "t.yaml:3:7: optim needs a 'dp' axis"},
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
  text.replace(text.find("microbatches: 4"), 15, "microbatches: 3");
  REQUIRE_THAT(parse_training_scenario(text, "t.yaml").error().message(), Catch::Contains("multiple of pp"));
  std::string t2 = kGood;
  t2.replace(t2.find("[main_grad_alloc_default_stream]"), 32, "[vpp_separate_contexts]");
  t2.replace(t2.find("mesh: {pp: 2, dp: 2, vpp: 2}"), 28, "mesh: {pp: 2, dp: 2}");
  REQUIRE_THAT(
      parse_training_scenario(t2, "t.yaml").error().message(),
      Catch::Contains("t.yaml:14:13: mutation 'vpp_separate_contexts' needs vpp >= 2 (this file: vpp 1)"));
}

namespace {
// kGood with `edits` applied in order (each: the first occurrence of `from` becomes `to`).
std::string edited(std::initializer_list<std::pair<const char*, const char*>> edits) {
  std::string text = kGood;
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, std::string(from).size(), to);
  }
  return text;
}
}  // namespace

TEST_CASE("the mutation table has one whole row per mutation, in the enum's order", "[core][mutations]") {
  REQUIRE(mutation_table_in_order());
  for (int i = 0; i < kMutations; ++i) {
    const auto m = static_cast<Mutation>(i);
    INFO(to_string(m));
    REQUIRE(parse_mutation(to_string(m)) == m);
    REQUIRE(std::string(mutation_upstream(m)).size() > 0);
    REQUIRE(std::string(mutation_summary(m)).size() > 20);
    const MutationNeeds n = mutation_needs(m);
    REQUIRE(!n.strategies.empty());
    REQUIRE(std::string(n.why).size() > 20);
  }
}

TEST_CASE("every mutation loads where it can change the run", "[core][scenario][mutations]") {
  // ZeRO-1, interleaved over two stages, two dp ranks, a tied embedding, four microbatches:
  // overlapped communication: every catalog bug of the catalog changes this run, so all ten
  // load together.
  auto s = parse_training_scenario(
      edited({{"[main_grad_alloc_default_stream]",
               "[main_grad_alloc_default_stream, post_step_sync_set_order, "
               "stale_model_weight_after_step, tied_grad_norm_double_count, "
               "pp_embedding_allreduce_raw_shards, vpp_separate_contexts, "
               "zero1_missing_no_sync, grad_divisor_on_running_sum, no_initial_broadcast, "
               "prefetch_missing_wait]"},
              {"streams: {unified_comm: false}", "streams: {unified_comm: false, overlap: true}"}}),
      "t.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE(s->config.mutations.list().size() == kMutations);
  // The places that are easy to get wrong: bf16 model weights make stale weights possible on
  // ZeRO-3, and HFSDP gathers (and shards) on dp_outer.
  const std::string accepted[] = {
      edited({{"[main_grad_alloc_default_stream]", "[stale_model_weight_after_step]"},
              {"strategy: optim", "strategy: optim_grads_params"},
              {"{exact: true}", "{exact: true, param: bf16}"}}),
      edited({{"[main_grad_alloc_default_stream]", "[post_step_sync_set_order]"},
              {"strategy: optim", "strategy: hfsdp"},
              {"dp: 2, vpp", "dp_outer: 2, dp_inner: 1, vpp"}}),
      edited({{"[main_grad_alloc_default_stream]", "[pp_embedding_allreduce_raw_shards]"},
              {"strategy: optim", "strategy: hfsdp"},
              {"dp: 2, vpp", "dp_outer: 2, dp_inner: 1, vpp"}}),
      edited({{"[main_grad_alloc_default_stream]", "[main_grad_alloc_default_stream]"},
              {"strategy: optim", "strategy: hfsdp"},
              {"dp: 2, vpp", "dp_outer: 2, dp_inner: 2, vpp"}}),
      edited({{"[main_grad_alloc_default_stream]", "[tied_grad_norm_double_count, no_initial_broadcast]"},
              {"strategy: optim", "strategy: distopt"}}),
  };
  for (const std::string& text : accepted) {
    auto a = parse_training_scenario(text, "t.yaml");
    INFO(text << (a.ok() ? "" : a.error().message()));
    REQUIRE(a.ok());
  }
}

TEST_CASE("a mutation that cannot change the run is refused at its entry, naming what it needs",
          "[core][scenario][mutations]") {
  struct Case {
    std::initializer_list<std::pair<const char*, const char*>> edits;
    const char* says;
  };
  const char* mg = "[main_grad_alloc_default_stream]";
  const Case cases[] = {
      {{{mg, "[post_step_sync_set_order]"},
        {"strategy: optim", "strategy: hsdp"},
        {"dp: 2, vpp", "dp_outer: 2, dp_inner: 2, vpp"}},
       "t.yaml:14:13: mutation 'post_step_sync_set_order' needs strategy optim, optim_grads or hfsdp (this "
       "file: hsdp)"},
      {{{mg, "[post_step_sync_set_order]"}, {"strategy: optim", "strategy: optim_grads_params"}},
       "needs strategy optim, optim_grads or hfsdp (this file: optim_grads_params)"},
      {{{mg, "[post_step_sync_set_order]"}, {"dp: 2, vpp", "dp: 1, vpp"}},
       "t.yaml:14:13: mutation 'post_step_sync_set_order' needs at least 2 ranks on dp, where optim gathers "
       "the main weights "
       "into the model weights (this file: dp 1)"},
      {{{mg, "[post_step_sync_set_order]"},
        {"strategy: optim", "strategy: hfsdp"},
        {"dp: 2, vpp", "dp_outer: 1, dp_inner: 2, vpp"}},
       "needs at least 2 ranks on dp_outer, where hfsdp gathers the main weights into the model weights "
       "(this file: dp_outer 1)"},
      {{{mg, "[main_grad_alloc_default_stream]"}, {"strategy: optim", "strategy: optim_grads_params"}},
       "t.yaml:14:13: mutation 'main_grad_alloc_default_stream' needs strategy optim or hfsdp (this file: "
       "optim_grads_params)"},
      {{{"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {pp: 2, dp: 2}"}},
       "mutation 'main_grad_alloc_default_stream' needs vpp >= 2 (this file: vpp 1)"},
      {{{mg, "[stale_model_weight_after_step]"},
        {"strategy: optim", "strategy: hsdp"},
        {"dp: 2, vpp", "dp_outer: 2, dp_inner: 2, vpp"}},
       "mutation 'stale_model_weight_after_step' needs strategy optim, optim_grads or hfsdp, or bf16 model "
       "weights "
       "(precision.param: bf16) with no_shard, optim_grads_params or hsdp (this file: hsdp with fp32 model "
       "weights)"},
      {{{mg, "[stale_model_weight_after_step]"}, {"strategy: optim", "strategy: distopt"}},
       "(this file: distopt)"},
      {{{mg, "[tied_grad_norm_double_count]"}, {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {dp: 4}"}},
       "mutation 'tied_grad_norm_double_count' needs pp >= 2 (this file: pp 1)"},
      {{{mg, "[tied_grad_norm_double_count]"}, {"tied_embeddings: true", "tied_embeddings: false"}},
       "mutation 'tied_grad_norm_double_count' needs model.tied_embeddings: true (this file: false)"},
      {{{mg, "[pp_embedding_allreduce_raw_shards]"}, {"strategy: optim", "strategy: no_shard"}},
       "needs strategy optim, optim_grads, optim_grads_params, hsdp or hfsdp (this file: no_shard)"},
      {{{mg, "[pp_embedding_allreduce_raw_shards]"},
        {"strategy: optim", "strategy: hsdp"},
        {"dp: 2, vpp", "dp_outer: 2, dp_inner: 1, vpp"}},
       "needs at least 2 ranks on dp_inner, where hsdp shards the main weights (this file: dp_inner 1)"},
      {{{mg, "[vpp_separate_contexts]"}, {"strategy: optim", "strategy: distopt"}},
       "mutation 'vpp_separate_contexts' needs strategy no_shard, optim, optim_grads, optim_grads_params, "
       "hsdp or hfsdp (this file: distopt)"},
      {{{mg, "[zero1_missing_no_sync]"}, {"strategy: optim", "strategy: optim_grads"}},
       "mutation 'zero1_missing_no_sync' needs strategy no_shard, optim, hsdp or hfsdp (this file: "
       "optim_grads)"},
      {{{mg, "[zero1_missing_no_sync]"},
        {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {dp: 2}"},
        {"microbatches: 4", "microbatches: 1"}},
       "mutation 'zero1_missing_no_sync' needs microbatches >= 2 (this file: microbatches 1)"},
      {{{mg, "[prefetch_missing_wait]"}},
       "t.yaml:14:13: mutation 'prefetch_missing_wait' needs streams.overlap: true (this file: false): only "
       "an overlapped run prefetches"},
      {{{mg, "[prefetch_missing_wait]"},
        {"strategy: optim", "strategy: no_shard"},
        {"streams: {unified_comm: false}", "streams: {overlap: true}"}},
       "needs strategy optim, optim_grads, optim_grads_params, hsdp or hfsdp (this file: no_shard)"},
      {{{mg, "[grad_divisor_on_running_sum]"}, {"steps: 3", "steps: 3\ngradient_divisor: 1"}},
       "t.yaml:15:13: mutation 'grad_divisor_on_running_sum' needs a gradient divisor other than 1 (this "
       "file: gradient_divisor 1)"},
      // The entry is named where several are listed, and the reason follows the need.
      {{{mg, "[no_initial_broadcast,\n  tied_grad_norm_double_count]"},
        {"mesh: {pp: 2, dp: 2, vpp: 2}", "mesh: {dp: 4}"}},
       "t.yaml:15:3: mutation 'tied_grad_norm_double_count' needs pp >= 2 (this file: pp 1): only a last "
       "pipeline stage holds"},
  };
  for (const Case& c : cases) {
    auto s = parse_training_scenario(edited(c.edits), "t.yaml");
    REQUIRE_FALSE(s.ok());
    INFO(s.error().message());
    REQUIRE_THAT(s.error().message(), Catch::Contains(c.says));
    REQUIRE_THAT(s.error().message(), Catch::StartsWith("t.yaml:"));
  }
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
       "model: {vocab: 65536, hidden: 4096, layers: 4, seq: 8}", "parameters; the limit is 2^22"},
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
  // About 2.9 million parameters: 8 steps pass the reference's 2^24 parameter-steps.
  text.replace(text.find("model: {vocab: 64, hidden: 16, layers: 4, seq: 8, tied_embeddings: true}"), 72,
               "model: {vocab: 8192, hidden: 256, layers: 1, seq: 8}");
  text.replace(text.find("mesh: {pp: 2, dp: 2, vpp: 2}"), 28, "mesh: {dp: 1}");
  text.replace(text.find("[main_grad_alloc_default_stream]"), 32, "[]");
  text.replace(text.find("steps: 3"), 8, "steps: 8");
  auto s = parse_training_scenario(text, "t.yaml");
  REQUIRE_FALSE(s.ok());
  REQUIRE_THAT(
      s.error().message(),
      Catch::Contains("t.yaml:10:8: the single-rank reference keeps every step's weights and gradients"));
  text.replace(text.find("reference: single_rank"), 22, "reference: none");
  auto none = parse_training_scenario(text, "t.yaml");
  INFO((none.ok() ? "" : none.error().message()));
  REQUIRE(none.ok());
  REQUIRE(training_limits_exceeded(none->config, *none->mesh, false).ok());
  REQUIRE_THAT(training_limits_exceeded(none->config, *none->mesh, true).message(), Catch::Contains("2^24"));
  // The judge keeps every rank's values after every step: on four ranks the same run is past
  // 2^25 parameter-steps times ranks, with or without a reference.
  text.replace(text.find("mesh: {dp: 1}"), 13, "mesh: {dp: 4}");
  auto four = parse_training_scenario(text, "t.yaml");
  REQUIRE_FALSE(four.ok());
  REQUIRE_THAT(
      four.error().message(),
      Catch::Contains("t.yaml:10:8: the training judge keeps what every rank holds after every step") &&
          Catch::Contains("* 8 steps * 4 ranks exceeds the limit of 2^25"));
}

TEST_CASE("exact mode is refused where its grid cannot keep fp32 sums exact", "[core][scenario][limits]") {
  // n = 2 * dp * microbatches contributions per element: the grid needs n^2 <= 2^23, so dp *
  // microbatches at most 1448. 32 * 46 = 1472 is past it; 32 * 44 = 1408 is not.
  std::string past = kGood;
  const std::string mesh = "mesh: {pp: 2, dp: 2, vpp: 2}";
  past.replace(past.find(mesh), mesh.size(), "mesh: {pp: 2, dp: 32, vpp: 2}");
  std::string within = past;
  past.replace(past.find("microbatches: 4"), 15, "microbatches: 46");
  within.replace(within.find("microbatches: 4"), 15, "microbatches: 44");
  auto bad = parse_training_scenario(past, "t.yaml");
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.error().message(),
               Catch::StartsWith("t.yaml:8:15: exact mode keeps sums exact only while data-parallel ranks x "
                                 "microbatches is at most 1448 (this file: 32 x 46 = 1472)"));
  auto good = parse_training_scenario(within, "t.yaml");
  INFO((good.ok() ? "" : good.error().message()));
  REQUIRE(good.ok());
  const std::string exact = "precision: {exact: true}";
  past.replace(past.find(exact), exact.size(), "precision: {param: f32}");
  auto mixed = parse_training_scenario(past, "t.yaml");
  INFO((mixed.ok() ? "" : mixed.error().message()));
  REQUIRE(mixed.ok());  // only exact mode promises bitwise sums
}

TEST_CASE("a training file without expect loads, stating nothing", "[core][scenario]") {
  std::string text = kGood;
  text.erase(text.find("expect:"));
  auto s = parse_training_scenario(text, "t.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE_FALSE(s->expect.given);
  REQUIRE(s->expect.findings.empty());
  REQUIRE(describe(s->expect) == "nothing stated (clean)");
  auto with = parse_training_scenario(kGood, "t.yaml");
  REQUIRE(with->expect.given);
}

TEST_CASE("up to 1024 ranks load, and past 64 the run's length is bounded at the mesh", "[core][scenario]") {
  const std::string wide = R"(kind: training
name: wide
mesh: {dp: 1024}
model: {vocab: 64, hidden: 16, layers: 12, seq: 8, tied_embeddings: true}
strategy: optim_grads_params
precision: {exact: true}
microbatches: 1
micro_batch_size: 1
steps: 1
optimizer: {kind: adam, lr: 1.0e-3}
)";
  REQUIRE(parse_training_scenario(wide, "w.yaml").ok());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = wide;
    text.replace(text.find(from), from.size(), to);
    return parse_training_scenario(text, "w.yaml");
  };
  // 1024 ranks * 17 layers is past 2^14; the same on 64 ranks is not bounded this way.
  auto deep = with("hidden: 16, layers: 12", "hidden: 8, layers: 17");
  REQUIRE_FALSE(deep.ok());
  REQUIRE_THAT(
      deep.error().message(),
      Catch::StartsWith("w.yaml:3:7: past 64 ranks, ranks * layers * microbatches * steps = 1024 * 17 "
                        "* 1 * 1 = 17408 exceeds the limit of 2^14"));
  REQUIRE(with("mesh: {dp: 1024}\nmodel: {vocab: 64, hidden: 16, layers: 12,",
               "mesh: {dp: 64}\nmodel: {vocab: 64, hidden: 8, layers: 17,")
              .ok());
  auto too_many = with("mesh: {dp: 1024}", "mesh: {dp: 1025}");
  REQUIRE_FALSE(too_many.ok());
  REQUIRE_THAT(too_many.error().message(), Catch::StartsWith("w.yaml:3:12: "));
  auto product = with("mesh: {dp: 1024}", "mesh: {dp_outer: 64, dp_inner: 32}");
  REQUIRE_FALSE(product.ok());
  REQUIRE_THAT(product.error().message(), Catch::Contains("training scenarios run at most 1024 ranks"));
}
