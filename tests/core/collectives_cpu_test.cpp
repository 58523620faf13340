// The CPU collectives' reductions: every element summed in member order, as a scalar loop over
// the members computes it, whatever the member count, the block size, the dtype and whether
// the output lies inside the input (in place).
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "core/base/rng.hpp"
#include "core/runtime/collectives_cpu.hpp"

using namespace shardcheck::core;

namespace {

// Element i of the reduction of every member's input, in member order, in the compute type the
// header promises (float for f32 and bf16, double otherwise), rounded once to the dtype.
double reference(const std::vector<std::vector<std::byte>>& in, DType t, int64_t i, ReduceOp op) {
  const bool wide = t != DType::f32 && t != DType::bf16;
  double acc = load_element(in[0].data(), t, i);
  float accf = static_cast<float>(acc);
  for (size_t m = 1; m < in.size(); ++m) {
    const double v = load_element(in[m].data(), t, i);
    if (wide) {
      acc = op == ReduceOp::max ? std::max(acc, v) : acc + v;
    } else {
      accf = op == ReduceOp::max ? std::max(accf, static_cast<float>(v)) : accf + static_cast<float>(v);
    }
  }
  if (op == ReduceOp::avg) {
    acc = acc / static_cast<double>(in.size());
    accf = accf / static_cast<float>(in.size());
  }
  std::vector<std::byte> one(8);
  store_element(one.data(), t, 0, wide ? acc : static_cast<double>(accf));
  return load_element(one.data(), t, 0);
}

}  // namespace

TEST_CASE("reduce_scatter sums each element in member order, for any member count", "[core][collectives]") {
  Rng rng(5);
  for (const DType t : {DType::f32, DType::bf16, DType::f64, DType::i32}) {
    for (const int members : {1, 2, 3, 8, 64, 256}) {
      for (const int64_t block : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{33}}) {
        for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
          for (const bool in_place : {false, true}) {
            CAPTURE(static_cast<int>(t), members, block, static_cast<int>(op), in_place);
            const int64_t n = members * block, es = dtype_bytes(t);
            std::vector<std::vector<std::byte>> in(static_cast<size_t>(members),
                                                   std::vector<std::byte>(static_cast<size_t>(n * es)));
            for (auto& buf : in) {
              for (int64_t i = 0; i < n; ++i) {
                const double v = t == DType::i32
                                     ? static_cast<double>(rng.uniform_int(-1000, 1000))
                                     : (2 * rng.uniform_real() - 1) * (rng.bernoulli(0.2) ? 1e6 : 1);
                store_element(buf.data(), t, i, v);
              }
            }
            const std::vector<std::vector<std::byte>> original = in;
            std::vector<std::vector<std::byte>> separate(
                static_cast<size_t>(members), std::vector<std::byte>(static_cast<size_t>(block * es)));
            std::vector<std::byte*> ins, outs;
            for (int m = 0; m < members; ++m) {
              ins.push_back(in[static_cast<size_t>(m)].data());
              // In place, as NCCL allows: member m's output is its own block of its input.
              outs.push_back(in_place ? in[static_cast<size_t>(m)].data() + m * block * es
                                      : separate[static_cast<size_t>(m)].data());
            }
            CollectiveCall c;
            c.kind = CollectiveKind::reduce_scatter;
            c.input = {0, 0, n, t};
            c.output = {1, 0, block, t};
            c.reduce = op;
            execute_collective_cpu(c, ins, outs);
            for (int m = 0; m < members; ++m) {
              for (int64_t j = 0; j < block; ++j) {
                const double want = reference(original, t, m * block + j, op);
                const double got = load_element(outs[static_cast<size_t>(m)], t, j);
                REQUIRE(std::memcmp(&want, &got, sizeof got) == 0);
              }
            }
          }
        }
      }
    }
  }
}
