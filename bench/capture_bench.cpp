// Captured programs at scale: loading a capture folder, and one schedule of the loaded program,
// on the synthetic capture bench/gen_capture.py writes (this program writes the same bytes, so
// a figure here and `shardcheck run` on that script's folder measure the same input).
//   build-bench/bench/capture_bench --benchmark_filter=CaptureLoad
// Counters: records_per_s (file records over both ranks), ns_per_record, and for the load the
// program's bytes per record (what the loaded program holds: its vectors' capacities and
// strings), for the schedule the process's peak resident memory over the records.
#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <filesystem>
#include <fstream>
#include <string>

#include "bench/bench_main.hpp"
#include "core/scenario/captured_program.hpp"
#include "run/scenario.hpp"
#include "sim/explore.hpp"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;

constexpr int kRanks = 2;
constexpr int kParams = 64;  // gen_capture.py's PARAMS, ACT_BYTES, GRAD_BYTES
constexpr int64_t kActBytes = 1 << 20;
constexpr int64_t kGradBytes = 1 << 18;

std::string range(int64_t buf, int64_t bytes) {
  return "[" + std::to_string(buf) + ",0," + std::to_string(bytes) + "]";
}

// What one rank's file holds before its first layer: streams, the group, sites, parameters.
void write_definitions(std::ofstream& f, int rank, int64_t& count) {
  f << "{\"shardcheck_capture\": 1, \"rank\": " << rank << ", \"world_size\": " << kRanks
    << ", \"torch\": \"synthetic\", \"device\": \"none\", \"argv\": [\"gen_capture.py\"]}\n";
  f << "{\"k\":\"stream\",\"id\":0,\"name\":\"default\"}\n{\"k\":\"stream\",\"id\":1,\"name\":\"nccl:world\"}"
       "\n";
  f << "{\"k\":\"group\",\"id\":0,\"name\":\"world\",\"ranks\":[0,1]}\n";
  count += 3;
  static constexpr std::pair<int, const char*> kSites[] = {
      {10, "main"},           {21, "forward"},        {22, "forward"}, {30, "backward"}, {31, "backward"},
      {40, "allreduce_hook"}, {41, "allreduce_hook"}, {50, "step"},    {51, "step"}};
  int id = 0;
  for (const auto& [line, func] : kSites) {
    f << "{\"k\":\"site\",\"id\":" << id++ << ",\"file\":\"train.py\",\"line\":" << line << ",\"func\":\""
      << func << "\"}\n";
    ++count;
  }
  for (int p = 0; p < kParams; ++p, ++count)
    f << "{\"k\":\"alloc\",\"buf\":" << p << ",\"bytes\":" << kGradBytes
      << ",\"stream\":0,\"at\":0,\"pre\":true}\n";
}

// One layer: forward, gradient, its all-reduce ordered by events as ProcessGroupNCCL orders it,
// the update, and the frees (gen_capture.py's loop body, line for line).
void write_layer(std::ofstream& f, int64_t layer, int64_t& buf, int64_t& prev, int64_t& event,
                 int64_t& count) {
  const int64_t param = layer % kParams, act = buf++, grad = buf++;
  const std::string p = range(param, kGradBytes), g = range(grad, kGradBytes);
  f << "{\"k\":\"alloc\",\"buf\":" << act << ",\"bytes\":" << kActBytes << ",\"stream\":0,\"at\":1}\n";
  f << "{\"k\":\"op\",\"name\":\"aten::addmm\",\"stream\":0,\"r\":[" << p
    << (prev >= 0 ? "," + range(prev, kActBytes) : "") << "],\"w\":[" << range(act, kActBytes)
    << "],\"at\":2}\n";
  if (prev >= 0) f << "{\"k\":\"free\",\"buf\":" << prev << ",\"at\":2}\n", ++count;
  prev = act;
  f << "{\"k\":\"alloc\",\"buf\":" << grad << ",\"bytes\":" << kGradBytes << ",\"stream\":0,\"at\":3}\n";
  f << "{\"k\":\"op\",\"name\":\"aten::mm\",\"stream\":0,\"r\":[" << range(act, kActBytes / 4) << "],\"w\":["
    << g << "],\"at\":4}\n";
  f << "{\"k\":\"event_record\",\"event\":" << event << ",\"stream\":0,\"at\":5}\n";
  f << "{\"k\":\"event_wait\",\"event\":" << event << ",\"stream\":1,\"at\":5}\n";
  f << "{\"k\":\"coll\",\"op\":\"all_reduce\",\"group\":0,\"stream\":1,\"in\":" << g << ",\"out\":" << g
    << ",\"dtype\":\"f32\",\"count\":" << kGradBytes / 4
    << ",\"reduce\":\"sum\",\"root\":0,\"name\":\"grad\",\"at\":5}\n";
  f << "{\"k\":\"record_stream\",\"buf\":" << grad << ",\"stream\":1,\"at\":5}\n";
  f << "{\"k\":\"event_record\",\"event\":" << event + 1 << ",\"stream\":1,\"at\":5}\n";
  f << "{\"k\":\"event_wait\",\"event\":" << event + 1 << ",\"stream\":0,\"at\":6}\n";
  event += 2;
  f << "{\"k\":\"op\",\"name\":\"aten::add_\",\"stream\":0,\"r\":[" << p << "," << g << "],\"w\":[" << p
    << "],\"at\":7}\n";
  f << "{\"k\":\"free\",\"buf\":" << grad << ",\"at\":8}\n";
  count += 12;
}

