// Redistribute: the planner's table (and its refusals), and the executor's results on real
// values across 4 ranks and a 2x2 HSDP mesh. Inputs are small nonzero integers, so every
// average is exact and a test cannot pass on zeros.
#include <catch2/catch.hpp>
#include <cstring>

#include "core/runtime/inorder_runtime.hpp"
#include "core/layout/redistribute.hpp"

using namespace shardcheck::core;

namespace {
const Placement R = Placement::replicate(), F = Placement::flat(),
                PA = Placement::partial(ReduceOp::avg), PS = Placement::partial(ReduceOp::sum);

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

TEST_CASE("the planner follows the DESIGN table", "[core][redistribute]") {
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
  InOrderWorld world(4);
  std::vector<DBuffer> flat(4), full(4), again(4);
  world.run([&](Runtime& rt) -> Task<> {
    const int r = rt.rank();
    StreamId s = rt.stream("compute");
    DBuffer partial{buffer_mesh(rt, mesh, {0}), {PA}, layout, DType::f32, -1, s};
    partial.storage = co_await rt.alloc(partial.local_bytes(), s, "partial");
    // Rank r contributes 4*(r+1) everywhere: the average is 10 on every element.
    co_await rt.launch(kernels::fill(s, partial.local_ref(), 4.0 * (r + 1)));
    // Placements built outside co_await expressions: GCC 12 cannot put an initializer_list's
    // backing array into a coroutine frame.
    const Placements flat_p{F}, rep_p{R};
    flat[r] = co_await redistribute(rt, partial, flat_p, options(s, "rs"));
    full[r] = co_await redistribute(rt, flat[r], rep_p, options(s, "ag"));
    again[r] = co_await redistribute(rt, full[r], flat_p, options(s, "slice"));
  });
  for (int r = 0; r < 4; ++r) {
    REQUIRE(flat[r].local() == LocalRange{r * layout->size() / 4, layout->size() / 4});
    REQUIRE(floats(world.rank(r), flat[r]) == std::vector<float>(layout->size() / 4, 10.0f));
    REQUIRE(floats(world.rank(r), full[r]) == std::vector<float>(layout->size(), 10.0f));
    REQUIRE(floats(world.rank(r), again[r]) == floats(world.rank(r), flat[r]));
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
    co_await rt.launch(kernels::fill(s, g.local_ref(), 2.0 * (r + 1)));
    const Placements to{R, F};
    out[r] = co_await redistribute(rt, g, to, options(s, "hsdp", true));
    REQUIRE(out[r].storage == g.storage);  // in place
  });
  // dp_outer groups are {0, 2} and {1, 3}: averages (2+6)/2 = 4 and (4+8)/2 = 6.
  REQUIRE(floats(world.rank(0), out[0]) == std::vector<float>(12, 4.0f));
  REQUIRE(floats(world.rank(2), out[2]) == std::vector<float>(12, 4.0f));
  REQUIRE(floats(world.rank(1), out[1]) == std::vector<float>(12, 6.0f));
  REQUIRE(out[1].local() == LocalRange{12, 12});
}
