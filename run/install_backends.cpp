// install_backends: what this build of `shardcheck-gpu` has, installed for the commands.
#include "run/install_backends.hpp"

#include "run/backends.hpp"

namespace shardcheck::run {

void install_backends() {
  Backends& b = backends();
#ifdef SHARDCHECK_HAVE_GPU
  b.run_on_gpu = gpu_run_on_gpu;
  b.compare_on_gpu = gpu_compare_on_gpu;
#endif
#ifdef SHARDCHECK_HAVE_MPI
  b.start_processes = mpi_start_processes;
  b.all_gather = mpi_all_gather;
#endif
}

}  // namespace shardcheck::run
