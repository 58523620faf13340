// The simulated world through the Runtime interface: determinism of schedules, real values
// (and their corruption by a race when freed memory is poisoned), definedness propagation,
// stream-ordered reuse, and internal errors surfacing instead of hanging.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <variant>

#include "reports/chrome_trace.hpp"
#include "sim/explore.hpp"
#include "sim/world.hpp"

using namespace shardcheck;
using core::BufferId;
using core::Runtime;
using core::Task;
using core::TensorRef;

namespace {

float first_float(std::span<const std::byte> bytes) {
  float v;
  std::memcpy(&v, bytes.data(), 4);
  return v;
}

// The upstream race with real values: grad = 1 everywhere, reduce-scattered (avg) into shard;
// grad is freed at host time and its block refilled with 7 by the next compute allocation.
Task<> reuse_program(Runtime& rt, std::vector<BufferId>* shard_out) {
  const core::StreamId compute = rt.stream("compute"), rs = rt.stream("rs");
  const int members[] = {0, 1};
  const core::GroupId dp = rt.group("dp", members);
  const BufferId grad = co_await rt.alloc(4096, compute, "grad");
  co_await rt.launch(core::kernels::fill(compute, TensorRef::f32(grad, 0, 1024), 1.0, "backward"));
  co_await rt.wait_stream(rs, compute);
  const BufferId shard = co_await rt.alloc(2048, rs, "shard");
  (*shard_out)[rt.rank()] = shard;
  co_await rt.collective({core::CollectiveKind::reduce_scatter, dp, rs, TensorRef::f32(grad, 0, 1024),
                          TensorRef::f32(shard, 0, 512), core::ReduceOp::avg, 0, "grad"});
  co_await rt.free(grad);
  const BufferId act = co_await rt.alloc(4096, compute, "act");
  co_await rt.launch(core::kernels::fill(compute, TensorRef::f32(act, 0, 1024), 7.0, "next_forward"));
}

}  // namespace

TEST_CASE("same seed gives the same trace, different seeds different schedules", "[sim][determinism]") {
  std::vector<BufferId> shards(2);
  sim::Program p = [&](Runtime& rt) { return reuse_program(rt, &shards); };
  std::set<uint64_t> digests;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    sim::Options o;
    o.ranks = 2;
    o.policy = sim::Policy::random;
    o.seed = seed;
    const uint64_t a = sim::World(o).run(p).trace_digest;
    const uint64_t b = sim::World(o).run(p).trace_digest;
    REQUIRE(a == b);
    digests.insert(a);
  }
  REQUIRE(digests.size() >= 4);
  // in_order ignores the seed: as if every launch blocked, there is one schedule.
  std::set<uint64_t> in_order;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    sim::Options o;
    o.ranks = 2;
    o.policy = sim::Policy::in_order;
    o.seed = seed;
    in_order.insert(sim::World(o).run(p).trace_digest);
  }
  REQUIRE(in_order.size() == 1);
}

TEST_CASE("the race is found in every schedule and corrupts values in some", "[sim][values]") {
  std::vector<BufferId> shards(2);
  sim::Program p = [&](Runtime& rt) { return reuse_program(rt, &shards); };
  int corrupted = 0, clean_values = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    sim::Options o;
    o.ranks = 2;
    o.seed = seed;
    o.reuse = core::PoolReuse::earliest;  // poison freed memory, hand out the freed block first
    sim::World w(o);
    const sim::RunResult r = w.run(p);
    REQUIRE(r.completed);
    REQUIRE(r.findings.size() == 1);
    REQUIRE(r.findings[0].kind == core::FindingKind::stream_race);
    const float v = first_float(w.read(0, shards[0]));
    if (v == 1.0f) {
      ++clean_values;
    } else {
      // Poisoned (NaN), or averaged with the next allocation's 7s on one or both ranks.
      REQUIRE((std::isnan(v) || v == 4.0f || v == 7.0f));
      ++corrupted;
    }
  }
  REQUIRE(corrupted > 0);
  REQUIRE(clean_values > 0);
}

