// The CPU reference's tensor loads and stores (operands.hpp): fp32 widening of f32 and bf16,
// rounding once when stored, id validation and f64 scalars; and kernels.hpp's element access.
#include "core/kernels/cpu/operands.hpp"

#include <cstdint>
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

namespace {

bool share_bytes(const TensorRef& a, const TensorRef& b) {
  if (a.buffer != b.buffer || a.bytes() <= 0 || b.bytes() <= 0) return false;
  return a.byte_offset() < b.byte_offset() + b.bytes() && b.byte_offset() < a.byte_offset() + a.bytes();
}

float* f32_bytes(MemoryView& mem, const TensorRef& t) {
  if (t.dtype != DType::f32 || t.numel <= 0) return nullptr;
  std::byte* p = mem.data(t);
  if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) return nullptr;
  return reinterpret_cast<float*>(p);
}

}  // namespace

const float* f32_in_place(MemoryView& mem, const TensorRef& t) { return f32_bytes(mem, t); }

float* f32_output_from(MemoryView& mem, const TensorRef& in, const TensorRef& out,
                       std::initializer_list<TensorRef> others) {
  if (in.numel != out.numel) return nullptr;
  const float* src = f32_bytes(mem, in);
  float* dst = f32_bytes(mem, out);
  if (src == nullptr || dst == nullptr) return nullptr;
  const bool same = in.buffer == out.buffer && in.byte_offset() == out.byte_offset();
  for (const TensorRef& o : others) {
    if (share_bytes(o, out)) return nullptr;
  }
  // memmove: `in` may overlap `out` in part; each element is then computed from its own value.
  if (!same) std::memmove(dst, src, static_cast<size_t>(out.numel) * sizeof(float));
  return dst;
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
