// MPI for processes sharing a command (run/processes.hpp), installed by `shardcheck-gpu`; MPI's
// start-up and messages are mpi/launch.hpp's, shared with the GPU backend's NCCL launches.
#include <string>
#include <vector>

#include "mpi/launch.hpp"
#include "run/install_backends.hpp"
#include "run/processes.hpp"

namespace shardcheck::run {

Processes mpi_start_processes() {
  Processes p;
  p.built = true;
  if (launch_of_environment().second < 2) return p;
  const mpi::Process& m = mpi::process();
  p.index = m.rank;
  p.count = m.size;
  return p;
}

std::vector<std::string> mpi_all_gather(const std::string& mine) { return mpi::all_gather(mine); }

}  // namespace shardcheck::run