TEST_CASE("undefined bytes propagate through collectives and copies to the consumer", "[sim][uninit]") {
  for (bool write_first : {false, true}) {
    sim::Options o;
    o.ranks = 2;
    sim::World w(o);
    auto r = w.run([&](Runtime& rt) -> Task<> {
      const core::StreamId s = rt.stream("compute");
      const int members[] = {0, 1};
      const core::GroupId g = rt.group("dp", members);
      const BufferId x = co_await rt.alloc(64, s, "x");
      const BufferId full = co_await rt.alloc(128, s, "full");
      const BufferId copy = co_await rt.alloc(128, s, "copy");
      // Only half of x is written on rank 1 when write_first is false.
      const int64_t written = write_first ? 16 : (rt.rank() == 1 ? 8 : 16);
      co_await rt.launch(core::kernels::fill(s, TensorRef::f32(x, 0, written), 2.0));
      co_await rt.collective({core::CollectiveKind::all_gather, g, s, TensorRef::f32(x, 0, 16),
                              TensorRef::f32(full, 0, 32), core::ReduceOp::sum, 0, "x"});
      co_await rt.launch(core::kernels::copy(s, TensorRef::f32(full, 0, 32), TensorRef::f32(copy, 0, 32)));
      co_await rt.launch(core::kernels::opaque("consume", s, {TensorRef::f32(copy, 0, 32)}, {}));
    });
    REQUIRE(r.completed);
    if (write_first) {
      REQUIRE(r.findings.empty());
    } else {
      REQUIRE(r.findings.size() == 1);
      REQUIRE(r.findings[0].kind == core::FindingKind::uninitialized_read);
      // Named by where the bytes were never written (rank 1's x) and what first carried them.
      REQUIRE_THAT(
          r.findings[0].summary,
          Catch::Contains("kernel 'consume' reads 32 bytes of 'copy' (first at byte 96) computed from "
                          "never-written bytes of 'x', first read by all_gather 'x'"));
    }
  }
}

TEST_CASE("stream-ordered: same-stream reuse is immediate and safe, other streams need ordering",
          "[sim][allocator]") {
  sim::Options o;
  o.allocator = core::Allocator::stream_ordered;
  sim::World w(o);
  std::vector<BufferId> ids;
  auto r = w.run([&](Runtime& rt) -> Task<> {
    const core::StreamId a = rt.stream("a"), b = rt.stream("b");
    const BufferId x = co_await rt.alloc(1024, a, "x");
    co_await rt.launch(core::kernels::fill(a, TensorRef::f32(x, 0, 256), 1.0));
    co_await rt.free(x);
    const BufferId y = co_await rt.alloc(1024, b, "y");  // other stream, free not ordered: new block
    const BufferId z = co_await rt.alloc(1024, a, "z");  // same stream: x's block, in stream order
    ids = {x, y, z};
    co_await rt.launch(core::kernels::fill(a, TensorRef::f32(z, 0, 256), 3.0));
    co_await rt.launch(core::kernels::fill(b, TensorRef::f32(y, 0, 256), 2.0));
  });
  REQUIRE(r.completed);
  REQUIRE(r.findings.empty());
  REQUIRE(w.lifetimes()[2].addr == w.lifetimes()[0].addr);
  REQUIRE(w.lifetimes()[1].addr != w.lifetimes()[0].addr);
}

TEST_CASE("a host program that throws ends the run with an error, not a hang", "[sim][errors]") {
  sim::Options o;
  o.ranks = 2;
  sim::World w(o);
  auto r = w.run([&](Runtime& rt) -> Task<> {
    const core::StreamId s = rt.stream("compute");
    const BufferId x = co_await rt.alloc(64, s, "x");
    co_await rt.free(x);
    if (rt.rank() == 1) co_await rt.free(x);  // double free: a host bug
  });
  REQUIRE_FALSE(r.completed);
  REQUIRE_THAT(r.error, Catch::Contains("rank 1"));
  REQUIRE_THAT(r.error, Catch::Contains("after it was freed"));
}

