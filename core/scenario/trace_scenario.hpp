// Trace scenarios (docs/semantics.md §5): an explicit per-rank program of runtime operations, loaded
// from YAML and checked completely before anything runs. Every problem in the file is
// reported as `file:line:column: message`.
//   Expected<TraceScenario> s = load_trace_scenario("scenarios/trace/reuse-race.yaml");
//   if (!s) { std::cerr << s.error().message(); return 2; }
#pragma once

#include <string>
#include <vector>

#include "core/base/status.hpp"
#include "core/layout/placement.hpp"
#include "core/runtime/allocator.hpp"
#include "core/runtime/runtime.hpp"
#include "core/scenario/expectation.hpp"
#include "core/scenario/yaml_reader.hpp"

namespace shardcheck::core {

// Bounds that keep loading, checking and simulating a trace scenario finite in memory and
// time; each is checked before anything runs and named in its error (docs/limits.md).
// The simulator keeps real host bytes behind every simulated device byte, so device memory
// is bounded in total, not only per buffer.
struct TraceLimits {
  static constexpr int kMaxRanks = 256;    // the simulator's sim::Options::kMaxRanks
  static constexpr int kMaxStreams = 64;   // per rank: sim::Options::kMaxStreamsPerRank
  static constexpr int kMaxGroups = 1024;  // each with at most kMaxRanks members
  static constexpr int64_t kMaxBufferBytes = int64_t{1} << 30;
  // Bytes allocated at once, summed over ranks: a program past it cannot run, since the
  // simulator holds at most sim::Options::max_device_bytes (4 GiB) per run.
  static constexpr int64_t kMaxDeviceBytes = int64_t{4} << 30;
  static constexpr int kMaxProgramSteps = 20000;
  static constexpr int kMaxAccessesPerKernel = 64;    // reads plus writes of one kernel
  static constexpr int64_t kMaxOperations = 1000000;  // program steps summed over the ranks running them
  static constexpr int64_t kMaxAccesses = 4000000;    // kernel reads and writes, summed likewise
  // Bytes one schedule touches: every kernel read and write, collective input and output,
  // send, receive and free, times the ranks that run it. The simulator moves them at under
  // 1 GiB/s on one core (the opaque pattern, byte by byte: 64 GiB in 96 s), so a schedule at
  // the bound is a minute or two, and a file's schedules together (runs times the bytes of
  // one, also held against --runs) at most about six minutes.
  static constexpr int64_t kMaxBytesPerRun = int64_t{64} << 30;
  static constexpr int64_t kMaxBytesPerFile = int64_t{256} << 30;
};

// A byte range of a named buffer; bytes < 0 means "to the end of the buffer".
struct RangeSpec {
  std::string buffer;
  int64_t offset = 0;
  int64_t bytes = -1;
  SourceLoc loc;
};

struct TraceStep {
  enum class Kind {
    alloc,
    free,
    kernel,
    wait,
    record,
    wait_event,
    record_stream,
    sync,
    sync_device,
    sync_event,
    send,
    recv,
    collective,
  };
  Kind kind = Kind::alloc;
  SourceLoc loc;
  std::vector<int> on;                   // ranks that run it, ascending, each once; empty: every rank
  std::string buffer;                    // alloc, free, record_stream, send, recv
  int64_t bytes = 0;                     // alloc
  std::string stream;                    // alloc (default stream when empty), kernel, wait, record, ...
  std::string for_stream;                // wait
  std::string event;                     // record, wait_event, sync_event
  std::string name;                      // kernel
  std::vector<RangeSpec> reads, writes;  // kernel
  CollectiveKind op = CollectiveKind::all_reduce;
  std::string group;
  RangeSpec input, output;
  DType dtype = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;
  std::string tag;
  int peer = -1;  // send: to, recv: from
};

struct TraceScenario {
  std::string file;
  std::string name;
  std::string description;
  int ranks = 1;
  std::vector<std::string> streams;  // the first is the default stream
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  Allocator allocator = Allocator::caching;
  PoolReuse reuse = PoolReuse::best_fit;
  ScheduleSpec schedule;
  std::vector<TraceStep> program;
  Expectation expect;
  int64_t bytes_per_run = 0;  // bytes one schedule touches (TraceLimits::kMaxBytesPerRun)

  bool runs_on(const TraceStep& s, int rank) const;
  int64_t ranks_running(const TraceStep& s) const {
    return s.on.empty() ? ranks : static_cast<int64_t>(s.on.size());
  }
};

Expected<TraceScenario> load_trace_scenario(const std::string& path);
// The scenario of a file `y` has already parsed into `root` (a loader that read `kind:` first
// parses the file once); throws LoadError or YAML::Exception, as YamlReader::parse_file expects.
TraceScenario read_trace_scenario(const YamlReader& y, const YAML::Node& root);
// Empty when `runs` schedules of a program touching `bytes_per_run` stay within
// TraceLimits::kMaxBytesPerFile, else why not.
Status trace_bytes_exceeded(int64_t bytes_per_run, int64_t runs);
// For tests: parse YAML text as if it were the file `path`.
Expected<TraceScenario> parse_trace_scenario(const std::string& text, const std::string& path);

}  // namespace shardcheck::core
