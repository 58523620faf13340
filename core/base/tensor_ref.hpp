// Handles a rank's host program uses to name device objects, and TensorRef: a typed range
// of elements inside a buffer, the unit every kernel, collective and detector speaks of.
//   TensorRef g = TensorRef::f32(buf, /*offset*/ 256, /*numel*/ 1024);
//   g.byte_offset() == 1024;  g.bytes() == 4096;
#pragma once

#include <cstdint>

#include "core/base/dtype.hpp"

namespace shardcheck::core {

using StreamId = int32_t;  // per rank
using EventId = int32_t;   // per rank
using BufferId = int32_t;  // per rank; never reused within a run
using GroupId = int32_t;   // per rank

struct TensorRef {
  BufferId buffer = -1;
  int64_t offset = 0;  // in elements of dtype
  int64_t numel = 0;
  DType dtype = DType::f32;

  static TensorRef f32(BufferId b, int64_t offset, int64_t numel) { return {b, offset, numel, DType::f32}; }
  static TensorRef bytes_of(BufferId b, int64_t byte_offset, int64_t bytes) {
    return {b, byte_offset, bytes, DType::u8};
  }
  int64_t byte_offset() const { return offset * dtype_bytes(dtype); }
  int64_t bytes() const { return numel * dtype_bytes(dtype); }
  // A sub-range in elements of the same dtype.
  TensorRef slice(int64_t first, int64_t count) const { return {buffer, offset + first, count, dtype}; }
  friend bool operator==(const TensorRef&, const TensorRef&) = default;
};

}  // namespace shardcheck::core
