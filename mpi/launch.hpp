// Several processes under an MPI launcher, for the two commands that use one:
//   mpirun -np 4 shardcheck run FILE --backend gpu --comm nccl   (one rank and GPU each)
//   mpirun -np 4 shardcheck run FILE                              (processes share the schedules)
// MPI only starts the processes and carries a few host messages (NCCL's unique ids, the
// results gathered on process 0); NCCL carries every collective. MPI is initialized once, here,
// and only when this process was started by a launcher (its environment says so), so a plain
// run never touches it. Without MPI at build time every process is alone.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace shardcheck::mpi {

struct Process {
  bool launched = false;  // started by an MPI launcher with more than one process
  int rank = 0, size = 1;
  int local_rank = 0;  // among the processes on this host: which GPU to take
};

bool built();
// Initializes MPI on first call when launched (MPI_Finalize runs at exit). Each process's host
// threads take turns with MPI, never at once (MPI_THREAD_SERIALIZED).
const Process& process();

// Host messages between processes (blocking; small).
void send(int to, int tag, std::span<const std::byte> bytes);
std::vector<std::byte> recv(int from, int tag);
// Every process's bytes on process 0, in rank order; an empty list elsewhere.
std::vector<std::vector<std::byte>> gather(std::span<const std::byte> bytes);
// Every process's string on every process, in rank order.
std::vector<std::string> all_gather(const std::string& mine);
// The same on every process: the sum of `value` over processes.
long long sum(long long value);
// Ends every process of the launch (a rank that failed would leave the others waiting in NCCL).
[[noreturn]] void abort(int code);

inline constexpr int kTagGroupId = 17;

}  // namespace shardcheck::mpi
