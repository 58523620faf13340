// KernelTwin: host and device copies of one call's tensors, and the comparisons.
#include "tests/gpu/kernel_harness.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

namespace shardcheck::gpu_test {

namespace {

constexpr std::byte kGuardByte{0x5a};

bool overlaps(const TensorRef& a, const TensorRef& b) {
  return a.buffer == b.buffer && a.byte_offset() < b.byte_offset() + b.bytes() &&
         b.byte_offset() < a.byte_offset() + a.bytes();
}

// "buffer 2 (bf16) element 17: gpu 0.5, cpu 0.25" for the first differing byte, or "".
std::string first_difference(const Snapshot& gpu, const Snapshot& cpu, const std::vector<DType>& dtypes) {
  for (size_t b = 0; b < cpu.size(); ++b) {
    for (size_t i = 0; i < cpu[b].size(); ++i) {
      if (gpu[b][i] == cpu[b][i]) continue;
      const int64_t size = core::dtype_bytes(dtypes[b]);
      const int64_t e = static_cast<int64_t>(i) / size;
      std::ostringstream os;
      os << std::setprecision(17);  // enough digits to tell any two doubles apart
      os << "buffer " << b << " (" << core::to_string(dtypes[b]) << ") element " << e << " (byte " << i
         << " of the buffer): gpu " << core::load_element(gpu[b].data(), dtypes[b], e) << ", cpu "
         << core::load_element(cpu[b].data(), dtypes[b], e);
      return os.str();
    }
  }
  return "";
}

}  // namespace

KernelTwin::KernelTwin(int64_t pad_elements, size_t initial_scratch_bytes)
    : pad_(pad_elements), blas_(initial_scratch_bytes) {
  SC_CUDA_CHECK(cudaStreamCreate(&stream_));
}

KernelTwin::~KernelTwin() {
  for (Buffer& b : buffers_) cudaFree(b.device);
  cudaStreamDestroy(stream_);
}

TensorRef KernelTwin::alloc(DType dt, int64_t n) {
  const TensorRef t{static_cast<core::BufferId>(buffers_.size()), pad_, n, dt};
  Buffer b;
  b.dtype = dt;
  b.host.assign(static_cast<size_t>((n + 2 * pad_) * core::dtype_bytes(dt)), kGuardByte);
  SC_CUDA_CHECK(cudaMalloc(&b.device, b.host.size() > 0 ? b.host.size() : 1));
  buffers_.push_back(std::move(b));
  std::memset(data(t), 0, static_cast<size_t>(t.bytes()));
  return t;
}

TensorRef KernelTwin::put(DType dt, const std::vector<double>& values) {
  const TensorRef t = alloc(dt, static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i)
    core::store_element(data(t), dt, static_cast<int64_t>(i), values[i]);
  return t;
}

TensorRef KernelTwin::random(DType dt, int64_t n, core::Rng& rng, double scale) {
  const TensorRef t = alloc(dt, n);
  for (int64_t i = 0; i < n; ++i) {
    do {
      core::store_element(data(t), dt, i, scale * rng.normal());
    } while (core::load_element(data(t), dt, i) == 0.0);  // nonzero: no term can vanish
  }
  return t;
}

TensorRef KernelTwin::ids(int64_t n, int64_t bound, core::Rng& rng) {
  const TensorRef t = alloc(DType::i32, n);
  for (int64_t i = 0; i < n; ++i) {
    core::store_element(data(t), DType::i32, i,
                        static_cast<double>(rng.uniform(static_cast<uint64_t>(bound))));
  }
  return t;
}

std::vector<double> KernelTwin::get(const TensorRef& t) {
  std::vector<double> v(static_cast<size_t>(t.numel));
  for (size_t i = 0; i < v.size(); ++i) v[i] = core::load_element(data(t), t.dtype, static_cast<int64_t>(i));
  return v;
}

std::byte* KernelTwin::data(const TensorRef& t) {
  return buffers_.at(static_cast<size_t>(t.buffer)).host.data() + t.byte_offset();
}

void* KernelTwin::ptr(const TensorRef& t) {
  return static_cast<std::byte*>(buffers_.at(static_cast<size_t>(t.buffer)).device) + t.byte_offset();
}

void KernelTwin::launch_on_device(const core::KernelCall& call) {
  REQUIRE(core::check_kernel(call).ok());
  for (const Buffer& b : buffers_) {
    SC_CUDA_CHECK(cudaMemcpy(b.device, b.host.data(), b.host.size(), cudaMemcpyHostToDevice));
  }
  for (const TensorRef& w : call.writes) {
    bool is_input = false;
    for (const TensorRef& r : call.reads) is_input = is_input || overlaps(w, r);
    if (!is_input) SC_CUDA_CHECK(cudaMemset(ptr(w), 0xff, static_cast<size_t>(w.bytes())));
  }
  gpu::launch(call, *this, stream_, blas_);
  SC_CUDA_CHECK(cudaStreamSynchronize(stream_));
  SC_CUDA_CHECK(cudaGetLastError());
}

Snapshot KernelTwin::download() const {
  Snapshot s;
  for (const Buffer& b : buffers_) {
    s.emplace_back(b.host.size());
    SC_CUDA_CHECK(cudaMemcpy(s.back().data(), b.device, b.host.size(), cudaMemcpyDeviceToHost));
  }
  return s;
}

Snapshot KernelTwin::run(const core::KernelCall& call) {
  last_kernel_ = call.name;
  launch_on_device(call);
  Snapshot gpu = download();
  core::execute_cpu(call, *this);
  return gpu;
}

Snapshot KernelTwin::run_gpu(const core::KernelCall& call) {
  last_kernel_ = call.name;
  launch_on_device(call);
  return download();
}

void KernelTwin::require_bitwise(const Snapshot& gpu) {
  Snapshot cpu;
  std::vector<DType> dtypes;
  for (const Buffer& b : buffers_) {
    cpu.push_back(b.host);
    dtypes.push_back(b.dtype);
  }
  const std::string diff = first_difference(gpu, cpu, dtypes);
  INFO("kernel " << last_kernel_ << ": " << diff);
  REQUIRE(diff.empty());
}

void KernelTwin::require_close(const Snapshot& gpu, const std::vector<TensorRef>& outputs, double tol) {
  Snapshot rest = gpu;
  for (const TensorRef& t : outputs) {
    const std::byte* g = gpu.at(static_cast<size_t>(t.buffer)).data() + t.byte_offset();
    const std::byte* c = data(t);
    double diff2 = 0, norm2 = 0;
    int64_t nan_mismatches = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      const double gv = core::load_element(g, t.dtype, i), cv = core::load_element(c, t.dtype, i);
      if (std::isnan(gv) || std::isnan(cv)) {
        nan_mismatches += std::isnan(gv) != std::isnan(cv);
        continue;
      }
      diff2 += (gv - cv) * (gv - cv);
      norm2 += cv * cv;
    }
    const double rel = norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2);
    INFO("kernel " << last_kernel_ << ", output in buffer " << t.buffer << " (" << core::to_string(t.dtype)
                   << ", " << t.numel << " elements): relative error " << rel << ", tolerance " << tol);
    REQUIRE(nan_mismatches == 0);
    REQUIRE(rel <= tol);  // false for a NaN error, too
    // The output is judged; copy the CPU's bytes over it so the rest compares exactly.
    std::memcpy(rest.at(static_cast<size_t>(t.buffer)).data() + t.byte_offset(), c,
                static_cast<size_t>(t.bytes()));
  }
  require_bitwise(rest);
}

}  // namespace shardcheck::gpu_test
