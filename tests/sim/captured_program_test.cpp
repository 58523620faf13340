// Captured programs on the simulator: the fixtures' findings with their Python lines under every
// policy, shadow-only runs that change nothing but the bytes, and the collectives only captured
// programs issue (reduce, all_to_all, barrier).
#include <unistd.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <span>

#include "core/base/rng.hpp"
#include "run/scenario_run.hpp"
#include "sim/explore.hpp"
#include "sim/world.hpp"

using namespace shardcheck;
using core::CollectiveKind;
using core::DType;
using core::Runtime;
using core::Task;
using core::TensorRef;

namespace {

std::string fixture(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/fixtures/" + name;
}

// A captured program's folder, checked over `runs` schedules.
run::ScenarioOutcome run_folder(const std::string& dir, const char* policy = nullptr, int runs = 20) {
  auto s = run::load_scenario(dir);
  REQUIRE(s.ok());
  REQUIRE(s->kind() == "capture");
  REQUIRE_FALSE(s->options.values);
  run::ScheduleOverrides o;
  if (policy) o.policy = policy;
  o.runs = runs;
  auto out = run::run_scenario(*s, o);
  REQUIRE(out.explored.error.empty());
  return out;
}

run::ScenarioOutcome run_fixture(const std::string& name, const char* policy = nullptr, int runs = 20) {
  return run_folder(fixture(name), policy, runs);
}

}  // namespace

TEST_CASE(
    "the Megatron reuse race names its Python lines and the record_stream fix is clean, under every policy",
    "[sim][capture]") {
  for (const char* policy : {"in_order", "random", "pct", "delay_comm"}) {
    INFO(policy);
    const auto bug = run_fixture("megatron-6137", policy, 10);
    REQUIRE(bug.explored.findings.size() == 1);
    const core::Finding& f = bug.explored.findings[0];
    REQUIRE(f.kind == core::FindingKind::stream_race);
    const auto& d = std::get<core::RaceDetail>(f.detail);
    REQUIRE(d.reuse);
    REQUIRE(d.first.op == "reduce_scatter 'grad' at train.py:37");
    REQUIRE(d.first.buffer == "tensor allocated at train.py:31");
    REQUIRE(d.second.op == "aten::normal_ at train.py:42");
    REQUIRE(d.second.buffer == "tensor allocated at train.py:41");
    REQUIRE_THAT(f.explanation, Catch::Contains("freed at train.py:38"));
    REQUIRE_THAT(f.explanation, Catch::Contains("work.wait()"));
    REQUIRE_THAT(f.explanation, Catch::Contains("record_stream"));
    REQUIRE_THAT(f.explanation, Catch::Contains("keep a reference to the tensor allocated at train.py:31"));
    const auto fixed = run_fixture("megatron-6137-fixed", policy, 10);
    REQUIRE(fixed.explored.findings.empty());
    REQUIRE(fixed.judged.met);
  }
}

TEST_CASE("collective mismatches and swaps of captured programs name each rank's line", "[sim][capture]") {
  const auto mismatch = run_fixture("mismatch-dtype");
  REQUIRE(mismatch.explored.findings.size() == 1);
  REQUIRE(mismatch.explored.findings[0].kind == core::FindingKind::collective_mismatch);
  REQUIRE_THAT(mismatch.explored.findings[0].explanation,
               Catch::Contains("rank 1: all_reduce 'grad' at train.py:20  [all_reduce bf16"));
  const auto swap = run_fixture("order-swap");
  REQUIRE(swap.explored.findings.size() == 1);
  REQUIRE(swap.explored.findings[0].kind == core::FindingKind::collective_swap);
  REQUIRE_THAT(swap.explored.findings[0].explanation,
               Catch::Contains("all_reduce 'bias.grad' at train.py:31"));
  REQUIRE_FALSE(swap.judged.met);
}

TEST_CASE("a shadow-only run of every trace scenario repeats its digests and findings", "[sim][capture]") {
  std::vector<std::string> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace")) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  REQUIRE(files.size() >= 12);
  for (const auto& file : files) {
    auto s = run::load_scenario(file);
    REQUIRE(s.ok());
    sim::ExploreOptions o;
    o.base = s->options;
    o.base.seed = 3;
    o.runs = 4;
    const auto valued = sim::explore(s->factory, o);
    o.base.values = false;
    const auto shadow = sim::explore(s->factory, o);
    INFO(file);
    REQUIRE(valued.digests == shadow.digests);
    REQUIRE(valued.findings.size() == shadow.findings.size());
    for (size_t i = 0; i < valued.findings.size(); ++i) {
      REQUIRE(valued.findings[i].key == shadow.findings[i].key);
      REQUIRE(valued.findings[i].explanation == shadow.findings[i].explanation);
    }
  }
}

