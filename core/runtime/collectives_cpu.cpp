// CPU collectives: all_gather, reduce_scatter, all_reduce, broadcast, reduce, all_to_all, barrier.
#include "core/runtime/collectives_cpu.hpp"

#include <cstring>
#include <vector>

namespace shardcheck::core {

namespace {

// Reduces elements [first, first+count) of every input into `dst` (count elements).
template <class C>
void reduce_into(std::span<std::byte* const> inputs, DType t, int64_t first, int64_t count, ReduceOp op,
                 std::byte* dst) {
  const auto members = static_cast<C>(inputs.size());
  for (int64_t i = 0; i < count; ++i) {
    C acc = static_cast<C>(load_element(inputs[0], t, first + i));
    for (size_t m = 1; m < inputs.size(); ++m) {
      const C v = static_cast<C>(load_element(inputs[m], t, first + i));
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc += v;
          break;
        case ReduceOp::product:
          acc *= v;
          break;
        case ReduceOp::min:
          acc = v < acc ? v : acc;
          break;
        case ReduceOp::max:
          acc = v > acc ? v : acc;
          break;
      }
    }
    if (op == ReduceOp::avg) acc = acc / members;
    store_element(dst, t, i, static_cast<double>(acc));
  }
}

// f32 without per-element dtype dispatch; the same arithmetic as reduce_into<float>, each
// element summed in member order, but member by member over the whole range so the loops
// stream through memory (and vectorize) instead of striding across every input per element.
// The sums build up in `dst`, which the callers keep apart from every input.
void reduce_f32(std::span<std::byte* const> inputs, int64_t first, int64_t count, ReduceOp op,
                std::byte* dst) {
  if (count <= 0) return;
  const float members = static_cast<float>(inputs.size());
  const size_t n = static_cast<size_t>(count);
  std::memcpy(dst, inputs[0] + 4 * first, 4 * n);
  for (size_t m = 1; m < inputs.size(); ++m) {
    const std::byte* in = inputs[m] + 4 * first;
    for (size_t i = 0; i < n; ++i) {
      float a, v;
      std::memcpy(&a, dst + 4 * i, 4);
      std::memcpy(&v, in + 4 * i, 4);
      a += v;
      std::memcpy(dst + 4 * i, &a, 4);
    }
  }
  if (op == ReduceOp::avg) {
    for (size_t i = 0; i < n; ++i) {
      float a;
      std::memcpy(&a, dst + 4 * i, 4);
      a = a / members;
      std::memcpy(dst + 4 * i, &a, 4);
    }
  }
}

void reduce_range(std::span<std::byte* const> inputs, DType t, int64_t first, int64_t count, ReduceOp op,
                  std::byte* dst) {
  if (t == DType::f32 && (op == ReduceOp::sum || op == ReduceOp::avg))
    return reduce_f32(inputs, first, count, op, dst);
  // Integer and byte buffers reduce in double too; only their sums are meaningful.
  if (t == DType::f32 || t == DType::bf16) {
    reduce_into<float>(inputs, t, first, count, op, dst);
  } else {
    reduce_into<double>(inputs, t, first, count, op, dst);
  }
}

}  // namespace

void execute_collective_cpu(const CollectiveCall& c, std::span<std::byte* const> inputs,
                            std::span<std::byte* const> outputs) {
  const int members = static_cast<int>(inputs.size());
  if (outputs.size() != inputs.size() || members == 0)
    throw InternalError("collective: one input and output per member");
  if (Status e = check_collective_shape(c, members); !e) throw InternalError(e.message());
  const DType t = c.input.dtype;
  const int64_t esize = dtype_bytes(t);
  const int64_t in_n = c.input.numel, out_n = c.output.numel;
  // An empty collective moves nothing; the copies below would pass memcpy a null pointer
  // (an empty vector's data()), which is undefined even for zero bytes.
  if (in_n == 0 && out_n == 0) return;
  switch (c.kind) {
    case CollectiveKind::all_gather: {
      // Copy all inputs first: an in-place all_gather's input lies inside the outputs.
      std::vector<std::byte> all(static_cast<size_t>(out_n * esize));
      for (int m = 0; m < members; ++m) std::memcpy(all.data() + m * in_n * esize, inputs[m], in_n * esize);
      for (int m = 0; m < members; ++m) std::memcpy(outputs[m], all.data(), all.size());
      return;
    }
    case CollectiveKind::reduce_scatter: {
      // Every member's block first, in one allocation: an in-place output lies inside the inputs.
      // Reduced as one range, not block by block: with many members a block is a few
      // elements, and a loop per block over every input was all overhead. Each element is
      // still summed in member order, the same arithmetic.
      std::vector<std::byte> result(static_cast<size_t>(members * out_n * esize));
      reduce_range(inputs, t, 0, members * out_n, c.reduce, result.data());
      for (int m = 0; m < members; ++m)
        std::memcpy(outputs[m], result.data() + m * out_n * esize, out_n * esize);
      return;
    }
    case CollectiveKind::all_reduce: {
      std::vector<std::byte> result(out_n * esize);
      reduce_range(inputs, t, 0, out_n, c.reduce, result.data());
      for (int m = 0; m < members; ++m) std::memcpy(outputs[m], result.data(), result.size());
      return;
    }
    case CollectiveKind::broadcast: {
      std::vector<std::byte> src(inputs[c.root], inputs[c.root] + in_n * esize);
      for (int m = 0; m < members; ++m) std::memcpy(outputs[m], src.data(), src.size());
      return;
    }
    case CollectiveKind::reduce: {
      std::vector<std::byte> result(out_n * esize);
      reduce_range(inputs, t, 0, out_n, c.reduce, result.data());
      std::memcpy(outputs[c.root], result.data(), result.size());
      return;
    }
    case CollectiveKind::all_to_all: {
      // Block j of member i's input goes to block i of member j's output; copied out first, as
      // input and output may be the same range.
      const int64_t block = in_n / members * esize;
      std::vector<std::byte> all(static_cast<size_t>(members * in_n * esize));
      for (int m = 0; m < members; ++m) std::memcpy(all.data() + m * in_n * esize, inputs[m], in_n * esize);
      for (int i = 0; i < members; ++i) {
        for (int j = 0; j < members; ++j)
          std::memcpy(outputs[j] + i * block, all.data() + i * in_n * esize + j * block, block);
      }
      return;
    }
    case CollectiveKind::barrier:
      return;
  }
}

}  // namespace shardcheck::core
