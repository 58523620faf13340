// Markov source: random sparse transitions, stationary distribution by power iteration,
// entropy rate H = -sum_i pi_i sum_j P_ij log P_ij.
#include "core/model/markov.hpp"

#include <algorithm>
#include <cmath>

#include "core/base/rng.hpp"

namespace shardcheck::core {

MarkovSource::MarkovSource(int64_t vocab, uint64_t seed) : seed_(seed) {
  Rng rng = Rng(seed).split("markov-transitions");
  next_.resize(vocab);
  const int b = static_cast<int>(std::min<int64_t>(kBranching, vocab));
  for (int64_t a = 0; a < vocab; ++a) {
    double total = 0;
    for (int i = 0; i < b; ++i) {
      const int32_t to = static_cast<int32_t>(rng.uniform(static_cast<uint64_t>(vocab)));
      const double w = 0.2 + rng.uniform_real();
      next_[a].push_back({to, w});
      total += w;
    }
    for (auto& [to, p] : next_[a]) p /= total;
  }
  // Power iteration from uniform; 2000 rounds of a sparse chain converge far past double
  // precision for the chains drawn here, and it is deterministic either way.
  pi_.assign(vocab, 1.0 / static_cast<double>(vocab));
  std::vector<double> nxt(vocab);
  // A round that changes no bit has reached the fixed point: every later round would repeat
  // it, so stopping there gives exactly the 2000-round result.
  for (int round = 0; round < 2000; ++round) {
    std::fill(nxt.begin(), nxt.end(), 0.0);
    for (int64_t a = 0; a < vocab; ++a) {
      for (const auto& [to, p] : next_[a]) nxt[to] += pi_[a] * p;
    }
    const bool fixed = nxt == pi_;
    pi_.swap(nxt);
    if (fixed) break;
  }
  for (int64_t a = 0; a < vocab; ++a) {
    if (pi_[a] > 0) start_.push_back({static_cast<int32_t>(a), pi_[a]});
    // Repeated successors merge into one probability for the entropy, summed in successor
    // order (the few successors, sorted, rather than a scan of the whole vocabulary).
    std::vector<std::pair<int32_t, double>> merged;
    for (const auto& succ : next_[a]) {
      auto it =
          std::find_if(merged.begin(), merged.end(), [&](const auto& m) { return m.first == succ.first; });
      if (it == merged.end()) {
        merged.push_back({succ.first, 0.0 + succ.second});
      } else {
        it->second += succ.second;
      }
    }
    std::sort(merged.begin(), merged.end());
    double h = 0;
    for (const auto& [to, p] : merged) {
      if (p > 0) h -= p * std::log(p);
    }
    entropy_rate_ += pi_[a] * h;
  }
}

double MarkovSource::probability(int64_t a, int64_t b) const {
  double p = 0;
  for (const auto& [to, q] : next_[a]) p += to == b ? q : 0.0;
  return p;
}

int64_t MarkovSource::draw(uint64_t bits, const std::vector<std::pair<int32_t, double>>& dist) const {
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
  double acc = 0;
  for (const auto& [tok, p] : dist) {
    acc += p;
    if (u < acc) return tok;
  }
  return dist.back().first;
}

Batch MarkovSource::batch(int step, int dp_rank, int microbatch, int sequences, int64_t seq) const {
  Rng rng = Rng(seed_)
                .split("markov-data")
                .split(static_cast<uint64_t>(step))
                .split(static_cast<uint64_t>(dp_rank))
                .split(static_cast<uint64_t>(microbatch));
  Batch b;
  for (int s = 0; s < sequences; ++s) {
    int64_t tok = draw(rng.next(), start_);
    for (int64_t t = 0; t < seq; ++t) {
      const int64_t nxt = draw(rng.next(), next_[tok]);
      b.inputs.push_back(static_cast<int32_t>(tok));
      b.targets.push_back(static_cast<int32_t>(nxt));
      tok = nxt;
    }
  }
  return b;
}

}  // namespace shardcheck::core