namespace {

// Two ranks, one group; `body` issues on rank r with buffers x (in) and y (out) of 64 bytes.
sim::RunResult two_ranks(
    const std::function<Task<>(Runtime&, core::GroupId, core::BufferId, core::BufferId)>& body, bool values) {
  sim::Options o;
  o.ranks = 2;
  o.values = values;
  o.seed = 5;
  sim::World w(o);
  return w.run([&](Runtime& rt) -> Task<> {
    const core::StreamId s = rt.stream("default");
    const std::vector<int> members{0, 1};
    const core::GroupId g = rt.group("world", members);
    const core::BufferId x = co_await rt.alloc(64, s, "x");
    const core::BufferId y = co_await rt.alloc(64, s, "y");
    co_await rt.launch(core::kernels::opaque("init", s, {}, {TensorRef::bytes_of(x, 0, 64)}));
    co_await body(rt, g, x, y);
  });
}

bool has(const sim::RunResult& r, core::FindingKind k) {
  return std::any_of(r.findings.begin(), r.findings.end(), [&](const auto& f) { return f.kind == k; });
}

}  // namespace

TEST_CASE("reduce writes only the root output, and reading it elsewhere is an uninitialized read",
          "[sim][capture]") {
  for (bool values : {true, false}) {
    auto r = two_ranks(
        [](Runtime& rt, core::GroupId g, core::BufferId x, core::BufferId y) -> Task<> {
          const core::StreamId s = rt.stream("default");
          co_await rt.collective({CollectiveKind::reduce, g, s, TensorRef{x, 0, 16, DType::f32},
                                  TensorRef{y, 0, 16, DType::f32}, core::ReduceOp::max, 1, "r"});
          co_await rt.launch(core::kernels::opaque("use", s, {TensorRef::bytes_of(y, 0, 64)}, {}));
          co_await rt.sync_device();
        },
        values);
    INFO(values);
    REQUIRE(r.error.empty());
    REQUIRE(r.completed);
    REQUIRE(r.findings.size() == 1);
    REQUIRE(r.findings[0].kind == core::FindingKind::uninitialized_read);
    REQUIRE_THAT(r.findings[0].summary, Catch::StartsWith("rank 0:"));
  }
}

TEST_CASE("all_to_all and barrier complete and order their members", "[sim][capture]") {
  for (bool values : {true, false}) {
    auto r = two_ranks(
        [](Runtime& rt, core::GroupId g, core::BufferId x, core::BufferId y) -> Task<> {
          const core::StreamId s = rt.stream("default");
          co_await rt.collective({CollectiveKind::all_to_all, g, s, TensorRef{x, 0, 32, DType::f16},
                                  TensorRef{y, 0, 32, DType::f16}, core::ReduceOp::sum, 0, "a2a"});
          co_await rt.collective({CollectiveKind::barrier, g, s, TensorRef{-1, 0, 0, DType::u8},
                                  TensorRef{-1, 0, 0, DType::u8}, core::ReduceOp::sum, 0, ""});
          co_await rt.launch(core::kernels::opaque("use", s, {TensorRef::bytes_of(y, 0, 64)}, {}));
          co_await rt.sync_device();
        },
        values);
    INFO(values);
    REQUIRE(r.error.empty());
    REQUIRE(r.completed);
    REQUIRE(r.findings.empty());
  }
}

TEST_CASE("a reduce with different roots, or a barrier against an all_reduce, is a mismatch",
          "[sim][capture]") {
  auto r = two_ranks(
      [](Runtime& rt, core::GroupId g, core::BufferId x, core::BufferId y) -> Task<> {
        const core::StreamId s = rt.stream("default");
        co_await rt.collective({CollectiveKind::reduce, g, s, TensorRef{x, 0, 16, DType::f32},
                                TensorRef{y, 0, 16, DType::f32}, core::ReduceOp::product, rt.rank(), "r"});
      },
      false);
  REQUIRE(has(r, core::FindingKind::collective_mismatch));
  REQUIRE_THAT(r.findings[0].explanation, Catch::Contains("reduce f32 16->16 product root 0"));
  auto b = two_ranks(
      [](Runtime& rt, core::GroupId g, core::BufferId x, core::BufferId) -> Task<> {
        const core::StreamId s = rt.stream("default");
        if (rt.rank() == 0) {
          co_await rt.collective({CollectiveKind::barrier, g, s, TensorRef{-1, 0, 0, DType::u8},
                                  TensorRef{-1, 0, 0, DType::u8}, core::ReduceOp::sum, 0, ""});
        } else {
          co_await rt.collective({CollectiveKind::all_reduce, g, s, TensorRef{x, 0, 16, DType::f32},
                                  TensorRef{x, 0, 16, DType::f32}, core::ReduceOp::sum, 0, ""});
        }
      },
      false);
  REQUIRE(b.error.empty());
  REQUIRE(has(b, core::FindingKind::collective_mismatch));
}

