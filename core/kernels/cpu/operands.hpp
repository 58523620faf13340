// How the CPU reference reads and writes tensors: single elements of any dtype, whole float
// tensors widened to fp32 scratch vectors (Floats) and rounded to their dtype once when stored,
// token ids with corrupted ones marked, and f64 scalars.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/kernels/kernels.hpp"

namespace shardcheck::core::cpu {

// ---- Elements: one element of any dtype, widened to the compute type C or rounded from it.
// The elementwise kernels compute through these, and so do load_element and store_element.

template <class C>
C load(const std::byte* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: {
      float v;
      std::memcpy(&v, base + 4 * i, 4);
      return static_cast<C>(v);
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, base + 2 * i, 2);
      return static_cast<C>(from_bf16(h));
    }
    case DType::f64: {
      double v;
      std::memcpy(&v, base + 8 * i, 8);
      return static_cast<C>(v);
    }
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, base + 4 * i, 4);
      return static_cast<C>(v);
    }
    case DType::i64: {
      int64_t v;
      std::memcpy(&v, base + 8 * i, 8);
      return static_cast<C>(v);
    }
    case DType::u8:
    case DType::boolean:
      return static_cast<C>(static_cast<uint8_t>(base[i]));
    case DType::i8:
      return static_cast<C>(static_cast<int8_t>(base[i]));
    case DType::i16:
    case DType::f16: {  // f16 values are not modelled (captured programs run without values)
      int16_t v;
      std::memcpy(&v, base + 2 * i, 2);
      return static_cast<C>(v);
    }
  }
  return C{};
}

template <class C>
void store(std::byte* base, DType t, int64_t i, C v) {
  switch (t) {
    case DType::f32: {
      float f = static_cast<float>(v);
      std::memcpy(base + 4 * i, &f, 4);
      return;
    }
    case DType::bf16: {
      uint16_t h = to_bf16(static_cast<float>(v));
      std::memcpy(base + 2 * i, &h, 2);
      return;
    }
    case DType::f64: {
      double d = static_cast<double>(v);
      std::memcpy(base + 8 * i, &d, 8);
      return;
    }
    case DType::i32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(base + 4 * i, &x, 4);
      return;
    }
    case DType::i64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(base + 8 * i, &x, 8);
      return;
    }
    case DType::u8:
      base[i] = static_cast<std::byte>(static_cast<uint8_t>(v));
      return;
    case DType::boolean:
    case DType::i8:
      base[i] = static_cast<std::byte>(static_cast<uint8_t>(static_cast<int64_t>(v)));
      return;
    case DType::i16:
    case DType::f16: {
      int16_t x = static_cast<int16_t>(v);
      std::memcpy(base + 2 * i, &x, 2);
      return;
    }
  }
}

// ---- Scratch vectors: the fp32 copies of a kernel's operands and results, one call long.
//
// Every element of one is written (by the load, or by the kernel's loop) before it is read,
// so it is not zero-filled first, and its memory is kept for the next call on the same thread
// instead of going back to malloc: the simulator runs a kernel per operation, and zeroing
// and allocating these copies were a sixth of a training run's instructions. The values
// computed do not depend on where the memory came from.

// Leaves elements that a resize adds uninitialized, as `new float[n]` does.
template <class T>
struct UninitAllocator {
  using value_type = T;
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) {}
  T* allocate(size_t n) { return std::allocator<T>{}.allocate(n); }
  void deallocate(T* p, size_t n) { std::allocator<T>{}.deallocate(p, n); }
  template <class U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  friend bool operator==(const UninitAllocator&, const UninitAllocator&) { return true; }
};

class Floats {
 public:
  using Store = std::vector<float, UninitAllocator<float>>;

