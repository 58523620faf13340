// Redistribute: the planner's table (and its refusals), and the executor's results on real
// values across 4 ranks and a 2x2 HSDP mesh. Every element's value is a multiple of its own
// global index + 1 (small nonzero integers, so every average is exact and a test cannot pass
// on zeros), so an element that lands at another position, or on another rank, fails.
#include <catch2/catch.hpp>
#include <cstring>
#include <span>

#include "core/layout/redistribute.hpp"
#include "core/runtime/inorder_runtime.hpp"

using namespace shardcheck::core;

namespace {
const Placement R = Placement::replicate(), F = Placement::flat(), PA = Placement::partial(ReduceOp::avg),
                PS = Placement::partial(ReduceOp::sum);

using Op = RedistributePlan::Op;
Op plan_op(std::vector<Placement> a, std::vector<Placement> b) { return plan_redistribute(a, b).value().op; }
std::string plan_error(std::vector<Placement> a, std::vector<Placement> b) {
  return plan_redistribute(a, b).error().message();
}

std::vector<float> floats(InOrderRuntime& rt, const DBuffer& d) {
  auto& bytes = rt.memory(d.storage);
  std::vector<float> v(d.local_numel());
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// (index + 1) * scale for every element of the rank's local range, whose first element has
// global index `offset`: each element says where it belongs.
std::vector<float> indexed(int64_t offset, int64_t numel, double scale) {
  std::vector<float> v(numel);
  for (int64_t i = 0; i < numel; ++i) v[i] = static_cast<float>((offset + i + 1) * scale);
  return v;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

// Built outside the coroutine: GCC 12 rejects a braced temporary holding a string literal
// inside a co_await expression ("array used as initializer").
RedistributeOptions options(StreamId s, const char* tag, bool in_place = false) {
  return RedistributeOptions{s, tag, in_place};
}

BufferMesh buffer_mesh(Runtime& rt, std::shared_ptr<const Mesh> mesh, std::vector<int> axes) {
  BufferMesh m{mesh, axes, {}, rt.rank()};
  for (int a : axes) {
    auto members = mesh->group(rt.rank(), a);
    m.groups.push_back(rt.group(mesh->name(a), members));
  }
  return m;
}
}  // namespace

TEST_CASE("the planner follows the semantics.md table", "[core][redistribute]") {
  REQUIRE(plan_op({F}, {R}) == Op::all_gather);
  REQUIRE(plan_op({PA}, {R}) == Op::all_reduce);
  REQUIRE(plan_op({PS}, {F}) == Op::reduce_scatter);
  REQUIRE(plan_op({R}, {F}) == Op::local_slice);
  REQUIRE(plan_op({R}, {PA}) == Op::relabel);
  auto p = plan_redistribute(std::vector{PA, F}, std::vector{R, F}).value();
  REQUIRE(p.axis == 0);
  REQUIRE(p.reduce == ReduceOp::avg);
  REQUIRE(plan_op({R, F}, {R, R}) == Op::all_gather);
  REQUIRE_FALSE(plan_redistribute(std::vector{F, F}, std::vector{F, R}).ok());  // Flat, Replicate is invalid
}

TEST_CASE("unsupported transitions say why", "[core][redistribute]") {
  REQUIRE_THAT(plan_error({F}, {PA}), Catch::Contains("Flat shard holds no full-size contribution"));
  REQUIRE_THAT(plan_error({R}, {PS}), Catch::Contains("multiplied by the axis size"));
  REQUIRE_THAT(plan_error({PS}, {PA}), Catch::Contains("reduce first"));
  REQUIRE_THAT(plan_error({PA, PA}, {R, R}), Catch::Contains("one axis per call"));
  REQUIRE_THAT(plan_error({F}, {F}), Catch::Contains("nothing to redistribute"));
  REQUIRE_THAT(plan_error({F}, {R, R}), Catch::Contains("different axis counts"));
  REQUIRE_THAT(plan_error({F, R}, {F, F}), Catch::Contains("suffix"));
}

TEST_CASE("Partial(avg) -> Flat -> Replicate -> Flat across 4 ranks", "[core][redistribute]") {
  auto mesh = std::make_shared<const Mesh>(Mesh::data_parallel(4));
  auto layout = std::make_shared<const GlobalLayout>(GlobalLayout::create({{5, 4}, {2, 6}, {3}}, 4).value());
  const int64_t size = layout->size(), shard = size / 4;
  InOrderWorld world(4);
  std::vector<DBuffer> flat(4), full(4), again(4);
  world.run([&](Runtime& rt) -> Task<> {
    const int r = rt.rank();
    StreamId s = rt.stream("compute");
    DBuffer partial{buffer_mesh(rt, mesh, {0}), {PA}, layout, DType::f32, -1, s};
    partial.storage = co_await rt.alloc(partial.local_bytes(), s, "partial");
    // Rank r contributes 4*(r+1)*(i+1) at element i: the average is 10*(i+1).
    const std::vector<float> contribution = indexed(0, size, 4.0 * (r + 1));
    co_await rt.upload(partial.local_ref(), s, bytes_of(contribution));
    // Placements built outside co_await expressions: GCC 12 cannot put an initializer_list's
    // backing array into a coroutine frame.
    const Placements flat_p{F}, rep_p{R};
    flat[r] = co_await redistribute(rt, partial, flat_p, options(s, "rs"));
    full[r] = co_await redistribute(rt, flat[r], rep_p, options(s, "ag"));
    again[r] = co_await redistribute(rt, full[r], flat_p, options(s, "slice"));
  });
  REQUIRE(size == 48);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    REQUIRE(flat[r].local() == LocalRange{r * shard, shard});
    REQUIRE(floats(world.rank(r), flat[r]) == indexed(r * shard, shard, 10.0));
    REQUIRE(floats(world.rank(r), full[r]) == indexed(0, size, 10.0));
    REQUIRE(again[r].local() == LocalRange{r * shard, shard});
    REQUIRE(floats(world.rank(r), again[r]) == indexed(r * shard, shard, 10.0));
  }
}

TEST_CASE("HSDP Partial(avg),Flat -> Replicate,Flat reduces across dp_outer only", "[core][redistribute]") {
  auto mesh = std::make_shared<const Mesh>(Mesh::create({{"dp_outer", 2}, {"dp_inner", 2}}).value());
  auto layout = std::make_shared<const GlobalLayout>(GlobalLayout::create({{8, 3}}, 4).value());
  InOrderWorld world(4);
  std::vector<DBuffer> out(4);
  world.run([&](Runtime& rt) -> Task<> {
    const int r = rt.rank();
    StreamId s = rt.stream("compute");
    DBuffer g{buffer_mesh(rt, mesh, {0, 1}), {PA, F}, layout, DType::f32, -1, s};
    g.storage = co_await rt.alloc(g.local_bytes(), s, "g");
    // Rank r holds the dp_inner piece g.local() and contributes 2*(r+1)*(i+1) at element i.
    const std::vector<float> contribution = indexed(g.local().offset, g.local_numel(), 2.0 * (r + 1));
    co_await rt.upload(g.local_ref(), s, bytes_of(contribution));
    const Placements to{R, F};
    out[r] = co_await redistribute(rt, g, to, options(s, "hsdp", true));
    REQUIRE(out[r].storage == g.storage);  // in place
  });
  // dp_inner splits 24 elements in two pieces of 12; dp_outer groups are {0, 2} (piece 0) and
  // {1, 3} (piece 1): averages (2+6)/2 * (i+1) = 4*(i+1) and (4+8)/2 * (i+1) = 6*(i+1).
  REQUIRE(out[0].local() == LocalRange{0, 12});
  REQUIRE(out[1].local() == LocalRange{12, 12});
  REQUIRE(floats(world.rank(0), out[0]) == indexed(0, 12, 4.0));
  REQUIRE(floats(world.rank(2), out[2]) == indexed(0, 12, 4.0));
  REQUIRE(floats(world.rank(1), out[1]) == indexed(12, 12, 6.0));
  REQUIRE(floats(world.rank(3), out[3]) == indexed(12, 12, 6.0));
}
