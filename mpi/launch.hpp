// Several processes under an MPI launcher, one rank (and GPU) each:
//   mpirun -np 4 shardcheck run FILE --backend gpu --comm nccl
// MPI only starts the processes and carries a few host messages (NCCL's unique ids, the
// results gathered on process 0); NCCL carries every collective. MPI is initialized only when
// this process was started by a launcher (its environment says so), so a plain run never
// touches it. Without MPI at build time every process is alone.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace shardcheck::gpu {

struct MpiProcess {
  bool launched = false;  // started by an MPI launcher with more than one process
  int rank = 0, size = 1;
  int local_rank = 0;  // among the processes on this host: which GPU to take
};

bool mpi_built();
// Initializes MPI on first call when launched (MPI_Finalize runs at exit).
const MpiProcess& mpi_process();

// Host messages between processes (blocking; small).
void mpi_send(int to, int tag, std::span<const std::byte> bytes);
std::vector<std::byte> mpi_recv(int from, int tag);
// Every process's bytes on process 0, in rank order; an empty list elsewhere.
std::vector<std::vector<std::byte>> mpi_gather(std::span<const std::byte> bytes);
// The same on every process: the sum of `value` over processes.
long long mpi_sum(long long value);
// Ends every process of the launch (a rank that failed would leave the others waiting in NCCL).
[[noreturn]] void mpi_abort(int code);

inline constexpr int kMpiTagGroupId = 17;

}  // namespace shardcheck::gpu
