// The scale kernel on the GPU against the CPU reference in core, bit for bit.
#include <cstring>
#include <vector>

#include "core/base/rng.hpp"
#include "core/kernels/kernels.hpp"
#include "gpu/elementwise.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace shardcheck;

TEST_CASE("gpu scale matches the CPU reference bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  const int64_t n = 1 << 20;
  core::Rng rng(11);
  std::vector<float> host(n);
  for (auto& v : host) v = static_cast<float>(rng.normal());
  REQUIRE(host[0] != 0.0f);
  float *d_in = nullptr, *d_out = nullptr;
  SC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_in), n * 4));
  SC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_out), n * 4));
  SC_CUDA_CHECK(cudaMemcpy(d_in, host.data(), n * 4, cudaMemcpyHostToDevice));
  SC_CUDA_CHECK(cudaMemset(d_out, 0xff, n * 4));  // poison: every element must be written
  gpu::launch_scale(d_in, d_out, n, 0.3f, nullptr);
  std::vector<float> got(n);
  SC_CUDA_CHECK(cudaMemcpy(got.data(), d_out, n * 4, cudaMemcpyDeviceToHost));

  struct Mem : core::MemoryView {
    std::vector<float>* v;
    std::byte* data(const core::TensorRef& t) override {
      return reinterpret_cast<std::byte*>(v->data()) + t.byte_offset();
    }
  } mem;
  std::vector<float> want = host;
  mem.v = &want;
  core::execute_cpu(
      core::kernels::scale(0, core::TensorRef::f32(0, 0, n), core::TensorRef::f32(0, 0, n), 0.3f), mem);
  REQUIRE(std::memcmp(got.data(), want.data(), n * 4) == 0);
  SC_CUDA_CHECK(cudaFree(d_in));
  SC_CUDA_CHECK(cudaFree(d_out));
}
