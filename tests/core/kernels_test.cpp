// CPU reference kernels: results, dtype conversion, argument checks.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>

#include "core/base/status.hpp"
#include "core/kernels/kernels.hpp"

using namespace shardcheck::core;

namespace {
struct VecMemory : MemoryView {
  std::map<BufferId, std::vector<std::byte>> bufs;
  std::byte* data(const TensorRef& t) override { return bufs.at(t.buffer).data() + t.byte_offset(); }
  void put(BufferId b, const std::vector<float>& v) {
    bufs[b].resize(v.size() * 4);
    std::memcpy(bufs[b].data(), v.data(), v.size() * 4);
  }
  std::vector<float> get(BufferId b) {
    std::vector<float> v(bufs.at(b).size() / 4);
    std::memcpy(v.data(), bufs.at(b).data(), v.size() * 4);
    return v;
  }
};
}  // namespace

TEST_CASE("elementwise kernels compute their results", "[core][kernels]") {
  VecMemory m;
  m.put(0, {1, 2, 3, 4});
  m.put(1, {10, 20, 30, 40});
  m.put(2, {0, 0, 0, 0});
  execute_cpu(kernels::add(0, TensorRef::f32(0, 0, 4), TensorRef::f32(1, 0, 4), TensorRef::f32(2, 0, 4)), m);
  REQUIRE(m.get(2) == std::vector<float>{11, 22, 33, 44});
  execute_cpu(kernels::scale(0, TensorRef::f32(2, 1, 2), TensorRef::f32(2, 1, 2), 0.5), m);
  REQUIRE(m.get(2) == std::vector<float>{11, 11, 16.5f, 44});
  execute_cpu(kernels::divide(0, TensorRef::f32(0, 0, 4), TensorRef::f32(0, 0, 4), 3.0), m);
  REQUIRE(m.get(0)[2] == 1.0f);
  execute_cpu(kernels::fill(0, TensorRef::f32(1, 0, 4), -2.0), m);
  REQUIRE(m.get(1) == std::vector<float>{-2, -2, -2, -2});
}

TEST_CASE("copy casts f32 to bf16 with round-to-nearest-even", "[core][kernels]") {
  VecMemory m;
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  m.put(0, {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -0.0f, NAN});
  m.bufs[1].resize(8);
  execute_cpu(kernels::copy(0, TensorRef::f32(0, 0, 4), TensorRef{1, 0, 4, DType::bf16}), m);
  const std::byte* p = m.bufs[1].data();
  REQUIRE(load_element(p, DType::bf16, 0) == 1.0);
  REQUIRE(load_element(p, DType::bf16, 1) == 1.0 + 4 * 0x1p-8);
  REQUIRE(std::signbit(load_element(p, DType::bf16, 2)));
  REQUIRE(std::isnan(load_element(p, DType::bf16, 3)));
}

TEST_CASE("kernels with inconsistent arguments are refused", "[core][kernels]") {
  VecMemory m;
  m.put(0, {1, 2});
  auto bad = kernels::add(0, TensorRef::f32(0, 0, 2), TensorRef::f32(0, 0, 1), TensorRef::f32(0, 0, 2));
  REQUIRE_THAT(check_kernel(bad).message(), Catch::Contains("differ in length"));
  REQUIRE_THROWS_AS(execute_cpu(bad, m), InternalError);
  REQUIRE_THAT(
      check_kernel(kernels::divide(0, TensorRef::f32(0, 0, 2), TensorRef::f32(0, 0, 2), 0.0)).message(),
      Catch::Contains("divides by zero"));
  REQUIRE(is_elementwise(kernel::Add{}));
  REQUIRE_FALSE(is_elementwise(kernel::Opaque{}));
}
