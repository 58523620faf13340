// The data: token sequences from a seeded first-order Markov source whose entropy rate is
// known, so the loss a perfect model can reach is known. Every (step, data-parallel rank,
// microbatch) draws its own sequences from the seed alone, so the reference and every
// strategy see exactly the same tokens.
//   MarkovSource src(64, /*seed*/ 7);
//   Batch b = src.batch(step, dp_rank, microbatch, /*sequences*/ 2, /*seq*/ 8);
//   src.entropy_rate()   // nats per token: the achievable loss
#pragma once

#include <cstdint>
#include <vector>

namespace shardcheck::core {

struct Batch {
  std::vector<int32_t> inputs;   // sequences x seq
  std::vector<int32_t> targets;  // the next token of each input
};

class MarkovSource {
 public:
  static constexpr int kBranching = 4;  // successors per token

  MarkovSource(int64_t vocab, uint64_t seed);

  Batch batch(int step, int dp_rank, int microbatch, int sequences, int64_t seq) const;
  double entropy_rate() const { return entropy_rate_; }
  const std::vector<double>& stationary() const { return pi_; }
  // Transition probability from token a to token b.
  double probability(int64_t a, int64_t b) const;

 private:
  int64_t draw(uint64_t random_bits, const std::vector<std::pair<int32_t, double>>& dist) const;

  uint64_t seed_;
  std::vector<std::vector<std::pair<int32_t, double>>> next_;  // per token: (successor, p)
  std::vector<std::pair<int32_t, double>> start_;              // the stationary distribution
  std::vector<double> pi_;
  double entropy_rate_ = 0;
};

}  // namespace shardcheck::core
