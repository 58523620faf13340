// Pipeline schedules: every (chunk, microbatch) runs forward once and backward once, backward
// after forward, 1F1B keeps at most pp - rank microbatches in flight, and the transfers two
// neighbouring ranks issue pair up in the same order (or the rendezvous would deadlock).
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "core/train/pipeline.hpp"

using namespace shardcheck::core;
using K = PipelineAction::Kind;

namespace {
// The activations a rank sends forward to the next virtual stage, in issue order, and the
// ones the receiving rank expects, for every pair of neighbouring virtual stages.
std::vector<std::pair<int, int>> sends(int pp, int vpp, int rank, int mb, int to_rank) {
  std::vector<std::pair<int, int>> out;
  for (const auto& a : pipeline_schedule(pp, vpp, rank, mb)) {
    const int v = a.chunk * pp + rank;
    if (a.kind == K::forward && v + 1 < pp * vpp && (v + 1) % pp == to_rank) out.push_back({v, a.microbatch});
  }
  return out;
}
std::vector<std::pair<int, int>> recvs(int pp, int vpp, int rank, int mb, int from_rank) {
  std::vector<std::pair<int, int>> out;
  for (const auto& a : pipeline_schedule(pp, vpp, rank, mb)) {
    const int v = a.chunk * pp + rank;
    if (a.kind == K::forward && v > 0 && (v - 1) % pp == from_rank) out.push_back({v - 1, a.microbatch});
  }
  return out;
}
}  // namespace

TEST_CASE("every chunk and microbatch runs forward then backward exactly once", "[core][pipeline]") {
  for (int pp : {1, 2, 4}) {
    for (int vpp : {1, 2, 3}) {
      if (vpp > 1 && pp == 1) continue;
      for (int mb : {pp, 2 * pp, 4 * pp}) {
        for (int r = 0; r < pp; ++r) {
          std::set<std::pair<int, int>> fwd, bwd;
          for (const auto& a : pipeline_schedule(pp, vpp, r, mb)) {
            const std::pair<int, int> key{a.chunk, a.microbatch};
            if (a.kind == K::forward) {
              REQUIRE(fwd.insert(key).second);
            } else {
              REQUIRE(fwd.count(key));
              REQUIRE(bwd.insert(key).second);
            }
          }
          REQUIRE(static_cast<int>(fwd.size()) == mb * vpp);
          REQUIRE(bwd.size() == fwd.size());
        }
      }
    }
  }
}

TEST_CASE("1F1B warms up with pp - rank - 1 forwards and keeps that many in flight", "[core][pipeline]") {
  REQUIRE(to_string(pipeline_schedule(1, 1, 0, 3)) == "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2");
  REQUIRE(to_string(pipeline_schedule(3, 1, 0, 4)) == "F0.0 F0.1 F0.2 B0.0 F0.3 B0.1 B0.2 B0.3");
  REQUIRE(to_string(pipeline_schedule(3, 1, 2, 4)) == "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3");
}

TEST_CASE("neighbouring ranks issue matching transfers in the same order", "[core][pipeline]") {
  for (int pp : {2, 4}) {
    for (int vpp : {1, 2}) {
      for (int r = 0; r < pp; ++r) {
        const int next = (r + 1) % pp;
        REQUIRE(sends(pp, vpp, r, 2 * pp, next) == recvs(pp, vpp, next, 2 * pp, r));
      }
    }
  }
}

TEST_CASE("interleaving needs microbatches divisible by pp", "[core][pipeline]") {
  REQUIRE_THROWS(pipeline_schedule(2, 2, 0, 3));
  REQUIRE_NOTHROW(pipeline_schedule(2, 1, 0, 3));
}
