// A backend-neutral record of one run's timeline: a process per rank, a thread per stream
// (thread 0 is the host), a slice per operation. The simulator fills it from its schedule;
// reports/ renders it as a Chrome trace that Perfetto opens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardcheck::core {

struct TraceLog {
  struct Thread {
    int rank = 0;
    int tid = 0;  // 0: host, s+1: stream s
    std::string name;
  };
  struct Slice {
    int rank = 0;
    int tid = 0;
    int64_t ts_us = 0;
    int64_t dur_us = 1;
    std::string name;
    std::string category;  // "issue", "kernel", "collective", ...
    uint32_t op = 0;       // operation id, as findings' AccessSite::op_id
  };
  int ranks = 0;
  std::vector<Thread> threads;
  std::vector<Slice> slices;
  std::string title;
};

}  // namespace shardcheck::core