TEST_CASE("a block the caching allocator coalesced from two freed ones races with both", "[sim][capture]") {
  // Two 4 MiB buckets side by side in one 20 MiB segment, all-reduced on a side stream and
  // freed without record_stream; an 8 MiB activation takes the merged block at the first
  // bucket's address (examples/pytorch/coalesced_reuse.py, as the H200 placed it).
  auto sites = [](const run::ScenarioOutcome& o) {
    std::vector<std::string> out;
    for (const auto& f : o.explored.findings) {
      REQUIRE(f.kind == core::FindingKind::stream_race);
      out.push_back(f.summary.substr(0, f.summary.find(';')));
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::vector<std::string> both = {
      "rank 0: the tensor allocated at coalesced_reuse.py:30 is freed at coalesced_reuse.py:40 while "
      "all_reduce '' "
      "at coalesced_reuse.py:34 on stream 'side' may still write it",
      "rank 0: the tensor allocated at coalesced_reuse.py:31 is freed at coalesced_reuse.py:40 while "
      "all_reduce '' "
      "at coalesced_reuse.py:35 on stream 'side' may still write it"};
  // From the recorded addresses: exactly what the allocator did.
  const auto placed = run_fixture("coalesced-reuse");
  CHECK(sites(placed) == both);
  REQUIRE_THAT(placed.explored.findings[0].summary, Catch::Contains("allocated at coalesced_reuse.py:41"));
  // Without them, from PyTorch's segment geometry: the two 4 MiB blocks share a 20 MiB
  // segment and merge (one 256 KiB-step segment each would never merge, and miss both).
  CHECK(sites(run_fixture("coalesced-reuse-noaddr")) == both);
  // record_stream holds both blocks back: the activation gets the segment's tail.
  CHECK(run_fixture("coalesced-reuse-fix").explored.findings.empty());
}

TEST_CASE(
    "under cudaMallocAsync a free is stream-ordered: the reuse race is one finding, record_stream fixes it",
    "[sim][capture]") {
  // grad_reuse_race.py under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: torch reports no
  // free, so the capture frees the gradient where the next storage appears at its address.
  const auto bug = run_fixture("grad-reuse-async");
  REQUIRE(bug.explored.findings.size() == 1);
  const core::Finding& f = bug.explored.findings[0];
  REQUIRE(f.kind == core::FindingKind::stream_race);
  REQUIRE_THAT(f.summary,
               Catch::Contains("is freed at grad_reuse_race.py:37 while aten::mul at grad_reuse_race.py:32"));
  REQUIRE_THAT(f.explanation, Catch::Contains("cudaMallocAsync frees it on stream 'default'"));
  // The free itself races with the side stream's read: the same root, folded under it.
  REQUIRE(f.spread.symptoms.size() == 1);
  REQUIRE_THAT(f.spread.symptoms[0], Catch::Contains("(the free itself)"));
  // record_stream makes the free wait for the side stream (a false alarm when the capture
  // took the new tensor for the old one).
  REQUIRE(run_fixture("grad-reuse-async-fix").explored.findings.empty());
}

TEST_CASE("a prefetch thread's wait orders only the threads that take its batch after that wait",
          "[sim][capture]") {
  // examples/pytorch/thread_prefetch.py at one rank: the prefetch thread copies each batch on its
  // own stream, puts it into the queue, then waits for the copy; it runs two batches ahead.
  const auto bug = run_fixture("thread-prefetch");
  REQUIRE(bug.explored.findings.size() == 1);
  const core::Finding& f = bug.explored.findings[0];
  REQUIRE(f.kind == core::FindingKind::stream_race);
  REQUIRE_THAT(f.summary,
               Catch::StartsWith("rank 0: aten::mm at thread_prefetch.py:47 on stream 'default' reads "
                                 "the tensor allocated at thread_prefetch.py:28 while aten::copy_ at "
                                 "thread_prefetch.py:28"));
  const auto& d = std::get<core::RaceDetail>(f.detail);
  REQUIRE_THAT(d.missing_edge, Catch::Contains("the program's main thread never syncs with"));
  REQUIRE_THAT(d.missing_edge,
               Catch::Contains("host thread 'prefetch' waits for 'stream from thread_prefetch.py:25' "
                               "after aten::copy_ at thread_prefetch.py:28, but nothing orders "
                               "that wait before aten::mm at thread_prefetch.py:47"));
  REQUIRE_THAT(
      d.fixes.at(0),
      Catch::StartsWith("on host thread 'prefetch', hand the tensor allocated at "
                        "thread_prefetch.py:28 over (queue put, Event set, lock release) only after"));
  // The same records on one host timeline: the prefetcher's wait, written before the multiply,
  // would order it, and the race would be missed.
  const std::string one =
      (std::filesystem::temp_directory_path() / ("shardcheck-one-timeline-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(one);
  {
    std::ifstream in(fixture("thread-prefetch") + "/rank-0.jsonl");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"k\": \"thread\"") == std::string::npos &&
          line.find("\"k\": \"host_") == std::string::npos)
        lines.push_back(line);
    }
    lines.back() = "{\"k\": \"end\", \"records\": " + std::to_string(lines.size() - 2) + "}";
    std::ofstream out(one + "/rank-0.jsonl");
    for (const auto& line : lines) out << line << "\n";
  }
  REQUIRE(run_folder(one).explored.findings.empty());
  std::filesystem::remove_all(one);
  // Waiting for the copy before the put orders the multiply; the third batch takes the first
  // one's block back from the program's thread, after its record_stream uses: clean.
  REQUIRE(run_fixture("thread-prefetch-fix").explored.findings.empty());
}

TEST_CASE("two branches of one CUDA graph race at every replay unless the capture ordered them",
          "[sim][capture]") {
  // examples/pytorch/graph_branches.py at one rank: the side branch forks from the capture
  // stream before the projection it reads is written; the capture keeps the graph's own events
  // and replays a side stream's kernels on a stream of the graph's own.
  const auto bug = run_fixture("graph-branches");
  REQUIRE(bug.explored.findings.size() == 1);
  const core::Finding& f = bug.explored.findings[0];
  REQUIRE(f.kind == core::FindingKind::stream_race);
  REQUIRE(
      f.summary ==
      "rank 0: aten::linalg_vector_norm at graph_branches.py:46 on stream 'stream from graph_branches.py:25 "
      "of "
      "the graph replayed at graph_branches.py:46' reads the tensor allocated at graph_branches.py:36 while "
      "aten::mm at graph_branches.py:46 on stream 'default' may still write it");
  const auto& d = std::get<core::RaceDetail>(f.detail);
  REQUIRE(d.fixes.size() == 1);
  REQUIRE_THAT(d.fixes[0],
               Catch::StartsWith("both run inside the CUDA graph replayed at graph_branches.py:46: "
                                 "where it was captured, make the stream that reads wait"));
  // Forked after the projection: clean, replay after replay.
  REQUIRE(run_fixture("graph-branches-fix").explored.findings.empty());
}

TEST_CASE("a side-stream race, a read of torch.empty memory and a p2p deadlock speak PyTorch",
          "[sim][capture]") {
  const auto race = run_fixture("side-stream-race");
  REQUIRE_FALSE(race.explored.findings.empty());
  const core::Finding& f = race.explored.findings[0];
  REQUIRE(f.kind == core::FindingKind::stream_race);
  REQUIRE_THAT(f.summary,
               Catch::Contains("aten::add_ at opt.py:24 on stream 'side' reads the tensor allocated at "
                               "opt.py:20 while aten::mm at opt.py:21"));
  REQUIRE_THAT(f.explanation, Catch::Contains("wait_stream"));
  const auto uninit = run_fixture("uninit-empty");
  REQUIRE(uninit.explored.findings.size() == 1);
  REQUIRE(uninit.explored.findings[0].kind == core::FindingKind::uninitialized_read);
  REQUIRE_THAT(uninit.explored.findings[0].explanation,
               Catch::Contains("torch.zeros instead of torch.empty"));
  // A copy carries never-written bytes along without using them (padding copied whole): the
  // read that uses them is the finding, at its line, not the copy; it names where the bytes
  // came from (the padded buffer) and the copy that first read them, and is keyed by those.
  const auto copied = run_fixture("uninit-copied");
  REQUIRE(copied.explored.findings.size() == 1);
  REQUIRE(copied.explored.findings[0].kind == core::FindingKind::uninitialized_read);
  REQUIRE_THAT(
      copied.explored.findings[0].summary,
      Catch::Contains("aten::sum at pad.py:10 reads 512 bytes of 'tensor allocated at pad.py:7' (first "
                      "at byte 512) computed from never-written bytes of 'tensor allocated at pad.py:5', "
                      "first read by aten::copy_ at pad.py:8"));
  REQUIRE(copied.explored.findings[0].key == "uninit|pad.py:8|tensor allocated at pad.py:5");
  // Elementwise operators over operands of one size carry them too (a gradient accumulated into
  // a buffer whose padding nobody wrote, then divided in place): the norm that reads them is
  // the finding. An add_ with an operand of another size (a broadcast) is opaque, and uses them.
  const auto accumulated = run_fixture("uninit-accumulated");
  REQUIRE(accumulated.explored.findings.size() == 2);
  std::vector<std::string> summaries;
  for (const auto& f : accumulated.explored.findings) {
    REQUIRE(f.kind == core::FindingKind::uninitialized_read);
    summaries.push_back(f.summary);
  }
  std::sort(summaries.begin(), summaries.end());
  REQUIRE_THAT(summaries[0], Catch::Contains("aten::add_ at acc.py:13 reads 1024 never-written bytes"));
  REQUIRE_THAT(summaries[1],
               Catch::Contains("aten::norm at acc.py:11 reads 512 never-written bytes of 'tensor "
                               "allocated at acc.py:5' (first at byte 512)"));
  const auto deadlock = run_fixture("p2p-deadlock");
  REQUIRE(deadlock.explored.findings.size() == 1);
  REQUIRE(deadlock.explored.findings[0].kind == core::FindingKind::deadlock);
  REQUIRE_THAT(deadlock.explored.findings[0].explanation, Catch::Contains("send 'act' to 1 at pipe.py:14"));
  REQUIRE_THAT(deadlock.explored.findings[0].explanation, Catch::Contains("dist.batch_isend_irecv"));
}

TEST_CASE(
    "captured point to point runs as its backend runs it: gloo's ring is clean, receiving first deadlocks",
    "[sim][capture]") {
  // examples/pytorch/p2p_ring.py on CPU over gloo (docs/p2p.md): each isend and irecv progresses
  // on a stream of its own until its wait, and a send is done only once its peer has posted the
  // receive. The ring ran to the end with the values it passes (the program says so), so it is
  // clean under every policy, at 2 and 4 ranks.
  for (const char* policy : {"in_order", "random", "pct", "delay_comm"}) {
    INFO(policy);
    for (const char* ring : {"p2p-ring-2", "p2p-ring-4"}) {
      INFO(ring);
      const auto out = run_fixture(ring, policy, 10);
      REQUIRE(out.explored.findings.empty());
      REQUIRE(out.judged.met);
    }
    // Every rank's blocking dist.recv first: it hung until the capture's timeout.
    const auto hang = run_fixture("p2p-recv-first-2", policy, 10);
    REQUIRE(hang.explored.findings.size() == 1);
    const core::Finding& f = hang.explored.findings[0];
    REQUIRE(f.kind == core::FindingKind::deadlock);
    REQUIRE_THAT(f.explanation,
                 Catch::Contains("rank 0 gloo recv from 1: recv from 1 at examples/pytorch/p2p_ring.py:54\n"
                                 "      waits for rank 1 to issue the matching send"));
    REQUIRE_THAT(f.explanation,
                 Catch::Contains("rank 1 gloo recv from 0: recv from 0 at examples/pytorch/p2p_ring.py:54\n"
                                 "      waits for rank 0 to issue the matching send"));
    REQUIRE_THAT(f.explanation,
                 Catch::Contains("rank 0 host: waiting for a host sync on stream 'gloo recv from 1', "
                                 "behind recv from 1 at examples/pytorch/p2p_ring.py:54"));
    REQUIRE_FALSE(hang.judged.met);
  }
}

TEST_CASE("in a captured program, a transfer's tensor used before its request's wait races with the transfer",
          "[sim][capture]") {
  // The read of an irecv's tensor before its wait saw the old values in some runs and the new
  // ones in others; the isend's tensor refilled before its wait reached the peer in some runs
  // and not in others (docs/p2p.md). Each is one race naming both lines; waiting first is clean.
  struct Case {
    const char *bug, *fix, *transfer, *access, *verb;
  };
  for (const Case& c : {Case{"p2p-read-early-2", "p2p-read-early-fix-2", "recv from ",
                             "aten::clone at examples/pytorch/p2p_ring.py:38", "dist.irecv"},
                        Case{"p2p-write-early-2", "p2p-write-early-fix-2", "send to ",
                             "aten::fill_ at examples/pytorch/p2p_ring.py:40", "dist.isend"}}) {
    INFO(c.bug);
    const auto bug = run_fixture(c.bug);
    REQUIRE(bug.explored.findings.size() == 1);
    const core::Finding& f = bug.explored.findings[0];
    REQUIRE(f.kind == core::FindingKind::stream_race);
    const auto& d = std::get<core::RaceDetail>(f.detail);
    REQUIRE_THAT(d.first.op, Catch::StartsWith(c.transfer));
    const std::string line = std::string(c.transfer[0] == 'r' ? ":35" : ":34");
    REQUIRE_THAT(d.first.op, Catch::EndsWith("at examples/pytorch/p2p_ring.py" + line));
    REQUIRE(d.first.stream.rfind("gloo ", 0) == 0);
    REQUIRE(d.second.op == c.access);
    REQUIRE(d.second.stream == "default");
    REQUIRE_THAT(d.fixes.at(0),
                 Catch::StartsWith("call wait() on the request of " + std::string(c.transfer)));
    REQUIRE_THAT(d.fixes.at(0), Catch::Contains(c.verb));
    REQUIRE(run_fixture(c.fix).explored.findings.empty());
  }
}

TEST_CASE("a captured NCCL batch's transfers progress together: the exchange that deadlocks alone does not",
          "[sim][capture]") {
  // p2p-deadlock's exchange (both ranks send, then receive, on one stream) as one
  // batch_isend_irecv: one NCCL group call, whose sends and receives NCCL progresses together
  // (what NCCL documents for ncclGroupStart/ncclGroupEnd). The capture gives each transfer of a
  // batch a stream of its own, forked from the batch's and joined back before its end event.
  for (const char* policy : {"in_order", "random", "pct", "delay_comm"}) {
    INFO(policy);
    REQUIRE(run_fixture("p2p-batch", policy, 10).explored.findings.empty());
    const auto alone = run_fixture("p2p-deadlock", policy, 10);
    REQUIRE(alone.explored.findings.size() == 1);
    REQUIRE(alone.explored.findings[0].kind == core::FindingKind::deadlock);
  }
}

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace

TEST_CASE("mutated capture folders are refused with a file and line, or run without an internal error",
          "[sim][capture]") {
  namespace fs = std::filesystem;
  core::Rng rng(20261201);
  const std::vector<std::string> fixtures = {
      "megatron-6137",    "megatron-6137-fixed", "mismatch-dtype",  "order-swap", "p2p-deadlock",
      "side-stream-race", "coalesced-reuse",     "thread-prefetch", "p2p-ring-2", "p2p-batch"};
  const std::string dir = "/tmp/shardcheck-capture-mutant";
  int refused = 0, ran = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string& name = fixtures[rng.uniform(fixtures.size())];
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(fixture(name))) files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    const std::string victim = files[rng.uniform(files.size())];
    for (const auto& f : files) {
      std::vector<std::string> lines = read_lines(fixture(name) + "/" + f);
      if (f == victim) {
        const size_t at = rng.uniform(lines.size());
        std::string& l = lines[at];
        switch (rng.uniform(5)) {
          case 0:  // drop a line
            lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(at));
            break;
          case 1:  // repeat it
            lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), l);
            break;
          case 2: {  // change a digit
            std::vector<size_t> digits;
            for (size_t k = 0; k < l.size(); ++k) {
              if (std::isdigit(static_cast<unsigned char>(l[k]))) digits.push_back(k);
            }
            if (!digits.empty())
              l[digits[rng.uniform(digits.size())]] = static_cast<char>('0' + rng.uniform(10));
            break;
          }
          case 3:  // cut it short
            l.resize(rng.uniform(l.size() + 1));
            break;
          default:  // swap it with another line
            std::swap(l, lines[rng.uniform(lines.size())]);
        }
      }
      std::ofstream out(dir + "/" + f);
      for (const auto& l : lines) out << l << "\n";
    }
    auto s = run::load_scenario(dir);
    if (!s) {
      ++refused;
      const std::string m = s.error().message();
      INFO(m);
      REQUIRE(m.rfind(dir + "/rank-", 0) == 0);
      REQUIRE(m.find(".jsonl:") != std::string::npos);
      continue;
    }
    ++ran;
    run::ScheduleOverrides o;
    o.runs = 2;
    const auto out = run::run_scenario(*s, o);
    INFO(name << " mutant " << i << ": " << out.explored.error);
    REQUIRE((out.explored.error.empty() || out.explored.limit));
  }
  fs::remove_all(dir);
  REQUIRE(refused > 50);
  REQUIRE(ran > 20);
}

