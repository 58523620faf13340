// The in-order runtime that core's tests run on: immediate execution, collectives with
// rendezvous, p2p pairing, and a hang reported instead of looping forever.
#include <catch2/catch.hpp>
#include <cstring>

#include "core/runtime/inorder_runtime.hpp"

using namespace shardcheck::core;

namespace {
std::vector<float> floats(InOrderRuntime& rt, BufferId b) {
  auto& bytes = rt.memory(b);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}
}  // namespace

TEST_CASE("all_reduce(avg) and all_gather across three ranks", "[core][runtime]") {
  InOrderWorld world(3);
  std::vector<BufferId> in(3), out(3);
  world.run([&](Runtime& rt) -> Task<> {
    const int r = rt.rank();
    const int members[] = {0, 1, 2};
    GroupId g = rt.group("dp", members);
    StreamId s = rt.stream("compute");
    in[r] = co_await rt.alloc(8, s, "in");
    out[r] = co_await rt.alloc(24, s, "out");
    co_await rt.launch(kernels::fill(s, TensorRef::f32(in[r], 0, 2), 3.0 * (r + 1)));
    co_await rt.collective({CollectiveKind::all_reduce, g, s, TensorRef::f32(in[r], 0, 2),
                            TensorRef::f32(in[r], 0, 2), ReduceOp::avg, 0, "avg"});
    co_await rt.collective({CollectiveKind::all_gather, g, s, TensorRef::f32(in[r], 0, 2),
                            TensorRef::f32(out[r], 0, 6), ReduceOp::sum, 0, "gather"});
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(floats(world.rank(r), in[r]) == std::vector<float>{6, 6});  // (3+6+9)/3
    REQUIRE(floats(world.rank(r), out[r]) == std::vector<float>{6, 6, 6, 6, 6, 6});
  }
}

TEST_CASE("send meets recv and an unmatched recv is reported as a hang", "[core][runtime]") {
  InOrderWorld world(2);
  BufferId b0 = -1, b1 = -1;
  world.run([&](Runtime& rt) -> Task<> {
    StreamId s = rt.stream("compute");
    BufferId b = co_await rt.alloc(4, s, "x");
    if (rt.rank() == 0) {
      b0 = b;
      co_await rt.launch(kernels::fill(s, TensorRef::f32(b, 0, 1), 42.0));
      co_await rt.send({1, s, TensorRef::f32(b, 0, 1), "x", ""});
    } else {
      b1 = b;
      co_await rt.recv({0, s, TensorRef::f32(b, 0, 1), "x", ""});
    }
  });
  REQUIRE(floats(world.rank(1), b1) == std::vector<float>{42});
  REQUIRE(b0 >= 0);

  InOrderWorld stuck(2);
  REQUIRE_THROWS_AS(stuck.run([&](Runtime& rt) -> Task<> {
    StreamId s = rt.stream("compute");
    BufferId b = co_await rt.alloc(4, s, "x");
    co_await rt.recv({1 - rt.rank(), s, TensorRef::f32(b, 0, 1), "x", ""});
  }),
                    InternalError);
}

TEST_CASE("freed buffers are gone and fresh memory reads as NaN", "[core][runtime]") {
  InOrderWorld world(1);
  world.run([&](Runtime& rt) -> Task<> {
    StreamId s = rt.stream("compute");
    BufferId b = co_await rt.alloc(4, s, "x");
    std::vector<std::byte> out(4);
    co_await rt.download(TensorRef::f32(b, 0, 1), s, out);
    float v;
    std::memcpy(&v, out.data(), 4);
    REQUIRE(std::isnan(v));
    co_await rt.free(b);
  });
  REQUIRE_FALSE(world.rank(0).live(0));
}
