// Settings of one simulated run: how many ranks, which schedule policy and seed, which
// allocator model, and the bounds that keep a run finite.
//   sim::Options o;  o.ranks = 2;  o.policy = Policy::pct;  o.seed = 7;
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/runtime/allocator.hpp"

namespace shardcheck::sim {

// in_order: as if every launch blocked (one kernel in flight per rank, oldest first);
// collectives and p2p calls return at enqueue, as NCCL's do.
// random: a seeded uniform choice among runnable hosts and stream heads at every step.
// pct: probabilistic concurrency testing: random priorities with depth-1 change points.
// delay_comm: communication streams run only when nothing else can.
enum class Policy : uint8_t { in_order, random, pct, delay_comm };
std::string_view to_string(Policy p);
std::optional<Policy> parse_policy(std::string_view s);

struct Options {
  static constexpr int kMaxRanks = 1024;
  static constexpr int kMaxStreamsPerRank = 64;

  int ranks = 1;
  Policy policy = Policy::random;
  uint64_t seed = 1;
  int pct_depth = 3;
  int64_t pct_steps_hint = 0;  // expected steps of a run, for PCT change points (0: a guess)
  core::Allocator allocator = core::Allocator::caching;      // core/runtime/allocator.hpp
  core::PoolReuse reuse = core::PoolReuse::best_fit;         // earliest also poisons freed memory with NaN
  core::PoolGeometry geometry = core::PoolGeometry::simple;  // torch: PyTorch's segments (captures)
  bool detectors = true;                        // race, uninitialized and collective-order detectors
  bool record_trace = false;                    // keep every event for a Chrome trace
  int64_t max_steps = 200'000'000;              // a bound on the scheduler loop
  int64_t max_device_bytes = int64_t{4} << 30;  // simulated memory across all ranks
  // false: a shadow-only run. No host byte stands behind simulated device memory, and kernels,
  // collectives, transfers and poisoning move no data; scheduling, the shadow state and every
  // detector work as before (races, reuse, definedness and collective order need no values).
  // Captured programs (gigabytes of tensors per rank) run this way; World::read is unavailable.
  bool values = true;
  // Polled between runs and every few thousand steps of one: once it reads true, the run
  // stops early (RunResult::cancelled) and exploration ends. A signal handler sets it, so
  // this is an atomic and never anything a handler could not touch.
  const std::atomic<bool>* cancel = nullptr;
  // Checks, at every step, that the runnable set the scheduler keeps step by step equals a
  // full scan of the world (and each collective's arrival count a visit of its members); an
  // InternalError when not. Slow (the scan it avoids): for tests.
  bool verify_scheduler = false;
};

}  // namespace shardcheck::sim