TEST_CASE("download returns device values to the host after the stream's work", "[sim][values]") {
  sim::Options o;
  o.policy = sim::Policy::pct;
  sim::World w(o);
  float got = 0;
  auto r = w.run([&](Runtime& rt) -> Task<> {
    const core::StreamId s = rt.stream("compute"), side = rt.stream("side");
    const BufferId x = co_await rt.alloc(16, side, "x");
    co_await rt.launch(core::kernels::fill(side, TensorRef::f32(x, 0, 4), 5.0));
    co_await rt.launch(core::kernels::scale(side, TensorRef::f32(x, 0, 4), TensorRef::f32(x, 0, 4), 3.0));
    co_await rt.wait_stream(s, side);
    std::vector<std::byte> out(4);
    co_await rt.download(TensorRef::f32(x, 0, 1), s, out);
    std::memcpy(&got, out.data(), 4);
  });
  REQUIRE(r.completed);
  REQUIRE(r.findings.empty());
  REQUIRE(got == 15.0f);
}

TEST_CASE("a replay's Chrome trace has ranks, streams, slices and the race's flow arrow", "[sim][trace]") {
  std::vector<BufferId> shards(2);
  sim::Options o;
  o.ranks = 2;
  sim::Replay rep = sim::replay([&](Runtime& rt) { return reuse_program(rt, &shards); }, o);
  REQUIRE(rep.result.findings.size() == 1);
  int host = 0, streams = 0;
  for (const auto& t : rep.log.threads) (t.tid == 0 ? host : streams)++;
  REQUIRE(host == 2);
  REQUIRE(streams == 4);
  REQUIRE(rep.log.slices.size() > 20);
  // The arrow, as written into the trace file: a flow start ("ph": "s") on the first access's
  // slice and a flow end ("f", bound to the enclosing slice) on the second's, with one id.
  // Would fail if the writer dropped the arrow, pointed it at another slice or thread, or gave
  // its ends different ids.
  const auto* race = std::get_if<core::RaceDetail>(&rep.result.findings[0].detail);
  REQUIRE(race != nullptr);
  const auto json = nlohmann::json::parse(reports::chrome_trace(rep.log, rep.result.findings));
  auto tid_of = [&](int rank, const std::string& stream) {
    for (const auto& t : rep.log.threads) {
      if (t.rank == rank && t.name == stream) return t.tid;
    }
    FAIL("no thread for stream " << stream << " of rank " << rank);
    return -1;
  };
  // The slice an access ran as: its operation id, at its scheduler step, on its thread.
  auto slice_at = [&](const core::AccessSite& a) {
    int found = 0;
    for (const auto& e : json["traceEvents"]) {
      found += e["ph"] == "X" && e["pid"] == a.rank && e["tid"] == tid_of(a.rank, a.stream) &&
               e["ts"] == a.step && e["args"]["op"] == a.op_id;
    }
    return found;
  };
  std::vector<nlohmann::json> starts, ends;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] == "s") starts.push_back(e);
    if (e["ph"] == "f") ends.push_back(e);
  }
  REQUIRE(starts.size() == 1);
  REQUIRE(ends.size() == 1);
  const nlohmann::json &s = starts[0], &f = ends[0];
  REQUIRE(s["id"] == f["id"]);
  REQUIRE(s["pid"] == race->first.rank);
  REQUIRE(s["tid"] == tid_of(race->first.rank, race->first.stream));
  REQUIRE(s["ts"] == race->first.step);
  REQUIRE(f["pid"] == race->second.rank);
  REQUIRE(f["tid"] == tid_of(race->second.rank, race->second.stream));
  REQUIRE(f["ts"] == race->second.step);
  REQUIRE(f["bp"] == "e");
  // Both ends sit on the slices of the two accesses: the reduce-scatter on 'rs' reading
  // 'grad', then the next forward on 'compute' writing its block.
  REQUIRE(race->first.stream == "rs");
  REQUIRE(race->second.stream == "compute");
  REQUIRE(race->first.step < race->second.step);
  REQUIRE(slice_at(race->first) == 1);
  REQUIRE(slice_at(race->second) == 1);
}
