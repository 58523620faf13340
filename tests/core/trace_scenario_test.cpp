// Trace scenario loading: a good file parses completely, and every kind of bad input is
// rejected with file:line:column and a message that says what is wrong.
#include <catch2/catch.hpp>

#include "core/scenario/trace_scenario.hpp"

using namespace shardcheck::core;

namespace {
const char* kGood = R"(kind: trace
name: good
ranks: 2
streams: [compute, rs]
groups: {dp: [0, 1]}
allocator: {model: caching, reuse: earliest}
schedule: {policy: pct, seed: 3, runs: 7, depth: 2}
program:
  - alloc: {buffer: g, bytes: 4096, stream: compute}
  - kernel: {name: k, stream: compute, writes: [g], reads: [{buffer: g, offset: 0, bytes: 16}]}
  - alloc: {buffer: s, bytes: 2048, stream: rs}
  - collective: {op: reduce_scatter, group: dp, stream: rs, input: g, output: s, reduce: avg}
  - send: {to: 1, buffer: s, stream: rs}
    on: [0]
  - recv: {from: 0, buffer: s, stream: rs}
    on: [1]
  - record: {event: e, stream: rs}
  - wait_event: {stream: compute, event: e}
  - sync: device
  - free: g
expect: {findings: [stream_race], allow: [deadlock]}
)";

// Replaces the first occurrence of `from` in the good file with `to` and loads it.
std::string error_of(const std::string& from, const std::string& to) {
  std::string text = kGood;
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  auto s = parse_trace_scenario(text, "bad.yaml");
  REQUIRE_FALSE(s.ok());
  return s.error().message();
}
}  // namespace

