// Argument checks for the CPU reference's kernels: which dtypes a tensor argument may hold,
// and ArgCheck, which collects the first problem with a call's counts, lengths and dtypes.
// Each layer's check() in this folder is built from these; check_kernel returns its message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/kernels/kernels.hpp"

namespace shardcheck::core::cpu {

// What a tensor argument may hold.
enum class Kind { floating, any_float, f32, f64, i32 };  // floating: f32 or bf16

bool kind_allows(Kind k, DType t);
std::string_view kind_name(Kind k);

// The product of non-negative dimensions, or -1 when one is negative or the product overflows.
int64_t numel_of(std::initializer_list<int64_t> dims);

// A tensor argument's length, or -1 when there is no such argument (counts() reports that).
inline int64_t len(const std::vector<TensorRef>& list, size_t i) {
  return i < list.size() ? list[i].numel : -1;
}

// Whether two tensor arguments share a byte (same buffer, intersecting byte ranges).
inline bool overlaps(const TensorRef& a, const TensorRef& b) {
  if (a.buffer != b.buffer || a.bytes() <= 0 || b.bytes() <= 0) return false;
  return a.byte_offset() < b.byte_offset() + b.bytes() && b.byte_offset() < a.byte_offset() + a.bytes();
}

// Collects the first problem with a call's arguments; later checks are skipped once one
// failed, so they may assume that what was checked before holds.
class ArgCheck {
 public:
  explicit ArgCheck(const KernelCall& c) : c_(c) {}

  // Every other check indexes reads and writes, so this one comes first.
  ArgCheck& counts(size_t reads, size_t writes) {
    if (error_.empty() && (c_.reads.size() != reads || c_.writes.size() != writes)) {
      fail("takes " + std::to_string(reads) + " inputs and " + std::to_string(writes) + " outputs, got " +
           std::to_string(c_.reads.size()) + " and " + std::to_string(c_.writes.size()));
    }
    return *this;
  }
  ArgCheck& require(bool ok, std::string_view why) {
    if (error_.empty() && !ok) fail(std::string(why));
    return *this;
  }
  // reads[i] holds `numel` elements (the product `shape`) of a dtype that `kind` allows.
  ArgCheck& read(size_t i, std::string_view role, Kind kind, int64_t numel, std::string_view shape) {
    return tensor(c_.reads, "reads", i, role, kind, numel, shape);
  }
  ArgCheck& write(size_t i, std::string_view role, Kind kind, int64_t numel, std::string_view shape) {
    return tensor(c_.writes, "writes", i, role, kind, numel, shape);
  }
  // An in-place output: writes[w] must be the very range reads[r].
  ArgCheck& same(size_t w, size_t r, std::string_view role) {
    if (error_.empty() && c_.writes[w] != c_.reads[r]) {
      fail(std::string(role) + " is updated in place: writes[" + std::to_string(w) + "] must be reads[" +
           std::to_string(r) + "]");
    }
    return *this;
  }
  std::string message() const { return error_; }

 private:
  ArgCheck& tensor(const std::vector<TensorRef>& list, std::string_view side, size_t i, std::string_view role,
                   Kind kind, int64_t numel, std::string_view shape) {
    if (!error_.empty()) return *this;
    const TensorRef& t = list[i];
    // Every kernel launch checks its arguments: the message is built only for a failure.
    auto name = [&] { return std::string(role) + " (" + std::string(side) + "[" + std::to_string(i) + "])"; };
    if (!kind_allows(kind, t.dtype)) {
      fail(name() + " is " + std::string(to_string(t.dtype)) + ", expected " + std::string(kind_name(kind)));
    } else if (t.numel != numel) {
      fail(name() + " has " + std::to_string(t.numel) + " elements, expected " + std::to_string(numel) +
           " (" + std::string(shape) + ")");
    }
    return *this;
  }
  void fail(const std::string& why) { error_ = "kernel '" + c_.name + "': " + why; }

  const KernelCall& c_;
  std::string error_;
};

}  // namespace shardcheck::core::cpu
