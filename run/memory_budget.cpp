// Memory per schedule and the -j cap; see memory_budget.hpp.
#include "run/memory_budget.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "core/scenario/captured_program.hpp"

namespace shardcheck::run {

namespace {
constexpr int64_t kUnknown = std::numeric_limits<int64_t>::max();

// "MemAvailable:   123456 kB" from /proc/meminfo, in bytes.
int64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return kUnknown;
}

// A cgroup v2 file holding one number ("max" where unlimited).
int64_t cgroup_value(const std::string& file) {
  std::ifstream in(file);
  std::string v;
  if (!(in >> v) || v == "max") return kUnknown;
  try {
    return std::stoll(v);
  } catch (...) {
    return kUnknown;
  }
}

// What the cgroup this process is in still allows (cgroup v2), kUnknown where it says nothing.
int64_t cgroup_left() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  if (path.empty()) return kUnknown;
  const std::string dir = "/sys/fs/cgroup" + path;
  const int64_t max = cgroup_value(dir + "/memory.max");
  if (max == kUnknown) return kUnknown;
  const int64_t current = cgroup_value(dir + "/memory.current");
  return current == kUnknown ? max : std::max<int64_t>(0, max - current);
}

// The address-space limit (ulimit -v) less this process's size.
int64_t address_space_left() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return kUnknown;
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0;
  in >> pages;
  const int64_t size = pages * ::sysconf(_SC_PAGESIZE);
  return std::max<int64_t>(0, static_cast<int64_t>(lim.rlim_cur) - size);
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB",
                static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
  return buf;
}
}  // namespace

int64_t worker_bytes(const LoadedScenario& s) {
  if (!s.capture()) return 0;
  const core::CapturedProgram* p = s.capture();
  int64_t ranges = 0;
  for (const auto& r : p->ranks) ranges += static_cast<int64_t>(r.ranges.size());
  return kWorkerBytesPerRecord * p->records() + kWorkerBytesPerRange * ranges;
}

int64_t available_memory() { return std::min({mem_available(), cgroup_left(), address_space_left()}); }

namespace {
// Address space a worker thread reserves beyond what it uses: its stack (8 MiB by default) and
// a malloc arena (glibc reserves 64 MiB each). Only an address-space limit (ulimit -v) counts it.
constexpr int64_t kThreadAddressSpace = int64_t{72} << 20;
}  // namespace

int jobs_within(int64_t per_worker, int64_t available, int threads) {
  if (per_worker <= 0 || available == kUnknown) return std::max(1, threads);
  return static_cast<int>(std::clamp<int64_t>(available / per_worker, 1, std::max(1, threads)));
}

JobsCap cap_jobs(const LoadedScenario& s, int threads, int sharing) {
  JobsCap cap;
  cap.jobs = std::max(1, threads);
  const int64_t per = worker_bytes(s);
  if (per <= 0) return cap;
  const int64_t resident = std::min(mem_available(), cgroup_left()), address = address_space_left();
  const int n = std::max(1, sharing);
  const int by_resident = resident == kUnknown ? threads : jobs_within(per, resident / n, threads);
  const int by_address =
      address == kUnknown ? threads : jobs_within(per + kThreadAddressSpace, address / n, threads);
  cap.jobs = std::max(1, std::min(by_resident, by_address));
  const int64_t share = (by_address < by_resident ? address : resident) / n;
  if (cap.jobs < threads) {
    std::ostringstream note;
    note << "shardcheck: " << s.name << ": " << cap.jobs << " schedule" << (cap.jobs == 1 ? "" : "s")
         << " at once, not " << threads << ": each needs up to " << gib(per)
         << " beside the loaded program, and this process may take " << gib(share)
         << (by_address < by_resident
                 ? " of address space (ulimit -v), less 72 MiB per thread for its stack and "
                   "malloc arena"
                 : "")
         << (cap.jobs == 1 && per > share ? " (even one may not fit)" : "");
    cap.note = note.str();
  }
  return cap;
}

}  // namespace shardcheck::run