// gen_capture.py --ranks 2 --records N, in C++: the same files, byte for byte.
void write_capture(const std::string& dir, int64_t records) {
  fs::create_directories(dir);
  for (int rank = 0; rank < kRanks; ++rank) {
    std::ofstream f(dir + "/rank-" + std::to_string(rank) + ".jsonl");
    int64_t count = 0, buf = kParams, prev = -1, event = 0;
    write_definitions(f, rank, count);
    for (int64_t layer = 0; count < records; ++layer) write_layer(f, layer, buf, prev, event, count);
    f << "{\"k\":\"device_sync\",\"at\":8}\n{\"k\": \"end\", \"records\": " << count + 1 << "}\n";
  }
}

// The capture folder of N records per rank, written once per process.
std::string capture_dir(int64_t records) {
  const std::string dir =
      (fs::temp_directory_path() / ("shardcheck-capture-bench-" + std::to_string(records))).string();
  if (!fs::exists(dir + "/rank-" + std::to_string(kRanks - 1) + ".jsonl")) write_capture(dir, records);
  return dir;
}

template <class T>
int64_t bytes_of(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

// What a loaded program holds, in bytes: every vector's capacity, and the strings' heap bytes.
int64_t program_bytes(const core::CapturedProgram& p) {
  int64_t n = static_cast<int64_t>(sizeof p);
  for (const core::CapturedRank& r : p.ranks) {
    n += bytes_of(r.records) + bytes_of(r.ranges) + bytes_of(r.addresses) + bytes_of(r.values) +
         bytes_of(r.coll_origins) + bytes_of(r.scales) + bytes_of(r.pre) + bytes_of(r.groups) +
         static_cast<int64_t>(sizeof r);
  }
  for (const auto* table : {&p.strings, &p.sources})
    for (const std::string& s : *table) n += static_cast<int64_t>(sizeof s + s.capacity());
  return n;
}

double peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;  // kB
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

void reset_peak_rss() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  std::ofstream("/proc/self/clear_refs") << "5";
}

void set_rates(benchmark::State& state, int64_t records) {
  const auto done = static_cast<double>(records * state.iterations());
  state.counters["records_per_s"] = benchmark::Counter(done, benchmark::Counter::kIsRate);
  state.counters["ns_per_record"] =
      benchmark::Counter(done * 1e-9, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Loading a capture folder: both ranks' files parsed, checked and kept as compact records.
void BM_CaptureLoad(benchmark::State& state) {
  const std::string dir = capture_dir(state.range(0));
  int64_t records = 0, bytes = 0;
  for (auto _ : state) {
    auto p = core::load_captured_program(dir);
    if (!p) {
      state.SkipWithError(p.error().message().c_str());
      return;
    }
    records = p->file_records();
    bytes = program_bytes(*p);
    benchmark::DoNotOptimize(p);
  }
  set_rates(state, records);
  state.counters["bytes_per_record"] = static_cast<double>(bytes) / static_cast<double>(records);
}

// One schedule of the loaded program as `shardcheck run DIR` explores it (random policy, seed 1,
// every detector, no values): the World built, every record issued and executed, torn down.
void BM_CaptureSchedule(benchmark::State& state) {
  auto loaded = run::load_scenario(capture_dir(state.range(0)));
  if (!loaded) {
    state.SkipWithError(loaded.error().message().c_str());
    return;
  }
  const sim::Options options = run::options_for(*loaded, {}).value();
  const int64_t records = loaded->capture()->file_records();
  reset_peak_rss();
  const double before = peak_rss_bytes();
  for (auto _ : state) {
    sim::World world(options);
    const sim::RunResult r = sim::run_once(world, loaded->factory);
    if (!r.error.empty() || !r.completed || !r.findings.empty()) {
      state.SkipWithError("the synthetic capture must run to its end, clean");
      return;
    }
  }
  set_rates(state, records);
  state.counters["peak_bytes_per_record"] = (peak_rss_bytes() - before) / static_cast<double>(records);
}

BENCHMARK(BM_CaptureLoad)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CaptureSchedule)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace shardcheck

SHARDCHECK_BENCHMARK_MAIN()