namespace {
// A one-rank capture folder of `records` (one JSON object per line), with its header and end.
std::string capture_folder(const std::string& name, const std::vector<std::string>& records) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("shardcheck-" + name + "-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  std::ofstream out(dir + "/rank-0.jsonl");
  out << R"({"shardcheck_capture": 1, "rank": 0, "world_size": 1, "torch": "2.11.0", "device": "cpu"})"
      << "\n";
  for (const auto& r : records) out << r << "\n";
  out << "{\"k\": \"end\", \"records\": " << records.size() << "}\n";
  return dir;
}

size_t races_in(const std::string& dir) {
  const auto out = run_folder(dir);
  std::filesystem::remove_all(dir);
  return out.explored.findings.size();
}
}  // namespace

TEST_CASE(
    "a thread nothing orders against the main one may make its stream wait after the main one's next work",
    "[sim][capture]") {
  // gloo's shape: the main thread writes a tensor on a side stream; a worker thread makes the
  // default stream wait for it, and the file has that wait before the main thread's read.
  const std::vector<std::string> head = {
      R"({"k": "stream", "id": 0, "name": "default"})",
      R"({"k": "stream", "id": 1, "name": "side"})",
      R"({"k": "site", "id": 0, "file": "prog.py", "line": 1, "func": "main"})",
      R"({"k": "site", "id": 1, "file": "prog.py", "line": 2, "func": "worker"})",
      R"({"k": "site", "id": 2, "file": "prog.py", "line": 3, "func": "main"})",
      R"({"k": "alloc", "buf": 0, "bytes": 64, "stream": 0, "at": 0})",
      R"({"k": "op", "name": "aten::fill_", "stream": 0, "r": [], "w": [[0, 0, 64]], "at": 0})",
      R"({"k": "event_record", "event": 0, "stream": 0, "at": 0})",
      R"({"k": "event_wait", "event": 0, "stream": 1, "at": 0})",
      R"({"k": "op", "name": "aten::mul_", "stream": 1, "r": [[0, 0, 64]], "w": [[0, 0, 64]], "at": 0})",
      R"({"k": "thread", "id": 1, "name": "worker"})",
      R"({"k": "event_record", "event": 1, "stream": 1, "at": 1})",
      R"({"k": "event_wait", "event": 1, "stream": 0, "at": 1})",
      R"({"k": "host_signal", "id": 0, "at": 1})",
      R"({"k": "thread", "id": 0})",
  };
  const std::string read =
      R"({"k": "op", "name": "aten::sum", "stream": 0, "r": [[0, 0, 64]], "w": [], "at": 2})";
  auto with = [&](std::vector<std::string> tail) {
    std::vector<std::string> all = head;
    all.insert(all.end(), tail.begin(), tail.end());
    return all;
  };
  REQUIRE(races_in(capture_folder("late-wait", with({read}))) == 1);
  // Waiting for the worker's signal (its wait's hand-over) orders the read: clean.
  REQUIRE(races_in(capture_folder("late-wait-fix",
                                  with({R"({"k": "host_wait", "signal": 0, "at": 2})", read}))) == 0);
  // An event the worker records stays where the file has it: recorded before the main thread's
  // write, it does not cover that write, and a stream waiting for it still races.
  const std::vector<std::string> early_record = {
      R"({"k": "stream", "id": 0, "name": "default"})",
      R"({"k": "stream", "id": 1, "name": "side"})",
      R"({"k": "site", "id": 0, "file": "prog.py", "line": 1, "func": "main"})",
      R"({"k": "alloc", "buf": 0, "bytes": 64, "stream": 0, "at": 0})",
      R"({"k": "thread", "id": 1, "name": "worker"})",
      R"({"k": "event_record", "event": 0, "stream": 0, "at": 0})",
      R"({"k": "thread", "id": 0})",
      R"({"k": "op", "name": "aten::fill_", "stream": 0, "r": [], "w": [[0, 0, 64]], "at": 0})",
      R"({"k": "event_wait", "event": 0, "stream": 1, "at": 0})",
      R"({"k": "op", "name": "aten::sum", "stream": 1, "r": [[0, 0, 64]], "w": [], "at": 0})",
  };
  REQUIRE(races_in(capture_folder("early-record", early_record)) == 1);
}

