// MPI start-up and host messages for launched processes; see launch.hpp.
#include "mpi/launch.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef SHARDCHECK_HAVE_MPI
#include <mpi.h>
#endif

namespace shardcheck::mpi {

namespace {
// Launchers set these in every process they start: Open MPI, and PMI/PMIx (MPICH, Slurm).
int launched_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return 0;
}

#ifdef SHARDCHECK_HAVE_MPI
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw std::runtime_error(std::string(what) + ": " + std::string(text, static_cast<size_t>(n)));
}
#endif
}  // namespace

bool built() {
#ifdef SHARDCHECK_HAVE_MPI
  return true;
#else
  return false;
#endif
}

const Process& process() {
  static const Process p = [] {
    Process m;
#ifdef SHARDCHECK_HAVE_MPI
    if (launched_size() < 2) return m;
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    std::atexit([] {
      int done = 0;
      MPI_Finalized(&done);
      if (!done) MPI_Finalize();
    });
    m.launched = true;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &m.rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &m.size), "MPI_Comm_size");
    MPI_Comm host;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m.rank, MPI_INFO_NULL, &host),
          "MPI_Comm_split_type");
    check(MPI_Comm_rank(host, &m.local_rank), "MPI_Comm_rank");
    MPI_Comm_free(&host);
#else
    (void)launched_size;
#endif
    return m;
  }();
  return p;
}

#ifdef SHARDCHECK_HAVE_MPI
void send(int to, int tag, std::span<const std::byte> bytes) {
  check(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD),
        "MPI_Send");
}

std::vector<std::byte> recv(int from, int tag) {
  MPI_Status st;
  check(MPI_Probe(from, tag, MPI_COMM_WORLD, &st), "MPI_Probe");
  int n = 0;
  check(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
  std::vector<std::byte> out(static_cast<size_t>(n));
  check(MPI_Recv(out.data(), n, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  return out;
}

std::vector<std::vector<std::byte>> gather(std::span<const std::byte> bytes) {
  const Process& p = process();
  const int n = static_cast<int>(bytes.size());
  std::vector<int> sizes(static_cast<size_t>(p.size)), offsets(static_cast<size_t>(p.size));
  check(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  int total = 0;
  for (int i = 0; i < p.size; ++i) {
    offsets[i] = total;
    total += sizes[i];
  }
  std::vector<std::byte> all(static_cast<size_t>(p.rank == 0 ? total : 0));
  check(MPI_Gatherv(bytes.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, 0,
                    MPI_COMM_WORLD),
        "MPI_Gatherv");
  std::vector<std::vector<std::byte>> out;
  if (p.rank != 0) return out;
  for (int i = 0; i < p.size; ++i)
    out.emplace_back(all.begin() + offsets[i], all.begin() + offsets[i] + sizes[i]);
  return out;
}

std::vector<std::string> all_gather(const std::string& mine) {
  const Process& p = process();
  const int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(p.size)), offsets(static_cast<size_t>(p.size));
  check(MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  int total = 0;
  for (int i = 0; i < p.size; ++i) {
    offsets[static_cast<size_t>(i)] = total;
    total += sizes[static_cast<size_t>(i)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  check(MPI_Allgatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE,
                       MPI_COMM_WORLD),
        "MPI_Allgatherv");
  std::vector<std::string> out;
  for (int i = 0; i < p.size; ++i)
    out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(i)]),
                             static_cast<size_t>(sizes[static_cast<size_t>(i)])));
  return out;
}

long long sum(long long value) {
  long long total = 0;
  check(MPI_Allreduce(&value, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  return total;
}

void abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}
#else
void send(int, int, std::span<const std::byte>) { throw std::logic_error("built without MPI"); }
std::vector<std::byte> recv(int, int) { throw std::logic_error("built without MPI"); }
std::vector<std::vector<std::byte>> gather(std::span<const std::byte> bytes) {
  return {{bytes.begin(), bytes.end()}};
}
std::vector<std::string> all_gather(const std::string& mine) { return {mine}; }
long long sum(long long value) { return value; }
void abort(int code) { std::_Exit(code); }
#endif

}  // namespace shardcheck::mpi
