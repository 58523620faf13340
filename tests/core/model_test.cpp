// TinyLM's description, the data source, exact mode's grid and DistOpt's buffer layout.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>

#include "core/base/rng.hpp"
#include "core/model/markov.hpp"
#include "core/model/model.hpp"
#include "core/scenario/training_scenario.hpp"
#include "core/strategies/distopt_engine.hpp"
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
  REQUIRE_THAT(ModelLayout::create({64, 16, 2, 8, true, 1}, 2, 2).error().message(),
               Catch::Contains("at least one layer"));
}

TEST_CASE("initial values are deterministic and differ across parameters", "[core][model]") {
  auto m = ModelLayout::create({64, 16, 2, 8, true, 7}, 1, 1).value();
  // A value depends on init_seed and the parameter's name alone: N(0, 0.02^2) draws from
  // Rng(init_seed).split(name), computed here on their own. Would fail if the values came
  // from anything else (the layout, the call order, a shared stream of draws).
  REQUIRE(m.logical_name(0) == "embedding.weight");
  Rng draws = Rng(7).split("embedding.weight");
  std::vector<float> expected(64 * 16);
  for (float& x : expected) x = static_cast<float>(0.02 * draws.normal());
  REQUIRE(m.initial_value(0) == expected);
  // A pipelined layout of the same model (its own cache, units on two stages) initializes
  // every logical parameter identically, so the reference and the stages start equal.
  auto piped = ModelLayout::create({64, 16, 2, 8, true, 7}, 2, 1).value();
  REQUIRE(piped.num_logical() == m.num_logical());
  for (int l = 0; l < m.num_logical(); ++l) {
    REQUIRE(piped.logical_name(l) == m.logical_name(l));
    REQUIRE(piped.initial_value(l) == m.initial_value(l));
  }
  REQUIRE(m.initial_value(0) != m.initial_value(0, 8));
  REQUIRE(m.initial_value(0) != m.initial_value(m.num_logical() - 1));  // differ across parameters
  const auto ln = m.initial_value(1);                                   // layers.0.ln1.weight
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
    for (size_t i = 0; i < b.inputs.size(); ++i, ++n)
      nll -= std::log(src.probability(b.inputs[i], b.targets[i]));
  }
  REQUIRE(nll / n == Approx(src.entropy_rate()).epsilon(0.03));
  REQUIRE(src.entropy_rate() > 0.5);
  // Batches are a function of (seed, step, rank, microbatch) alone: a source built afresh,
  // which has drawn nothing, gives the batch `src` gives after the 200 above. Each target is
  // the next input of its sequence and a transition the chain can take.
  const Batch b = src.batch(3, 1, 2, 2, 8);
  const Batch fresh = MarkovSource(32, 11).batch(3, 1, 2, 2, 8);
  REQUIRE(b.inputs.size() == 16);
  REQUIRE(fresh.inputs == b.inputs);
  REQUIRE(fresh.targets == b.targets);
  for (size_t i = 0; i < b.inputs.size(); ++i) {
    REQUIRE(src.probability(b.inputs[i], b.targets[i]) > 0);
    if (i % 8 != 7) REQUIRE(b.targets[i] == b.inputs[i + 1]);
  }
  REQUIRE(src.batch(3, 0, 2, 2, 8).inputs != b.inputs);
  REQUIRE(MarkovSource(32, 12).batch(3, 1, 2, 2, 8).inputs != b.inputs);
}

