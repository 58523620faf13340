// The device-local communicator's kernels: N ranks on one GPU exchange data with one kernel
// per collective that reads every member's input and writes every member's output, adding
// members in group-rank order in float (double for f64) and dividing by the member count for
// an average: the same arithmetic as core's CPU collectives, so runs are bitwise
// reproducible and agree with the simulator. Also the spin kernel of --amplify.
// Plain C++ (no CUDA syntax), so .cpp files can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardcheck::gpu {

inline constexpr int kMaxLocalMembers = 64;

struct LocalCollective {
  enum Kind : int { all_gather = 0, reduce_scatter = 1, all_reduce = 2, broadcast = 3 };
  enum Type : int { f32 = 0, bf16 = 1, f64 = 2, bytes1 = 3, bytes4 = 4, bytes8 = 5 };  // bytesN: copy only
  int kind = all_reduce;
  int type = f32;
  bool average = false;
  bool reverse = false;  // add members in descending rank order (a measurement switch)
  int members = 0;
  int root = 0;
  int64_t in_numel = 0;
  int64_t out_numel = 0;
  const void* in[kMaxLocalMembers] = {};
  void* out[kMaxLocalMembers] = {};
};

void launch_local_collective(const LocalCollective& c, cudaStream_t stream);
// Busy-waits about `cycles` SM clock cycles on `stream` (one thread): widens race windows.
void launch_spin(int64_t cycles, cudaStream_t stream);

}  // namespace shardcheck::gpu
