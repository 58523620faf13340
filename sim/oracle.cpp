// Direct reads of simulated memory for the training judge.
#include "sim/oracle.hpp"

namespace shardcheck::sim {

core::Task<std::vector<TrainingOracle::Values>> TrainingOracle::capture(
    core::Runtime& rt, const std::vector<core::Piece>& pieces) {
  std::vector<Values> out;
  for (const core::Piece& p : pieces) {
    cancel.poll();
    const std::span<const std::byte> bytes = world_.read(rt.rank(), p.buffer);
    Values v{p, std::vector<float>(static_cast<size_t>(p.count))};
    for (int64_t i = 0; i < p.count; ++i) {
      if ((i & 0xfffff) == 0xfffff) cancel.poll();
      v.data[static_cast<size_t>(i)] =
          static_cast<float>(core::load_element(bytes.data(), p.dtype, p.offset + i));
    }
    out.push_back(std::move(v));
  }
  co_return out;
}

}  // namespace shardcheck::sim