namespace {

// The longest sum exact mode forms: all n = 2 * dp * mb contributions of one gradient element
// (dp ranks, mb microbatches, twice for a tied parameter) in one fp32 accumulator, each
// `steps` grid steps of q, except the last, one step fewer, so that the total is an odd
// number of steps (an odd multiple has no low zero bits to absorb a rounding). Every partial
// sum and the final division by dp * mb are compared with exact values (doubles: every value
// here is an integer below 2^53 times a power of two). Same-sign contributions make the
// partial sums climb to the largest magnitude any reduction order can reach.
bool worst_sum_exact_in_fp32(const ExactGrid& g, int dp, int mb, double steps) {
  const int n = 2 * dp * mb;
  float acc = 0;
  double exact = 0;
  for (int i = 0; i < n; ++i) {
    const double c = (i == n - 1 ? steps - 1 : steps) * g.q;
    if (static_cast<double>(static_cast<float>(c)) != c) return false;
    acc += static_cast<float>(c);
    exact += c;
    if (static_cast<double>(acc) != exact) return false;
  }
  return static_cast<double>(acc / static_cast<float>(dp * mb)) == exact / (dp * mb);
}

// The largest magnitude of that sum in units of 2^-k: n contributions of `limit` steps of
// q = dp * mb * 2^-k. fp32 holds every integer up to 2^24 exactly.
double worst_units(const ExactGrid& g, int dp, int mb) { return 2.0 * dp * mb * g.limit * dp * mb; }

}  // namespace

// Exact mode's promise (docs/semantics.md §3): every sum and every division by dp or the microbatch
// count is exact in fp32, every norm exact in fp64. Over a sweep of dp, microbatches and model
// sizes up to 2^27 parameters (past TrainingLimits' 2^22), the worst-case sum is exact at the grid's limit,
// and still at 4 x limit, where it reaches up to 2^24 units: exact_grid's rule n^2 * limit <=
// 2^23 keeps the worst sum, n^2 * limit / 2 units, in (2^21, 2^22], two doublings under fp32's
// 2^24. Would fail if the grid grew past fp32's range or the q * limit clamp moved. The sweep
// keeps dp * mb <= 1448, where that rule still allows a limit of 1 or more: past it exact_grid
// floors the limit at 1, and where dp * mb has a large odd factor (dp 63, mb 255) the worst
// case passes 2^24 units.
TEST_CASE("the exact grid keeps every sum exact in fp32 and every norm exact in fp64", "[core][exact]") {
  const int64_t tinylm = ModelLayout::create({64, 16, 4, 8, true, 1}, 1, 1).value().num_logical_elements();
  REQUIRE(tinylm == 9696);  // 64*16 + 4 * (16+16 + 16*64+64 + 64*16+16) + 16+16
  for (int64_t elements : {int64_t{200}, tinylm, int64_t{200000}, TrainingLimits::kMaxParameters}) {
    for (int dp : {1, 2, 3, 4, 5, 7, 8, 16, 63, 64}) {
      for (int mb : {1, 2, 3, 4, 5, 8, 16, 21}) {
        const ExactGrid g = exact_grid(dp, mb, elements);
        INFO("dp " << dp << ", microbatches " << mb << ", " << elements << " elements: k " << g.k
                   << ", limit " << g.limit);
        const double n = 2.0 * dp * mb;
        REQUIRE(g.q == dp * mb * std::ldexp(1.0, -g.k));
        REQUIRE(g.limit >= 1);
        REQUIRE(worst_sum_exact_in_fp32(g, dp, mb, g.limit));
        REQUIRE(worst_sum_exact_in_fp32(g, dp, mb, 4 * g.limit));
        REQUIRE(4 * worst_units(g, dp, mb) <= std::ldexp(1.0, 24));
        // fp64 norms: the elements' averaged gradients, each at most n * limit units, squared.
        REQUIRE(elements * std::pow(n * g.limit, 2) <= std::ldexp(1.0, 52));
        // The limit is the largest power of two both rules allow: doubling it breaks one.
        const bool fp32_full = 2 * worst_units(g, dp, mb) > std::ldexp(1.0, 22);
        const bool fp64_full = elements * std::pow(n * 2 * g.limit, 2) > std::ldexp(1.0, 52);
        REQUIRE((fp32_full || fp64_full));
        // Contributions clamp near 1/16: the finest q with q * limit >= 1/16.
        REQUIRE(g.q * g.limit >= 0.0625);
        REQUIRE(g.q * g.limit < 0.125);
      }
    }
  }
}