TEST_CASE("a complete trace scenario loads with every field", "[core][scenario]") {
  auto s = parse_trace_scenario(kGood, "good.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE(s->ranks == 2);
  REQUIRE(s->streams == std::vector<std::string>{"compute", "rs"});
  REQUIRE(s->reuse == PoolReuse::earliest);
  REQUIRE(s->schedule.policy == "pct");
  REQUIRE(s->schedule.runs == 7);
  REQUIRE(s->program.size() == 10);
  REQUIRE(s->program[1].reads[0].bytes == 16);
  REQUIRE(s->program[3].reduce == ReduceOp::avg);
  REQUIRE(s->program[3].tag == "g");
  REQUIRE(s->program[4].on == std::vector<int>{0});
  REQUIRE(s->program[8].kind == TraceStep::Kind::sync_device);
  REQUIRE(s->expect.findings == std::vector<FindingKind>{FindingKind::stream_race});
  REQUIRE(s->expect.allow == std::vector<FindingKind>{FindingKind::deadlock});
}

TEST_CASE("bad trace scenarios are rejected at their line and column", "[core][scenario]") {
  struct Case {
    const char* from;
    const char* to;
    const char* says;
  };
  const Case cases[] = {
      {"name: good", "name: good\ncolour: red", "bad.yaml:3:1: unknown key 'colour' in a trace scenario"},
      {"ranks: 2", "ranks: two", "bad.yaml:3:8: ranks must be an integer, not 'two'"},
      {"ranks: 2", "ranks: 0", "bad.yaml:3:8: ranks is 0; it must be between 1 and 256"},
      {"bytes: 4096", "bytes: [1]", "bad.yaml:9:31: bytes must be an integer, not a list"},
      {"stream: compute}\n  - kernel", "stream: cmopute}\n  - kernel",
       "bad.yaml:9:5: undefined stream 'cmopute'"},
      {"input: g,", "input: h,", "bad.yaml:12:68: undefined buffer 'h' on rank 0"},
      {"group: dp", "group: tp", "bad.yaml:12:5: undefined group 'tp'"},
      {"groups: {dp: [0, 1]}", "groups: {dp: [0, 2]}",
       "bad.yaml:5:18: group 'dp': rank 2 is outside the 2 ranks (0..1)"},
      {"groups: {dp: [0, 1]}", "groups: {dp: [1, 0]}\nextra: 1", "unknown key 'extra'"},
      {"bytes: 16}", "bytes: 9000}", "past the end of buffer 'g' (4096 bytes)"},
      {"  - free: g", "  - free: g\n  - kernel: {name: late, stream: compute, reads: [g]}",
       "bad.yaml:21:51: buffer 'g' is used after it was freed on rank 0"},
      {"on: [0]", "on: [5]", "bad.yaml:14:10: on is 5; it must be between 0 and 1"},
      {"to: 1", "to: 0", "rank 0 cannot send to or receive from itself"},
      {"to: 1, buffer", "on: [0], to: 1, buffer",
       "bad.yaml:13:12: `on:` is given twice, here and beside the operation (line 14, column 5); give it "
       "once"},
      {"from: 0, buffer: s, stream: rs}\n    on: [1]", "from: 0, buffer: s, stream: rs, on: [2]}",
       "bad.yaml:15:49: on is 2; it must be between 0 and 1"},
      {"from: 0, buffer: s, stream: rs}\n    on: [1]", "from: 0, buffer: s, stream: rs, on: [1, 1]}",
       "bad.yaml:15:52: rank 1 appears twice in `on:`"},
      {"from: 0, buffer: s, stream: rs}\n    on: [1]", "from: 0, buffer: s, stream: rs, on: 1}",
       "bad.yaml:15:48: on must be a list, not '1'"},
      {"to: 1, buffer", "tow: 1, buffer",
       "unknown key 'tow' in send (expected one of: to, buffer, stream, tag, on)"},
      {"op: reduce_scatter", "op: reduce_scatterr", "unknown collective 'reduce_scatterr'"},
      {"output: s, reduce: avg", "output: g, reduce: avg",
       "input 4096 bytes and output 4096 bytes do not fit"},
      {"[stream_race]", "[stream_racing]", "unknown finding kind 'stream_racing'"},
      {"policy: pct", "policy: fifo", "unknown schedule policy 'fifo'"},
      {"model: caching", "model: buddy", "unknown allocator 'buddy'"},
      {"  - sync: device", "  - synch: device", "bad.yaml:19:5: unknown step 'synch'"},
      {"  - sync: device", "  - sync: {stream: rs, event: e}",
       "bad.yaml:19:11: sync waits for a stream or for an event, not both"},
      {"  - sync: device", "  - sync: {}", "bad.yaml:19:11: sync needs 'stream:' or 'event:'"},
      {"  - sync: device", "  - sync: host",
       "bad.yaml:19:11: sync takes {stream: NAME}, {event: NAME} or the word device"},
      {"  - sync: device", "  - sync: {event: [e]}",
       "bad.yaml:19:19: event must be a name or string, not a list"},
      {"  - sync: device", "  - sync: {event: e, colour: red}",
       "bad.yaml:19:22: unknown key 'colour' in sync (expected one of: stream, event, on)"},
      {"kind: trace", "kind: training_wheels", "expected 'kind: trace'"},
      {"{buffer: g, bytes: 4096, stream: compute}",
       "{buffer: g, bytes: 4096, stream: compute}\n  - alloc: {buffer: g, bytes: 8, stream: rs}",
       "buffer 'g' is already allocated"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.from, c.to);
    INFO(c.to << "\n  -> " << e);
    REQUIRE_THAT(e, Catch::Contains(c.says));
    REQUIRE_THAT(e, Catch::StartsWith("bad.yaml:"));
  }
}

TEST_CASE("a collective on a group without the rank names the rank", "[core][scenario]") {
  std::string text = kGood;
  text.replace(text.find("groups: {dp: [0, 1]}"), 20, "groups: {dp: [0, 1], solo: [1]}");
  text.replace(text.find("group: dp"), 9, "group: solo");
  auto s = parse_trace_scenario(text, "bad.yaml");
  REQUIRE_THAT(s.error().message(), Catch::Contains("bad.yaml:12:5: group 'solo' does not contain rank 0"));
}

TEST_CASE("empty, non-YAML and non-map files are rejected with a position", "[core][scenario]") {
  REQUIRE_THAT(parse_trace_scenario("", "e.yaml").error().message(),
               Catch::StartsWith("e.yaml:1:1: the file is empty"));
  REQUIRE_THAT(parse_trace_scenario("kind: [trace", "e.yaml").error().message(),
               Catch::Contains("not valid YAML"));
  REQUIRE_THAT(parse_trace_scenario("- a\n- b\n", "e.yaml").error().message(),
               Catch::Contains("e.yaml:1:1: a scenario is a YAML map"));
  REQUIRE_THAT(load_trace_scenario("/nonexistent/x.yaml").error().message(),
               Catch::Contains("cannot open the file"));
}

namespace {
// A trace scenario of `ranks` ranks whose program is `steps` (YAML list items, indented).
std::string scenario_with(int ranks, const std::string& steps) {
  return "kind: trace\nname: big\nranks: " + std::to_string(ranks) + "\nstreams: [a]\nprogram:\n" + steps +
         "expect: {findings: []}\n";
}
std::string repeated(const std::string& line, int times) {
  std::string s;
  for (int i = 0; i < times; ++i) s += line;
  return s;
}
}  // namespace

TEST_CASE("trace scenarios past a limit are rejected with the limit and its place named",
          "[core][scenario][limits]") {
  struct Case {
    std::string text;
    const char* says;
  };
  const std::string alloc_g = "  - alloc: {buffer: g, bytes: 64}\n";
  const Case cases[] = {
      {scenario_with(1, repeated("  - sync: device\n", TraceLimits::kMaxProgramSteps + 1)),
       "big.yaml:6:3: the program has 20001 steps; the limit is 20000"},
      {scenario_with(256, repeated("  - sync: device\n", 3907)),
       "big.yaml:6:3: the program runs 1000192 operations over its 256 ranks; the limit is 1000000"},
      {scenario_with(256,
                     alloc_g + repeated("  - kernel: {stream: a, reads: [g, g, g, g, g, g, g, g]}\n", 1954)),
       "the program's kernels make 4001792 reads and writes over its 256 ranks; the limit is 4000000"},
      {scenario_with(1, alloc_g + "  - kernel: {stream: a, reads: [" + repeated("g, ", 64) + "g]}\n"),
       "big.yaml:7:32: reads lists 65 ranges"},
      {scenario_with(1, alloc_g + "  - kernel: {stream: a, reads: [" + repeated("g, ", 40) + "g], writes: [" +
                            repeated("g, ", 30) + "g]}\n"),
       "big.yaml:7:13: the kernel has 72 reads and writes; the limit is 64"},
      {scenario_with(5, "  - alloc: {buffer: g, bytes: 1073741824}\n"),
       "big.yaml:6:5: with this allocation on rank 4 the ranks hold 5368709120 bytes of device memory in "
       "all; the simulator models at most 4294967296 bytes"},
      {scenario_with(1,
                     "  - alloc: {buffer: g, bytes: 1073741824}\n  - alloc: {buffer: h, bytes: 1073741824}\n "
                     " - free: g\n"
                     "  - alloc: {buffer: i, bytes: 1073741824}\n  - alloc: {buffer: j, bytes: 1073741824}\n"
                     "  - alloc: {buffer: k, bytes: 1073741824}\n  - alloc: {buffer: l, bytes: 1}\n"),
       "big.yaml:12:5: with this allocation the ranks hold 4294967297 bytes"},
      {scenario_with(1, "  - alloc: {buffer: " + std::string(257, 'x') + ", bytes: 8}\n"),
       "big.yaml:6:21: buffer is 257 bytes long; names are at most 256 bytes"},
      {scenario_with(2, "  - sync: device\n    on: [1, 1]\n"),
       "big.yaml:7:13: rank 1 appears twice in `on:`"},
      {scenario_with(2, "  - sync: device\n    on: []\n"),
       "big.yaml:7:9: `on:` lists the ranks that run this step"},
      {scenario_with(1, "  - sync: device\n") + "description: " + std::string(size_t{1} << 20, 'x') + "\n",
       "big.yaml:1:1: the file is larger than 1048576 bytes (1 MiB), the limit for scenario files"},
  };
  for (const Case& c : cases) {
    auto s = parse_trace_scenario(c.text, "big.yaml");
    REQUIRE_FALSE(s.ok());
    INFO(s.error().message());
    REQUIRE_THAT(s.error().message(), Catch::Contains(c.says));
  }
}

TEST_CASE("a rank has up to 64 streams, and the 65th is refused where the list is",
          "[core][scenario][limits]") {
  auto with_streams = [](int n) {
    std::string list;
    for (int i = 0; i < n; ++i) list += (i ? ", s" : "s") + std::to_string(i);
    return "kind: trace\nname: many\nranks: 1\nstreams: [" + list +
           "]\nprogram:\n  - sync: device\nexpect: {findings: []}\n";
  };
  auto ok = parse_trace_scenario(with_streams(TraceLimits::kMaxStreams), "many.yaml");
  INFO((ok.ok() ? "" : ok.error().message()));
  REQUIRE(TraceLimits::kMaxStreams == 64);
  REQUIRE(ok.ok());
  REQUIRE(ok->streams.size() == 64);
  auto bad = parse_trace_scenario(with_streams(TraceLimits::kMaxStreams + 1), "many.yaml");
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.error().message(), Catch::Contains("many.yaml:4:10: at most 64 streams per rank"));
}

