// MPI glue for sharing a command among processes; see processes.hpp. With the GPU backend
// built, gpu/mpi.cpp owns MPI's initialization and this file uses it.
#include "run/processes.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

#ifdef SHARDCHECK_HAVE_MPI
#include <mpi.h>
#endif
#ifdef SHARDCHECK_HAVE_GPU
#include "gpu/mpi.hpp"
#endif

namespace shardcheck::run {

namespace {

int env_int(const char* name, int otherwise) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : otherwise;
}

// What the launcher says: this process's index and the count, {0, 1} when not launched.
std::pair<int, int> launched() {
  const char* force = std::getenv("SHARDCHECK_MPI");
  if (force && std::string(force) == "0") return {0, 1};
  if (int n = env_int("OMPI_COMM_WORLD_SIZE", 0); n > 0) return {env_int("OMPI_COMM_WORLD_RANK", 0), n};
  if (int n = env_int("PMIX_SIZE", 0); n > 0) return {env_int("PMIX_RANK", 0), n};
  if (int n = env_int("PMI_SIZE", 0); n > 0) return {env_int("PMI_RANK", 0), n};
  if (int n = env_int("SLURM_NTASKS", 0); n > 0 && std::getenv("SLURM_PROCID"))
    return {env_int("SLURM_PROCID", 0), n};
  if (force && std::string(force) == "1") return {0, 2};  // MPI_Init tells the truth
  return {0, 1};
}

#ifdef SHARDCHECK_HAVE_MPI
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw std::runtime_error(std::string(what) + ": " + std::string(text, static_cast<size_t>(n)));
}

Processes start_mpi() {
  Processes p;
  p.built = true;
  if (launched().second < 2) return p;
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
#endif

// A little-endian byte stream of integers and strings.
struct Writer {
  std::string out;
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void str(const std::string& s) {
    u64(s.size());
    out += s;
  }
};

struct Reader {
  const std::string& in;
  size_t at = 0;
  uint64_t u64() {
    if (at + 8 > in.size()) throw std::runtime_error("a truncated message between processes");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= uint64_t{static_cast<unsigned char>(in[at + static_cast<size_t>(i)])} << (8 * i);
    at += 8;
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::string str() {
    const uint64_t n = u64();
    if (n > in.size() - at) throw std::runtime_error("a truncated message between processes");
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
};

}  // namespace

const Processes& processes() {
#ifdef SHARDCHECK_HAVE_MPI
  static const Processes p = start_mpi();
#else
  static const Processes p;
#endif
  return p;
}

bool alone_in_launch() {
  if (processes().built) return false;
  const auto [index, count] = launched();
  if (count < 2) return false;
  if (index > 0) return true;
  std::cerr << "shardcheck: launched as one of " << count
            << " processes, but built without MPI: this process runs everything alone\n";
  return false;
}

std::vector<std::string> all_gather(const std::string& mine) {
  const Processes& p = processes();
  if (p.count < 2) return {mine};
#ifdef SHARDCHECK_HAVE_MPI
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
#else
  return {mine};
#endif
}

sim::Share share_across_processes(int jobs, bool stop_early) {
  const Processes& p = processes();
  sim::Share s;
  s.index = p.index;
  s.count = p.count;
  if (p.count < 2) return s;
  // Windows of a few seeds per thread: small when the first finding stops exploration (less
  // run past it), larger otherwise (less waiting at each window's end).
  int threads = 1;
  for (const std::string& t : all_gather(std::to_string(sim::resolve_jobs(jobs))))
    threads = std::max(threads, std::atoi(t.c_str()));
  s.chunk = threads * (stop_early ? 1 : 8);
  s.exchange = [](const sim::ExploreResult& own) {
    std::vector<sim::ExploreResult> parts;
    for (const std::string& bytes : all_gather(encode(own))) parts.push_back(decode(bytes));
    return parts;
  };
  return s;
}

std::string encode(const sim::ExploreResult& r) {
  Writer w;
  w.u64(static_cast<uint64_t>(r.runs_done));
  w.u64(static_cast<uint64_t>(static_cast<int64_t>(r.first_hit)));
  w.u64(static_cast<uint64_t>(r.steps));
  w.u64(static_cast<uint64_t>(r.ops));
  w.u64(r.digests.size());
  for (uint64_t d : r.digests) w.u64(d);
  w.str(r.error);
  w.u64(r.error_seed);
  w.u64((r.limit ? 1U : 0U) | (r.cancelled ? 2U : 0U));
  w.u64(r.findings.size());
  for (const core::Finding& f : r.findings) {
    w.u64(static_cast<uint64_t>(f.kind));
    w.str(f.key);
    w.u64(f.seed);
    w.u64(static_cast<uint64_t>(f.occurrences));
  }
  return std::move(w.out);
}

sim::ExploreResult decode(const std::string& bytes) {
  Reader in{bytes};
  sim::ExploreResult r;
  r.runs_done = static_cast<int>(in.i64());
  r.first_hit = static_cast<int>(in.i64());
  r.steps = in.i64();
  r.ops = in.i64();
  const uint64_t digests = in.u64();
  for (uint64_t i = 0; i < digests; ++i) r.digests.push_back(in.u64());
  r.error = in.str();
  r.error_seed = in.u64();
  const uint64_t flags = in.u64();
  r.limit = (flags & 1U) != 0;
  r.cancelled = (flags & 2U) != 0;
  const uint64_t findings = in.u64();
  for (uint64_t i = 0; i < findings; ++i) {
    core::Finding f;
    f.kind = static_cast<core::FindingKind>(in.u64());
    f.key = in.str();
    f.seed = in.u64();
    f.occurrences = in.i64();
    r.findings.push_back(std::move(f));
  }
  return r;
}

}  // namespace shardcheck::run