  // n elements, uninitialized.
  explicit Floats(size_t n) : v_(take_spare(n)) {
    v_.clear();
    v_.resize(n);
  }
  // n copies of `fill`.
  Floats(size_t n, float fill) : Floats(n) { std::fill(v_.begin(), v_.end(), fill); }
  Floats(Floats&& o) noexcept : v_(std::move(o.v_)) {}
  Floats& operator=(Floats&&) = delete;
  ~Floats() {
    std::vector<Store>& spare = spares();
    if (v_.capacity() > 0 && spare.size() < kSpareMax) spare.push_back(std::move(v_));  // reserved: no throw
  }

  size_t size() const { return v_.size(); }
  float* data() { return v_.data(); }
  const float* data() const { return v_.data(); }
  float* begin() { return v_.data(); }
  float* end() { return v_.data() + v_.size(); }
  const float* begin() const { return v_.data(); }
  const float* end() const { return v_.data() + v_.size(); }
  float& operator[](size_t i) { return v_[i]; }
  const float& operator[](size_t i) const { return v_[i]; }
  operator std::span<const float>() const { return {v_.data(), v_.size()}; }

 private:
  // A kernel holds at most six scratch vectors at once; more spares would only hold memory.
  static constexpr size_t kSpareMax = 16;

  static std::vector<Store>& spares() {
    thread_local std::vector<Store> spare = [] {
      std::vector<Store> s;
      s.reserve(kSpareMax);
      return s;
    }();
    return spare;
  }
  // The spare that fits n most tightly, else the largest (it grows), else a new vector.
  static Store take_spare(size_t n) {
    std::vector<Store>& spare = spares();
    if (spare.empty()) return Store();
    size_t best = 0;
    for (size_t i = 1; i < spare.size(); ++i) {
      const size_t cap = spare[i].capacity(), best_cap = spare[best].capacity();
      const bool fits = cap >= n, best_fits = best_cap >= n;
      if (fits ? (!best_fits || cap < best_cap) : (!best_fits && cap > best_cap)) best = i;
    }
    Store out = std::move(spare[best]);
    spare.erase(spare.begin() + static_cast<ptrdiff_t>(best));
    return out;
  }

  Store v_;
};

// ---- Loads and stores: whole tensors, widened to fp32 (or f64), rounded once when stored.

Floats load_floats(MemoryView& mem, const TensorRef& t);
void store_floats(MemoryView& mem, const TensorRef& t, std::span<const float> v);

// ---- In place: elementwise kernels on f32 compute in the output's own memory, without the two
// scratch copies, where that reads every input as it was before any output is written.

// t's bytes as floats when t is f32 and its memory float-aligned, else null.
const float* f32_in_place(MemoryView& mem, const TensorRef& t);
// `out`'s own memory holding `in`'s values (moved over, unless `in` is `out`; they may overlap),
// when both are f32 and aligned and no tensor of `others` (the kernel's other inputs, read
// during the loop) shares a byte with `out`; else null, and nothing was written.
float* f32_output_from(MemoryView& mem, const TensorRef& in, const TensorRef& out,
                       std::initializer_list<TensorRef> others = {});

// v with each element rounded to bf16 precision when `round` (a gradient's mixed-precision
// rounding, fused into the kernel that makes it: kernels.hpp's round_bf16 flags).
template <class V>
V rounded_if(bool round, V v) {
  if (round) {
    for (float& x : v) x = round_bf16(x);
  }
  return v;
}

// Token or target ids from reads[i]. An id outside [0, bound) means the ids were corrupted
// (a race let other data into the buffer, or it was never written): it is returned as -1,
// and the kernels turn it into NaN results, never an out-of-bounds access or a crash of the
// checker. The corruption then shows where it belongs, in the numerics.
std::vector<int32_t> load_ids(MemoryView& mem, const KernelCall& c, size_t i, int64_t bound);

double load_scalar(MemoryView& mem, const TensorRef& t);
void store_scalar(MemoryView& mem, const TensorRef& t, double v);

}  // namespace shardcheck::core::cpu