namespace {
// A collective of `kind` on the two ranks' group, its list side `parts` (all_gather's outputs,
// reduce_scatter's inputs): the whole side has no buffer, only the size and dtype of the parts.
core::CollectiveCall list_form(CollectiveKind kind, core::GroupId g, core::StreamId s, TensorRef one,
                               std::vector<TensorRef> parts) {
  TensorRef whole{-1, 0, 0, one.dtype};
  for (const TensorRef& p : parts) whole.numel += p.numel;
  core::CollectiveCall c{kind, g, s, one, whole, core::ReduceOp::sum, 0, "list"};
  if (kind == CollectiveKind::all_gather) {
    c.output_parts = std::move(parts);
  } else {
    std::swap(c.input, c.output);
    c.input_parts = std::move(parts);
  }
  return c;
}
}  // namespace

TEST_CASE("an all_gather into a list puts member p's tensor into part p, wherever the parts lie",
          "[sim][capture]") {
  std::vector<std::vector<float>> got(2, std::vector<float>(16));
  auto r = two_ranks(
      [&](Runtime& rt, core::GroupId g, core::BufferId x, core::BufferId y) -> Task<> {
        const core::StreamId s = rt.stream("default");
        std::vector<float> mine(8, 1.0f + static_cast<float>(rt.rank()));
        co_await rt.upload(TensorRef::f32(x, 0, 8), s, std::as_bytes(std::span(mine)));
        // member 0's block into the second half of y, member 1's into the first
        co_await rt.collective(list_form(CollectiveKind::all_gather, g, s, TensorRef::f32(x, 0, 8),
                                         {TensorRef::f32(y, 8, 8), TensorRef::f32(y, 0, 8)}));
        co_await rt.download(TensorRef::f32(y, 0, 16), s,
                             std::as_writable_bytes(std::span(got[static_cast<size_t>(rt.rank())])));
        co_await rt.sync_device();
      },
      true);
  REQUIRE(r.error.empty());
  REQUIRE(r.findings.empty());
  for (const auto& y : got) {
    REQUIRE(std::vector<float>(y.begin(), y.begin() + 8) == std::vector<float>(8, 2.0f));
    REQUIRE(std::vector<float>(y.begin() + 8, y.end()) == std::vector<float>(8, 1.0f));
  }
}

