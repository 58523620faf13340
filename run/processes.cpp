// Sharing a command among processes; see processes.hpp. MPI itself is a backend
// (run/backends.hpp): `shardcheck-gpu` installs it, and `shardcheck` hands a launch of several
// processes to that binary.
#include "run/processes.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "run/backends.hpp"

namespace shardcheck::run {

namespace {

int env_int(const char* name, int otherwise) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : otherwise;
}

}  // namespace

std::pair<int, int> launch_of_environment() {
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

namespace {

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
  static const Processes p = backends().start_processes ? backends().start_processes() : Processes{};
  return p;
}

bool alone_in_launch() {
  if (processes().built) return false;
  const auto [index, count] = launch_of_environment();
  if (count < 2) return false;
  if (index > 0) return true;
  std::cerr << "shardcheck: launched as one of " << count
            << " processes, but built without MPI: this process runs everything alone\n";
  return false;
}

std::vector<std::string> all_gather(const std::string& mine) {
  const Processes& p = processes();
  if (p.count < 2) return {mine};
  return backends().all_gather ? backends().all_gather(mine) : std::vector<std::string>{mine};
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
    const core::Spread& sp = f.spread;
    w.u64(sp.instances.size());
    for (uint64_t h : sp.instances) w.u64(h);
    w.u64(sp.ranks.size());
    for (int rank : sp.ranks) w.u64(static_cast<uint64_t>(rank));
    w.u64(sp.streams.size());
    for (const std::string& s : sp.streams) w.str(s);
    w.u64(sp.symptoms.size());
    for (const std::string& s : sp.symptoms) w.str(s);
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
    core::Spread& sp = f.spread;
    for (uint64_t n = in.u64(); n > 0; --n) sp.instances.push_back(in.u64());
    for (uint64_t n = in.u64(); n > 0; --n) sp.ranks.push_back(static_cast<int>(in.i64()));
    for (uint64_t n = in.u64(); n > 0; --n) sp.streams.push_back(in.str());
    for (uint64_t n = in.u64(); n > 0; --n) sp.symptoms.push_back(in.str());
    r.findings.push_back(std::move(f));
  }
  return r;
}

}  // namespace shardcheck::run
