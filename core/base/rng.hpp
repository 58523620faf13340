// The project's only source of randomness: a seeded xoshiro256** engine with hand-written
// distributions, so the same seed draws the same numbers on every machine and library.
//   Rng root(7);
//   Rng sched = root.split("scheduler").split(rank);   // independent of draws on `root`
//   uint64_t pick = sched.uniform(streams);            // in [0, streams)
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

namespace shardcheck::core {

// SplitMix64 finalizer: a bijective 64-bit mix used to seed and to derive children.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a over bytes; stable across platforms (no std::hash, whose values are unspecified).
constexpr uint64_t fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ULL) {
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

class Rng {
 public:
  explicit Rng(uint64_t seed);

  // A child engine keyed by `key`. It depends only on this engine's seed and the key, not on
  // how many numbers were drawn, so components can be added without shifting other streams.
  Rng split(uint64_t key) const;
  Rng split(std::string_view key) const { return split(fnv1a(key)); }

  uint64_t seed() const { return seed_; }
  uint64_t next();                              // 64 uniform bits
  uint64_t uniform(uint64_t bound);             // uniform in [0, bound); bound > 0
  int64_t uniform_int(int64_t lo, int64_t hi);  // uniform in [lo, hi] inclusive
  double uniform_real();                        // uniform in [0, 1), 53 bits
  bool bernoulli(double p);                     // true with probability p
  // Approximately standard normal: the Irwin-Hall sum of 12 uniforms minus 6. It uses only
  // additions, so it is bit-identical everywhere (no libm), which a Box-Muller is not.
  double normal();

  template <class T>
  void shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(uniform(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  uint64_t seed_;
  uint64_t s_[4];
};

}  // namespace shardcheck::core