TEST_CASE("a list form carries never-written bytes into the part they reach, and sizes that differ mismatch",
          "[sim][capture]") {
  // rank 1 never writes x: the part rank 0 receives from it is never-written, the other is not
  auto r = two_ranks(
      [](Runtime& rt, core::GroupId g, core::BufferId, core::BufferId y) -> Task<> {
        const core::StreamId s = rt.stream("default");
        const core::BufferId in = co_await rt.alloc(32, s, "in");
        const core::BufferId other = co_await rt.alloc(32, s, "other");
        if (rt.rank() == 0)
          co_await rt.launch(core::kernels::opaque("init", s, {}, {TensorRef::bytes_of(in, 0, 32)}));
        co_await rt.collective(list_form(CollectiveKind::all_gather, g, s, TensorRef::f32(in, 0, 8),
                                         {TensorRef::f32(y, 0, 8), TensorRef::f32(other, 0, 8)}));
        co_await rt.launch(core::kernels::opaque("use own", s, {TensorRef::bytes_of(y, 0, 32)}, {}));
        if (rt.rank() == 0)
          co_await rt.launch(core::kernels::opaque("use other", s, {TensorRef::bytes_of(other, 0, 32)}, {}));
        co_await rt.sync_device();
      },
      false);
  REQUIRE(r.error.empty());
  REQUIRE(r.findings.size() == 1);
  REQUIRE(r.findings[0].kind == core::FindingKind::uninitialized_read);
  REQUIRE_THAT(r.findings[0].summary, Catch::Contains("use other"));
  auto m = two_ranks(
      [](Runtime& rt, core::GroupId g, core::BufferId x, core::BufferId y) -> Task<> {
        const core::StreamId s = rt.stream("default");
        const int64_t n = rt.rank() == 0 ? 4 : 8;  // each rank's parts hold its own block's size
        co_await rt.collective(list_form(CollectiveKind::reduce_scatter, g, s, TensorRef::f32(x, 0, n),
                                         {TensorRef::f32(y, 0, n), TensorRef::f32(y, 8, n)}));
      },
      false);
  REQUIRE(has(m, core::FindingKind::collective_mismatch));
  REQUIRE_THAT(m.findings[0].explanation, Catch::Contains("reduce_scatter f32 8->4 sum"));
  REQUIRE_THAT(m.findings[0].explanation, Catch::Contains("reduce_scatter f32 16->8 sum"));
}