// At the fp32 bound, by hand. Where dp * mb is odd, q has no binary factor to spare, so the
// worst sum is exact up to 2^24 units and no further: at 4 x limit it stays exact, at 8 x limit
// it is not. The last cases are the largest model (2^27 parameters) where the fp32 rule, not
// the fp64 one, still sets the limit. Would fail if exact_grid chose another limit, or if the
// exactness check could not see a sum past 2^24 units.
TEST_CASE("the exact grid at the fp32 bound: exact at 2^24 units, not one doubling past", "[core][exact]") {
  struct Case {
    int dp, mb;
    int64_t elements;
    double limit;  // worked by hand below
  };
  const Case cases[] = {
      // n = 2: fp32 2^23 / 4 = 2^21; fp64 2^26 / (2 * sqrt 200) = 2.37e6 > 2^21.
      // worst 2 * 2^21 * 1 = 2^22 units; x4 = 2^24.
      {1, 1, 200, std::ldexp(1.0, 21)},
      // n = 30: fp32 2^23 / 900 = 9320.7 -> 2^13; fp64 2^26 / (30 * sqrt 9696) = 22718 > 2^13.
      // worst 30 * 8192 * 15 = 3686400; x4 = 14745600 <= 2^24 = 16777216; x8 past it.
      {3, 5, 9696, 8192},
      // n = 2646: fp32 2^23 / 2646^2 = 1.198 -> 1; fp64 2^26 / (2646 * 2^13.5) = 2.19 > 1.
      // worst 2646 * 1 * 1323 = 3500658; x4 = 14002632 <= 2^24; x8 = 28005264 past it.
      {63, 21, TrainingLimits::kMaxParameters, 1},
  };
  for (const Case& c : cases) {
    const ExactGrid g = exact_grid(c.dp, c.mb, c.elements);
    INFO("dp " << c.dp << ", microbatches " << c.mb << ", " << c.elements << " elements");
    REQUIRE(g.limit == c.limit);
    REQUIRE(4 * worst_units(g, c.dp, c.mb) > std::ldexp(1.0, 23));  // within a doubling of 2^24
    REQUIRE(4 * worst_units(g, c.dp, c.mb) <= std::ldexp(1.0, 24));
    REQUIRE(worst_sum_exact_in_fp32(g, c.dp, c.mb, g.limit));
    REQUIRE(worst_sum_exact_in_fp32(g, c.dp, c.mb, 4 * g.limit));
    REQUIRE_FALSE(worst_sum_exact_in_fp32(g, c.dp, c.mb, 8 * g.limit));
  }
  // dp 64 x mb 16 at 2^27 parameters: n = 2048, fp32 2^23 / 2^22 = 2, fp64 2^26 / (2048 *
  // 2^13.5) = 2.83: limit 2, worst 2048 * 2 * 1024 = 2^22 units. q is a power of two there,
  // so sums keep their low bits free and even 8 x limit stays exact.
  const ExactGrid big = exact_grid(64, 16, TrainingLimits::kMaxParameters);
  REQUIRE(big.limit == 2);
  REQUIRE(worst_units(big, 64, 16) == std::ldexp(1.0, 22));
  REQUIRE(worst_sum_exact_in_fp32(big, 64, 16, 4 * big.limit));
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
  const ParamKey ps[] = {{0, DType::bf16, true},
                         {1, DType::f32, true},
                         {2, DType::bf16, false},
                         {3, DType::bf16, true},
                         {0, DType::bf16, true} /* tied: same id */,
                         {4, DType::f32, true}};
  REQUIRE(partition_parameters(ps) == std::vector<std::vector<int>>{{0, 3}, {1, 4}, {2}});
  REQUIRE(partition_parameters(std::span<const ParamKey>{}).empty());
}
