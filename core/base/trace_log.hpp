// A backend-neutral record of one run's timeline: a process per rank, a thread per stream
// (thread 0 is the host), a slice per operation with the buffers and bytes it touched, named
// points of the host programs (step ends), and each stream pool's live bytes. The simulator
// fills it from its schedule; reports/ renders it as a Chrome trace that Perfetto opens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardcheck::core {

// The mark the training loop sets on each rank when a step ends (Runtime::mark); findings of
// step `step` are placed on it.
inline std::string step_end_mark(int step) { return "end of step " + std::to_string(step); }

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
    // What it touched: buffer names with their lifetime ("grad#2" is the block's second
    // allocation), the first buffer's name and lifetime, and the bytes over all accesses.
    std::vector<std::string> buffers;
    std::string buffer;
    int lifetime = 0;    // 0: no buffer
    int64_t bytes = -1;  // -1: touches no memory
    std::string group;   // a collective's process group, else empty
    int64_t seq = -1;    // a collective's index on its group (the k-th), else -1
  };
  // A named point of a rank's host program (core::Runtime::mark), e.g. step_end_mark(2).
  struct Mark {
    int rank = 0;
    int64_t ts_us = 0;
    std::string name;
  };
  // A stream pool's bytes in live buffers from ts_us on (buffers allocated on that stream,
  // by requested size).
  struct Counter {
    int rank = 0;
    std::string pool;  // the allocating stream's name
    int64_t ts_us = 0;
    int64_t bytes = 0;
  };
  // When a long run is cut to a window: how many slices the whole run had and how many were
  // left out before and after the window.
  struct Cut {
    int64_t slices_total = 0;
    int64_t dropped_before = 0;
    int64_t dropped_after = 0;
    std::string why;
  };
  int ranks = 0;
  std::vector<Thread> threads;
  std::vector<Slice> slices;
  std::vector<Mark> marks;
  std::vector<Counter> counters;
  Cut cut;  // all zero: nothing was left out
  std::string title;
};

}  // namespace shardcheck::core