TEST_CASE("the bytes a schedule and a file's schedules touch are bounded at load",
          "[core][scenario][limits]") {
  const std::string big = "  - alloc: {buffer: g, bytes: 1073741824}\n";
  const std::string writes64 = "[" + repeated("g, ", 63) + "g]";
  // 140 KB of aliases within every other limit: 19 999 kernels writing 1 GiB 64 times, weeks
  // of work per schedule.
  const std::string hostile =
      scenario_with(1, big + "  - kernel: &k {name: k, stream: a, writes: " + writes64 + "}\n" +
                           repeated("  - kernel: *k\n", 19998));
  REQUIRE(hostile.size() < 1 << 20);
  auto h = parse_trace_scenario(hostile, "big.yaml");
  REQUIRE_FALSE(h.ok());
  REQUIRE_THAT(h.error().message(),
               Catch::Contains("big.yaml:6:3: the program touches 1374320815243264 bytes per schedule") &&
                   Catch::Contains("the limit is 68719476736 (64 GiB)"));
  // A collective's input and output count on every rank that runs it.
  auto c = parse_trace_scenario(
      "kind: trace\nname: c\nranks: 2\nstreams: [a]\ngroups: {dp: [0, 1]}\nprogram:\n"
      "  - alloc: {buffer: g, bytes: 1073741824}\n" +
          repeated("  - collective: {op: all_reduce, group: dp, input: g, output: g, stream: a}\n", 17) +
          "expect: {findings: []}\n",
      "c.yaml");
  REQUIRE_FALSE(c.ok());
  REQUIRE_THAT(c.error().message(), Catch::Contains("touches 73014444032 bytes per schedule"));
  // One kernel writing 1 GiB 64 times is exactly the bound: it loads, once.
  const std::string at_bound =
      scenario_with(1, big + "  - kernel: {name: k, stream: a, writes: " + writes64 + "}\n");
  auto ok = parse_trace_scenario(at_bound, "ok.yaml");
  INFO((ok.ok() ? "" : ok.error().message()));
  REQUIRE(ok.ok());
  REQUIRE(ok->bytes_per_run == TraceLimits::kMaxBytesPerRun);
  // Its schedules together are bounded too: four fit, five do not.
  REQUIRE(trace_bytes_exceeded(ok->bytes_per_run, 4).ok());
  REQUIRE_THAT(trace_bytes_exceeded(ok->bytes_per_run, 5).message(),
               Catch::Contains("5 schedules of 68719476736 bytes each touch more than 274877906944 bytes"));
  auto five = parse_trace_scenario("schedule: {runs: 5}\n" + at_bound, "five.yaml");
  REQUIRE_FALSE(five.ok());
  REQUIRE_THAT(five.error().message(), Catch::Contains("five.yaml:7:3: the file's 5 runs: 5 schedules"));
}

