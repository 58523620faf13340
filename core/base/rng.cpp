// xoshiro256** (Blackman and Vigna) seeded through SplitMix64, and its distributions.
#include "core/base/rng.hpp"

#include <cassert>

namespace shardcheck::core {

namespace {
constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) : seed_(seed) {
  uint64_t x = seed;
  for (auto& word : s_) {
    x = mix64(x);
    word = x;
  }
  // xoshiro must not start from the all-zero state; SplitMix64 output makes that
  // astronomically unlikely, but a checker does not rely on "unlikely".
  if ((s_[0] | s_[1] | s_[2] | s_[3]) == 0) s_[0] = 1;
}

Rng Rng::split(uint64_t key) const { return Rng(mix64(seed_ ^ mix64(key + 0x632be59bd9b4e019ULL))); }

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

// Lemire's multiply-shift with rejection: unbiased, and one multiplication in the usual case.
uint64_t Rng::uniform(uint64_t bound) {
  assert(bound > 0);
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

int64_t Rng::uniform_int(int64_t lo, int64_t hi) {
  assert(lo <= hi);
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (span == 0) return static_cast<int64_t>(next());  // the full 64-bit range
  return lo + static_cast<int64_t>(uniform(span));
}

double Rng::uniform_real() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

bool Rng::bernoulli(double p) { return uniform_real() < p; }

double Rng::normal() {
  double sum = 0.0;
  for (int i = 0; i < 12; ++i) sum += uniform_real();
  return sum - 6.0;
}

}  // namespace shardcheck::core
