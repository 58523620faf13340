// The CPU reference's tensor loads and stores (operands.hpp): fp32 widening of f32 and bf16,
// rounding once when stored, id validation and f64 scalars; and kernels.hpp's element access.
#include "core/kernels/cpu/operands.hpp"

#include <cstring>
#include <string>

#include "core/base/status.hpp"

namespace shardcheck::core::cpu {

Floats load_floats(MemoryView& mem, const TensorRef& t) {
  Floats v(static_cast<size_t>(t.numel));
  if (t.numel == 0) return v;
  const std::byte* p = mem.data(t);
  if (t.dtype == DType::f32) {
    std::memcpy(v.data(), p, v.size() * 4);
  } else if (t.dtype == DType::bf16) {
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      v[i] = from_bf16(h);
    }
  } else {
    throw InternalError("fp32 kernel operand of dtype " + std::string(to_string(t.dtype)));
  }
  return v;
}

void store_floats(MemoryView& mem, const TensorRef& t, std::span<const float> v) {
  if (static_cast<int64_t>(v.size()) != t.numel) throw InternalError("kernel output of the wrong length");
  if (t.numel == 0) return;
  std::byte* p = mem.data(t);
  if (t.dtype == DType::f32) {
    std::memcpy(p, v.data(), v.size() * 4);
  } else if (t.dtype == DType::bf16) {
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = to_bf16(v[i]);
      std::memcpy(p + 2 * i, &h, 2);
    }
  } else {
    throw InternalError("fp32 kernel output of dtype " + std::string(to_string(t.dtype)));
  }
}

std::vector<int32_t> load_ids(MemoryView& mem, const KernelCall& c, size_t i, int64_t bound) {
  const TensorRef& t = c.reads[i];
  std::vector<int32_t> ids(static_cast<size_t>(t.numel));
  if (t.numel > 0) std::memcpy(ids.data(), mem.data(t), ids.size() * 4);
  for (int32_t& id : ids) {
    if (id < 0 || id >= bound) id = -1;
  }
  return ids;
}

double load_scalar(MemoryView& mem, const TensorRef& t) {
  double v;
  std::memcpy(&v, mem.data(t), 8);
  return v;
}

void store_scalar(MemoryView& mem, const TensorRef& t, double v) { std::memcpy(mem.data(t), &v, 8); }

}  // namespace shardcheck::core::cpu

namespace shardcheck::core {

double load_element(const std::byte* base, DType t, int64_t i) { return cpu::load<double>(base, t, i); }
void store_element(std::byte* base, DType t, int64_t i, double v) { cpu::store<double>(base, t, i, v); }

}  // namespace shardcheck::core