TEST_CASE(
    "a swap is two tensors made at other places, and one line's order counts only where both made as many",
    "[sim][capture]") {
  using Kind = core::TensorOrigin::Kind;
  struct Case {
    core::TensorOrigin rank0, rank1;
    bool swap;
  };
  const core::TensorOrigin first{Kind::allocated, "t.py:5", 0, 2}, second{Kind::allocated, "t.py:5", 1, 2};
  const Case cases[] = {
      {first, second, true},                              // the 1st and the 2nd of one line
      {first, {Kind::allocated, "t.py:5", 1, 3}, false},  // rank 1 made 3 there: not comparable
      {first, {Kind::allocated, "t.py:9", 0, 2}, true},   // another line
      {first, {}, false},                                 // rank 1 does not say
      {{Kind::parameter, "a.weight", -1, -1}, {Kind::parameter, "b.weight", -1, -1}, true},
      {{Kind::parameter, "a.weight", -1, -1}, {Kind::parameter, "a.weight", -1, -1}, false},
      {{Kind::allocated, "t.py:5", -1, -1}, {Kind::allocated, "t.py:5", 1, 2}, false},  // a line only
  };
  for (const Case& c : cases) {
    INFO(core::to_string(c.rank0) << " / " << core::to_string(c.rank1));
    auto r = two_ranks(
        [&c](Runtime& rt, core::GroupId g, core::BufferId x, core::BufferId) -> Task<> {
          const core::StreamId s = rt.stream("default");
          core::CollectiveCall call{CollectiveKind::all_reduce,
                                    g,
                                    s,
                                    TensorRef::f32(x, 0, 16),
                                    TensorRef::f32(x, 0, 16),
                                    core::ReduceOp::sum,
                                    0,
                                    "c10d::allreduce_"};
          call.origin = rt.rank() == 0 ? c.rank0 : c.rank1;
          co_await rt.collective(std::move(call));
        },
        false);
    REQUIRE(r.error.empty());
    REQUIRE(has(r, core::FindingKind::collective_swap) == c.swap);
    if (c.swap) {
      REQUIRE_THAT(r.findings[0].summary,
                   Catch::Contains("(c10d::allreduce_ of " + core::to_string(c.rank0) +
                                   " vs c10d::allreduce_ of " + core::to_string(c.rank1) + ")"));
    }
  }
}

