// The resting memory of a rank — the bytes of its live buffers at the end of a step, after the
// step's device sync — as each strategy's formula predicts it (properties/README.md):
//   FSDP strategies, per parameter group of the rank (one per FSDP unit), with S the group's
//   global layout size in elements and F the product of the dp axis sizes that O splits
//   (no_shard 1; optim, optim_grads, optim_grads_params dp; hsdp dp_inner; hfsdp
//   dp_outer*dp_inner):
//     main fp32 4*S/F + Adam m and v 2*4*S/F + main_grad (finalized, in O) g*S/F
//     + model weights in O: 2*S/F for bf16 params, 0 for fp32 (they alias main)
//   DistOpt, with T the rank's grad-buffer size (buckets padded to lcm(dp, 128)):
//     params p*T + grads 4*T + main, m and v 3*4*T/dp
//   plus, for every strategy, the clip coefficient and the norm: 8 + 8 bytes.
// (g: main_grad bytes per element, p: param bytes per element.)
//   MemoryPrediction m = resting_bytes(case, rank);   // m.bytes, m.terms (one line each)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "properties/cases.hpp"

namespace shardcheck::properties {

struct MemoryPrediction {
  int64_t bytes = 0;
  int64_t logical_bytes = 0;       // the same formula with logical element counts (no layout padding)
  std::vector<std::string> terms;  // "block.0: S=1232 / F=2: main 2464 + adam 4928 + ..."
};

MemoryPrediction resting_bytes(const TrainingCase& c, int rank);

}  // namespace shardcheck::properties