TEST_CASE("the device memory check counts the blocks the caching allocator keeps per stream",
          "[core][scenario][limits]") {
  // Each stream's 1 GiB block, freed, stays in that stream's pool: at most 1 GiB is live, yet
  // the fifth stream's allocation makes the fifth segment, past the simulator's 4 GiB.
  auto program = [](const std::string& allocator, bool one_stream) {
    std::string text =
        "kind: trace\nname: pools\nranks: 1\nstreams: [a, b, c, d, e]\nallocator: " + allocator +
        "\nprogram:\n";
    for (const char* st : {"a", "b", "c", "d", "e"}) {
      text += "  - alloc: {buffer: x, bytes: 1073741824, stream: " + std::string(one_stream ? "a" : st) +
              "}\n  - free: x\n";
    }
    return text + "expect: {findings: []}\n";
  };
  auto pools = parse_trace_scenario(program("caching", false), "pools.yaml");
  REQUIRE_FALSE(pools.ok());
  REQUIRE_THAT(pools.error().message(),
               Catch::StartsWith("pools.yaml:15:5: with this allocation the ranks hold 5368709120 bytes") &&
                   Catch::Contains("the free blocks the allocator keeps for the stream that allocated them"));
  // cudaMallocAsync's pools (stream_ordered) hand a block to another stream only once its free
  // is ordered before that stream, and nothing here orders it.
  REQUIRE_FALSE(parse_trace_scenario(program("stream_ordered", false), "ordered.yaml").ok());
  // One stream reuses its own block, under either model.
  for (const char* allocator : {"caching", "stream_ordered"}) {
    auto one = parse_trace_scenario(program(allocator, true), "one.yaml");
    INFO((one.ok() ? "" : one.error().message()));
    REQUIRE(one.ok());
  }
}

