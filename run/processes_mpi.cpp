// MPI for processes sharing a command (run/processes.hpp), installed by `shardcheck-gpu`. With
// the GPU backend built, gpu/mpi.cpp owns MPI's initialization and this file uses it.
#include <mpi.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "run/install_backends.hpp"
#include "run/processes.hpp"
#ifdef SHARDCHECK_HAVE_GPU
#include "gpu/mpi.hpp"
#endif

namespace shardcheck::run {

namespace {
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw std::runtime_error(std::string(what) + ": " + std::string(text, static_cast<size_t>(n)));
}
}  // namespace

Processes mpi_start_processes() {
  Processes p;
  p.built = true;
  if (launch_of_environment().second < 2) return p;
#ifdef SHARDCHECK_HAVE_GPU
  const gpu::MpiProcess& g = gpu::mpi_process();
  p.index = g.rank;
  p.count = g.size;
#else
  int provided = 0;
  // Only the thread that runs the command calls MPI; the worker threads never do.
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  std::atexit([] {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  });
  check(MPI_Comm_rank(MPI_COMM_WORLD, &p.index), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &p.count), "MPI_Comm_size");
#endif
  return p;
}

std::vector<std::string> mpi_all_gather(const std::string& mine) {
  const Processes& p = processes();
  const int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(p.count)), offsets(static_cast<size_t>(p.count));
  check(MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  int total = 0;
  for (int i = 0; i < p.count; ++i) {
    offsets[static_cast<size_t>(i)] = total;
    total += sizes[static_cast<size_t>(i)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  check(MPI_Allgatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE,
                       MPI_COMM_WORLD),
        "MPI_Allgatherv");
  std::vector<std::string> out;
  for (int i = 0; i < p.count; ++i)
    out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(i)]),
                             static_cast<size_t>(sizes[static_cast<size_t>(i)])));
  return out;
}

}  // namespace shardcheck::run
