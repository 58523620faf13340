// TinyLM's description, the data source, exact mode's grid and DistOpt's buffer layout.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>

#include "core/strategies/distopt_engine.hpp"
#include "core/model/markov.hpp"
#include "core/model/model.hpp"
#include "core/strategies/param_groups.hpp"
#include "core/strategies/training_config.hpp"

using namespace shardcheck::core;

TEST_CASE("TinyLM units: embedding, one per block, head, on contiguous virtual stages", "[core][model]") {
  ModelConfig c{64, 16, 8, 8, true, 1};
  auto m = ModelLayout::create(c, 2, 2).value();
  REQUIRE(m.units().size() == 10);
  REQUIRE(m.units()[0].kind == Unit::Kind::embedding);
  REQUIRE(m.units()[9].kind == Unit::Kind::head);
  int last_v = 0;
  for (int l = 0; l < 8; ++l) {
    const int v = m.units()[1 + l].vstage;
    REQUIRE(v >= last_v);
    last_v = v;
  }
  REQUIRE(m.units_of(0).front() == 0);
  REQUIRE(m.units_of(3).back() == 9);
  REQUIRE(m.stage_rank(3) == 1);
  REQUIRE(m.stage_chunk(3) == 1);
  // The last stage holds a shared copy of the embedding, with the embedding's logical id.
  const ParamSpec& out = m.params()[m.units()[9].params.back()];
  REQUIRE(out.shared);
  REQUIRE(out.logical == 0);
  REQUIRE(m.num_logical() == 1 + 8 * 6 + 2);
}

TEST_CASE("without a pipeline the tied output is the embedding itself", "[core][model]") {
  auto m = ModelLayout::create({64, 16, 2, 8, true, 1}, 1, 1).value();
  for (const auto& p : m.params()) REQUIRE_FALSE(p.shared);
  auto untied = ModelLayout::create({64, 16, 2, 8, false, 1}, 1, 1).value();
  REQUIRE(untied.num_logical() == m.num_logical() + 1);
  REQUIRE_THAT(ModelLayout::create({64, 16, 2, 8, true, 1}, 2, 2).error().message(), Catch::Contains("at least one layer"));
}

TEST_CASE("initial values are deterministic and differ across parameters", "[core][model]") {
  auto m = ModelLayout::create({64, 16, 2, 8, true, 7}, 1, 1).value();
  REQUIRE(m.initial_value(0) == m.initial_value(0));
  REQUIRE(m.initial_value(0) != m.initial_value(0, 8));
  const auto ln = m.initial_value(1);  // layers.0.ln1.weight
  REQUIRE(ln == std::vector<float>(16, 1.0f));
  double sq = 0;
  for (float v : m.initial_value(0)) sq += v * v;
  REQUIRE(std::sqrt(sq / (64 * 16)) == Approx(0.02).epsilon(0.1));
}

TEST_CASE("the Markov source's entropy rate matches its empirical cross-entropy", "[core][data]") {
  MarkovSource src(32, 11);
  double pi_sum = 0;
  for (double p : src.stationary()) pi_sum += p;
  REQUIRE(pi_sum == Approx(1.0));
  // The average -log P(next | current) over a long sample estimates the entropy rate.
  double nll = 0;
  int64_t n = 0;
  for (int step = 0; step < 200; ++step) {
    const Batch b = src.batch(step, 0, 0, 4, 64);
    for (size_t i = 0; i < b.inputs.size(); ++i, ++n) nll -= std::log(src.probability(b.inputs[i], b.targets[i]));
  }
  REQUIRE(nll / n == Approx(src.entropy_rate()).epsilon(0.03));
  REQUIRE(src.entropy_rate() > 0.5);
  // Batches are a function of (step, rank, microbatch) alone.
  REQUIRE(src.batch(3, 1, 2, 2, 8).inputs == src.batch(3, 1, 2, 2, 8).inputs);
  REQUIRE(src.batch(3, 1, 2, 2, 8).inputs != src.batch(3, 0, 2, 2, 8).inputs);
}

TEST_CASE("the exact grid keeps every sum exact for the model size", "[core][exact]") {
  for (int dp : {1, 2, 3, 4, 5, 8}) {
    for (int mb : {1, 3, 4}) {
      const ExactGrid g = exact_grid(dp, mb, 200000);
      const double n = 2.0 * dp * mb;
      REQUIRE(g.q == dp * mb * std::ldexp(1.0, -g.k));
      // A contribution is at most limit * dp * mb units of 2^-k; n of them summed must stay
      // an integer below 2^24 units for fp32 to hold it exactly.
      REQUIRE(n * g.limit * dp * mb < std::ldexp(1.0, 24));
      REQUIRE(200000 * std::pow(n * g.limit, 2) < std::ldexp(1.0, 53));  // fp64 norms
      // Contributions clamp near 1/16: the finest q with q * limit >= 1/16.
      REQUIRE(g.q * g.limit >= 0.0625);
      REQUIRE(g.q * g.limit < 0.125);
    }
  }
}

TEST_CASE("DistOpt layout: reverse order, 64-aligned, padded buckets, embedding alone", "[core][distopt]") {
  auto m = ModelLayout::create({64, 16, 2, 8, true, 1}, 2, 1).value();
  std::vector<int> stage0;
  for (size_t u = 0; u < m.units().size(); ++u) {
    if (m.stage_rank(m.units()[u].vstage) == 0) stage0.push_back(static_cast<int>(u));
  }
  const DistOptLayout l = DistOptLayout::create(m, stage0, 3);
  REQUIRE(l.buckets.size() == 2);
  const int64_t pad = std::lcm<int64_t>(3, 128);
  for (const auto& b : l.buckets) {
    REQUIRE(b.size % pad == 0);
    REQUIRE(b.offset % pad == 0);
  }
  // The embedding (registered first) comes last, alone in its own bucket.
  REQUIRE(l.buckets.back().params == std::vector<int>{0});
  int64_t prev = -1;
  for (int p : l.buckets.front().params) {
    REQUIRE(l.offset[p] % 64 == 0);
    REQUIRE(l.offset[p] > prev);
    prev = l.offset[p];
  }
  REQUIRE(l.buckets.front().params.front() > l.buckets.front().params.back());  // reversed
}

TEST_CASE("parameters partition by dtype and requires_grad, tied entries once", "[core][groups]") {
  const ParamKey ps[] = {{0, DType::bf16, true}, {1, DType::f32, true}, {2, DType::bf16, false},
                         {3, DType::bf16, true}, {0, DType::bf16, true} /* tied: same id */, {4, DType::f32, true}};
  REQUIRE(partition_parameters(ps) == std::vector<std::vector<int>>{{0, 3}, {1, 4}, {2}});
  REQUIRE(partition_parameters(std::span<const ParamKey>{}).empty());
}