TEST_CASE(
    "format version 2 on CPU: tensors of one line swapped in a loop, and an all_gather into lists of two "
    "sizes",
    "[sim][capture]") {
  // examples/pytorch/swap_loop.py and uneven_gather.py captured at 4 and 2 CPU ranks over gloo
  // (python/tests/test_collectives.py holds their ground truth without the capture).
  const auto swap = run_fixture("swap-loop-4");
  REQUIRE(swap.explored.findings.size() == 1);
  const core::Finding& s = swap.explored.findings[0];
  REQUIRE(s.kind == core::FindingKind::collective_swap);
  REQUIRE_THAT(s.summary,
               Catch::Contains("(torch.distributed.all_reduce of the 1st tensor allocated at "
                               "examples/pytorch/swap_loop.py:38 vs torch.distributed.all_reduce of "
                               "the 2nd tensor allocated at examples/pytorch/swap_loop.py:38)"));
  const auto& d = std::get<core::CollectiveDetail>(s.detail);
  REQUIRE(d.ranks.size() == 2);  // the row with the swap; the other row agrees
  REQUIRE(d.ranks[1].origin == "the 2nd tensor allocated at examples/pytorch/swap_loop.py:38");
  REQUIRE(run_fixture("swap-loop-fix-4").explored.findings.empty());
  const auto gather = run_fixture("uneven-gather-2");
  REQUIRE(gather.explored.findings.size() == 1);
  REQUIRE(gather.explored.findings[0].kind == core::FindingKind::collective_mismatch);
  REQUIRE_THAT(gather.explored.findings[0].explanation,
               Catch::Contains("rank 0 passes 4 in, 8 out, rank 1 8 in, 16 out"));
  REQUIRE_THAT(gather.explored.findings[0].explanation,
               Catch::Contains("at examples/pytorch/uneven_gather.py:27"));
  REQUIRE_FALSE(gather.judged.met);
  REQUIRE(run_fixture("uneven-gather-fix-2").explored.findings.empty());
}