TEST_CASE("a program at the limits loads, and the freed bytes of a rank are not counted twice",
          "[core][scenario][limits]") {
  // 4 ranks hold 1 GiB each at most: exactly the 4 GiB the simulator models.
  auto s = parse_trace_scenario(scenario_with(4,
                                              "  - alloc: {buffer: g, bytes: 1073741824}\n  - free: g\n"
                                              "  - alloc: {buffer: h, bytes: 1073741824}\n"),
                                "ok.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  auto t = parse_trace_scenario(
      scenario_with(1, repeated("  - sync: device\n", TraceLimits::kMaxProgramSteps)), "ok.yaml");
  REQUIRE(t.ok());
}

TEST_CASE("integers are decimal or 0x hexadecimal and a leading zero is not octal", "[core][scenario]") {
  auto s = parse_trace_scenario(
      scenario_with(1, "  - alloc: {buffer: g, bytes: 010}\n  - alloc: {buffer: h, bytes: 0x10}\n"),
      "n.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE(s->program[0].bytes == 10);
  REQUIRE(s->program[1].bytes == 16);
  auto bad = parse_trace_scenario(scenario_with(1, "  - alloc: {buffer: g, bytes: 1e3}\n"), "n.yaml");
  REQUIRE_THAT(bad.error().message(), Catch::Contains("n.yaml:6:31: bytes must be an integer, not '1e3'"));
}

TEST_CASE("steps with on: run on their ranks in any order of the list", "[core][scenario]") {
  auto s = parse_trace_scenario(scenario_with(3, "  - sync: device\n    on: [2, 0]\n"), "on.yaml");
  REQUIRE(s.ok());
  REQUIRE(s->program[0].on == std::vector<int>{0, 2});
  REQUIRE(s->runs_on(s->program[0], 0));
  REQUIRE_FALSE(s->runs_on(s->program[0], 1));
  REQUIRE(s->runs_on(s->program[0], 2));
}

TEST_CASE("on: may be written inside the operation's map as well as beside it", "[core][scenario]") {
  // The form a new user tried first; it used to be rejected with "unknown key 'on'".
  std::string text = scenario_with(
      3,
      "  - alloc: {buffer: g, bytes: 64, on: [2, 0]}\n"
      "  - collective: {op: all_reduce, group: all, stream: a, input: g, output: g, on: [0, 2]}\n"
      "  - sync: {stream: a, on: [1]}\n"
      "  - free: {buffer: g, on: [0, 2]}\n");
  text.replace(text.find("program:"), 8, "groups: {all: [0, 2]}\nprogram:");
  auto t = parse_trace_scenario(text, "on.yaml");
  INFO((t.ok() ? "" : t.error().message()));
  REQUIRE(t.ok());
  REQUIRE(t->program[0].on == std::vector<int>{0, 2});
  REQUIRE(t->program[1].on == std::vector<int>{0, 2});
  REQUIRE(t->program[2].on == std::vector<int>{1});
  REQUIRE(t->program[2].stream == "a");
  REQUIRE(t->program[3].on == std::vector<int>{0, 2});
}

TEST_CASE("a wait on an event with no record yet loads, as CUDA runs it", "[core][scenario]") {
  // cudaStreamWaitEvent on an event without a record does nothing, and a record after the
  // wait does not reach back to it: the race that follows is the finding, not bad input.
  const char* programs[] = {
      "  - wait_event: {stream: a, event: never}\n",                                 // never recorded
      "  - wait_event: {stream: a, event: e}\n  - record: {event: e, stream: b}\n",  // recorded later
      ("  - record: {event: e, stream: b}\n  - wait_event: {stream: a, event: e}\n"
       "  - record: {event: e, stream: b}\n"),  // recorded again
      "  - record: {event: e, stream: b}\n    on: [1]\n  - wait_event: {stream: a, event: e}\n",  // on
                                                                                                  // another
                                                                                                  // rank only
  };
  for (const char* p : programs) {
    std::string text = scenario_with(2, p);
    text.replace(text.find("streams: [a]"), 12, "streams: [a, b]");
    auto s = parse_trace_scenario(text, "w.yaml");
    INFO(p << (s.ok() ? "" : s.error().message()));
    REQUIRE(s.ok());
  }
}

TEST_CASE("sync with an event is the host waiting for that event", "[core][scenario]") {
  auto s = parse_trace_scenario(
      scenario_with(1,
                    "  - record: {event: done, stream: a}\n  - sync: {event: done}\n"
                    "  - sync: {event: never}\n  - sync: {stream: a}\n  - sync: device\n"),
      "s.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE(s->program[1].kind == TraceStep::Kind::sync_event);
  REQUIRE(s->program[1].event == "done");
  REQUIRE(s->program[1].stream.empty());
  REQUIRE(s->program[2].kind == TraceStep::Kind::sync_event);  // never recorded: a no-op, as in CUDA
  REQUIRE(s->program[3].kind == TraceStep::Kind::sync);
  REQUIRE(s->program[3].stream == "a");
  REQUIRE(s->program[4].kind == TraceStep::Kind::sync_device);
}

TEST_CASE("a schedule whose seeds would pass 2^63-1 is refused: replay could not repeat the last runs",
          "[core][scenario][limits]") {
  REQUIRE_THAT(
      error_of("seed: 3, runs: 7", "seed: 9223372036854775802, runs: 7"),
      Catch::StartsWith("bad.yaml:7:31: schedule: 7 runs from seed 9223372036854775802 would use seeds up to "
                        "9223372036854775808, past the largest seed, 2^63-1 (9223372036854775807)"));
  std::string top = kGood;
  top.replace(top.find("seed: 3, runs: 7"), 16, "seed: 9223372036854775801, runs: 7");
  REQUIRE(parse_trace_scenario(top, "top.yaml").ok());  // its last run has seed 2^63-1
  REQUIRE(schedule_seeds_exceeded(0, ScheduleLimits::kMaxRuns).ok());
  REQUIRE_THAT(schedule_seeds_exceeded(uint64_t{1} << 63, 1).message(),
               Catch::Contains("seed 9223372036854775808 is past"));
}

TEST_CASE("a trace file without expect loads, stating nothing", "[core][scenario]") {
  auto s = parse_trace_scenario(
      "kind: trace\nname: open\nranks: 1\nstreams: [a]\nprogram:\n  - sync: device\n", "open.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE_FALSE(s->expect.given);
  REQUIRE(s->expect.findings.empty());
}
