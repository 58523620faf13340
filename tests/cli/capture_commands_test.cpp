// run / explore / replay / --report on a capture folder through the real binary: exit 1 with
// the findings' Python lines, 0 when clean, 2 with DIR/rank-R.jsonl:LINE for a bad folder.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/support/run_command.hpp"

using shardcheck::testing::run_shardcheck;

namespace {
std::string fixture(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/fixtures/" + name;
}
}  // namespace

TEST_CASE("run DIR exits 1 and prints the reuse race with its Python lines", "[cli][capture]") {
  auto r = run_shardcheck("run " + fixture("megatron-6137"));
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("== megatron-6137 (" + fixture("megatron-6137") + "): 20 schedules"));
  REQUIRE_THAT(r.out, Catch::Contains("[stream_race] rank 1: the tensor allocated at train.py:31 is freed at "
                                      "train.py:38 while reduce_scatter 'grad' at train.py:37 on stream "
                                      "'nccl:dp' may still read it"));
  REQUIRE_THAT(r.out, Catch::Contains("aten::normal_ at train.py:42 on stream 'default' writes"));
  REQUIRE_THAT(r.out, Catch::Contains("call work.wait() on the work handle of reduce_scatter 'grad'"));
  REQUIRE_THAT(r.out, Catch::Contains("reproduce: " + shardcheck::testing::printed_binary() + " replay " +
                                      fixture("megatron-6137") + " --seed 1"));
  REQUIRE_THAT(r.out, Catch::Contains("FOUND   megatron-6137: stream_race"));
}

TEST_CASE("run DIR exits 0 for a clean capture, and --runs, --seed and --policy apply", "[cli][capture]") {
  auto r = run_shardcheck("run " + fixture("megatron-6137-fixed") + " --runs 7 --seed 11 --policy pct");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("7 schedules"));
  REQUIRE_THAT(r.out, Catch::Contains("clean   megatron-6137-fixed: no findings"));
}

TEST_CASE("explore and replay take a capture folder", "[cli][capture]") {
  auto e = run_shardcheck("explore " + fixture("order-swap"));
  REQUIRE(e.exit_code == 1);
  REQUIRE_THAT(e.out, Catch::Contains("first finding after 1 schedule (seed 1)"));
  REQUIRE_THAT(e.out, Catch::Contains("[collective_swap]"));
  auto clean = run_shardcheck("explore " + fixture("megatron-6137-fixed") + " --runs 5");
  REQUIRE(clean.exit_code == 0);
  REQUIRE_THAT(clean.out, Catch::Contains("explored 5 schedules"));
  auto r = run_shardcheck("replay " + fixture("mismatch-dtype") + " --seed 4");
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("replayed mismatch-dtype with seed 4"));
  REQUIRE_THAT(r.out,
               Catch::Contains("rank 0: all_reduce 'grad' at train.py:20  [all_reduce f32 1024->1024"));
  auto a = run_shardcheck("replay " + fixture("megatron-6137") + " --seed 9");
  auto b = run_shardcheck("replay " + fixture("megatron-6137") + " --seed 9");
  REQUIRE(a.out == b.out);
}

TEST_CASE("run with --report writes a report of a captured program", "[cli][capture]") {
  const std::string dir = "/tmp/shardcheck-capture-report-test";
  std::filesystem::remove_all(dir);
  auto r = run_shardcheck("run " + fixture("megatron-6137") + " --runs 2 --report " + dir);
  REQUIRE(r.exit_code == 1);
  REQUIRE(std::filesystem::exists(dir + "/report.md"));
  REQUIRE(std::filesystem::exists(dir + "/report.json"));
  // A capture states no expectation: the report says what it found, as the terminal does, and
  // counts the records of its files.
  auto md = run_shardcheck("run " + fixture("side-stream-race") + " --runs 2 --report " + dir);
  REQUIRE(md.exit_code == 1);
  std::ifstream in(dir + "/report.md");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE_THAT(text, Catch::Contains("a captured program: 1 rank, 12 records"));
  REQUIRE_THAT(text, Catch::Contains("| side-stream-race | not stated (a capture) |"));
  REQUIRE_THAT(text, Catch::Contains("## side-stream-race (FOUND)"));
  REQUIRE_THAT(text, !Catch::Contains("FAILED"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a race in a loop is one finding per pair of lines, with what it covers", "[cli][capture]") {
  // Ten trials, each on a stream of its own: fill (line 7), sum on the side stream (line 8)
  // without a wait, add_ on the default stream (line 10) without a wait.
  auto r = run_shardcheck("run " + fixture("race-loop"));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = r.out.find(what); at != std::string::npos; at = r.out.find(what, at + 1)) ++n;
    return n;
  };
  REQUIRE(count("[stream_race]") == 2);
  REQUIRE(count("[uninitialized_read]") == 0);
  REQUIRE_THAT(r.out, Catch::Contains("one finding for race_warm.py:7 and race_warm.py:8: 10 instances "
                                      "(tensors, streams, accesses) on rank 0, streams 'default', 'stream "
                                      "from race_warm.py:5' (10 of them)"));
  REQUIRE_THAT(r.out, Catch::Contains("one finding for race_warm.py:8 and race_warm.py:10: 10 instances"));
  REQUIRE_THAT(r.out, Catch::Contains("also seen as uninitialized_read: rank 0: aten::sum at race_warm.py:8 "
                                      "reads 4096 never-written bytes"));
  // The same findings, whatever runs them: one thread or every core.
  auto one = run_shardcheck("run " + fixture("race-loop") + " --jobs 1");
  REQUIRE(one.out == r.out);
  auto replay = run_shardcheck("replay " + fixture("race-loop") + " --seed 1");
  REQUIRE(replay.exit_code == 1);
  REQUIRE_THAT(replay.out, Catch::Contains("one finding for race_warm.py:8 and race_warm.py:10"));
}

TEST_CASE("compare on a capture folder says what compare takes", "[cli][capture]") {
  auto r = run_shardcheck("compare " + fixture("side-stream-race"));
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("is a captured program; compare takes a training scenario"));
  REQUIRE_THAT(r.err, !Catch::Contains(":1:1"));
}

TEST_CASE("a capture whose rank was killed is checked and never called clean", "[cli][capture]") {
  auto r = run_shardcheck("run " + fixture("partial-killed"));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("PARTIAL partial-killed:"));
  REQUIRE_THAT(
      r.out, Catch::Contains(
                 "the capture is partial, so it is not clean: rank 1: the file ends without its end record"));
  REQUIRE_THAT(r.out, !Catch::Contains("clean   partial-killed"));
}

TEST_CASE("a bad capture folder exits 2 with the file and line", "[cli][capture]") {
  const std::pair<const char*, const char*> cases[] = {
      {"bad-corrupt-line", "/rank-1.jsonl:12: not a JSON object: column 96"},
      {"bad-world-size", "/rank-1.jsonl:1: world_size is 3 here but 2 in"},
      {"bad-missing-rank", "/rank-1.jsonl:1: world_size is 2 but"},
  };
  for (const auto& [name, message] : cases) {
    INFO(name);
    for (const char* verb : {"run ", "explore ", "replay "}) {
      auto r = run_shardcheck(verb + fixture(name));
      REQUIRE(r.exit_code == 2);
      REQUIRE_THAT(r.err, Catch::Contains(fixture(name) + message));
      REQUIRE(r.out.empty());
    }
  }
  auto gpu = run_shardcheck("run " + fixture("megatron-6137") + " --backend gpu");
  REQUIRE(gpu.exit_code == 2);
  REQUIRE_THAT(gpu.err, Catch::Contains("runs on the simulator only"));
  auto empty = run_shardcheck("run " + fixture(""));
  REQUIRE(empty.exit_code == 2);
  REQUIRE_THAT(empty.err, Catch::Contains("is a directory; pass"));
}

// Captures of real PyTorch programs, made on one H200 with torch 2.11 by examples/ (see
// docs/capture.md): what the checker says of each is pinned here, so CI, which has no GPU,
// holds the whole path from a real program to its findings.
namespace {
// A capture pinned under tests/capture/<machine>/.
std::string pinned(const std::string& machine, const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/" + machine + "/" + name;
}
std::string h200(const std::string& name) { return pinned("h200", name); }
std::string h100(const std::string& name) { return pinned("h100", name); }
}  // namespace

TEST_CASE("the #6137 pattern in PyTorch: the reuse race with its Python lines, and its fix clean",
          "[cli][capture][h200]") {
  auto r = run_shardcheck("run " + h200("grad-reuse-race"));
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("[stream_race] rank 0: the tensor allocated at "
                                      "examples/pytorch/grad_reuse_race.py:27 is freed at "
                                      "examples/pytorch/grad_reuse_race.py:36 while aten::mul at "
                                      "examples/pytorch/grad_reuse_race.py:32"));
  REQUIRE_THAT(r.out, Catch::Contains("its block goes to the tensor allocated at "
                                      "examples/pytorch/grad_reuse_race.py:37, which aten::copy_ at "
                                      "examples/pytorch/grad_reuse_race.py:38 on stream 'default' writes"));
  REQUIRE_THAT(r.out, Catch::Contains("record_stream"));
  auto fixed = run_shardcheck("run " + h200("grad-reuse-race-fix"));
  REQUIRE(fixed.exit_code == 0);
  REQUIRE_THAT(fixed.out, Catch::Contains("clean   grad-reuse-race-fix: no findings"));
}

TEST_CASE("a rank-dependent collective order in PyTorch is a swap, and one order is clean",
          "[cli][capture][h200]") {
  auto r = run_shardcheck("run " + h200("collective-order-bug-gloo2"));
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("[collective_swap] collective #0 of group 'world'"));
  // A capture of format version 1 named the tensor in the collective's name; it reads as where
  // the tensor was made, as version 2 records it.
  REQUIRE_THAT(r.out,
               Catch::Contains("(c10d::allreduce_ of the tensor allocated at collective_order_bug.py:20 vs "
                               "c10d::allreduce_ of the tensor allocated at collective_order_bug.py:21)"));
  REQUIRE(run_shardcheck("run " + h200("collective-order-bug-fix-gloo2")).exit_code == 0);
}

TEST_CASE("DDP, FSDP2 and Megatron-FSDP v2 training runs captured on an H200 check clean",
          "[cli][capture][h200]") {
  for (const char* name :
       {"ddp-train", "ddp-train-gloo2", "fsdp2-train", "mfsdp-zero3-before", "mfsdp-zero3-after"}) {
    INFO(name);
    auto r = run_shardcheck("run " + h200(name));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    REQUIRE_THAT(r.out, Catch::Contains("clean   " + std::string(name) + ": no findings"));
  }
}

// Four ranks (and two) of real programs on one H100 through the one-GPU backend, torch 2.11
// (python/tests/onegpu/run-on-gpu.sh, tests/capture/h100/README.md): the bugs with their
// Python lines, their fixes clean, and the clean training runs of DDP and Megatron-FSDP v2.

TEST_CASE("4 ranks on one GPU: a rank-dependent collective order is a swap, one order is clean",
          "[cli][capture][h100]") {
  auto r = run_shardcheck("run " + h100("collective-order-bug-4"));
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("[collective_swap] collective #0 of group 'world'"));
  REQUIRE_THAT(
      r.out,
      Catch::Contains("rank 1: all_reduce 'c10d::allreduce_' at examples/pytorch/collective_order_bug.py:26 "
                      "on the tensor allocated at examples/pytorch/collective_order_bug.py:21"));
  auto fixed = run_shardcheck("run " + h100("collective-order-bug-fix-4"));
  REQUIRE(fixed.exit_code == 0);
}

TEST_CASE("4 ranks on one GPU: reading an async all_reduce's tensor before work.wait() is a race",
          "[cli][capture][h100]") {
  auto r = run_shardcheck("run " + h100("missing-wait-4"));
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("[stream_race] rank "));
  REQUIRE_THAT(r.out,
               Catch::Contains("aten::sum at examples/pytorch/missing_wait.py:27 on stream 'default' reads "
                               "the tensor allocated at examples/pytorch/missing_wait.py:22"));
  REQUIRE_THAT(r.out, Catch::Contains("stream 'nccl world'"));
  REQUIRE_THAT(r.out, Catch::Contains("call work.wait()"));
  REQUIRE(run_shardcheck("run " + h100("missing-wait-fix-4")).exit_code == 0);
}

TEST_CASE(
    "4 ranks on one GPU: groups entered in opposite orders hang and the partial capture names the deadlock",
    "[cli][capture][h100]") {
  auto r = run_shardcheck("run " + h100("cross-group-deadlock-4"));
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("[deadlock]"));
  REQUIRE_THAT(r.out, Catch::Contains("at examples/pytorch/cross_group_deadlock.py:34"));
  REQUIRE_THAT(r.out, Catch::Contains("PARTIAL cross-group-deadlock-4: found deadlock"));
  REQUIRE_THAT(r.out, Catch::Contains("rank 0: hung: 12 s inside allreduce"));
  auto fixed = run_shardcheck("run " + h100("cross-group-deadlock-fix-4"));
  REQUIRE(fixed.exit_code == 0);
  REQUIRE_THAT(fixed.out, Catch::Contains("clean   cross-group-deadlock-fix-4: no findings"));
}

TEST_CASE(
    "2 and 4 ranks on one GPU: DDP, FSDP2 and every Megatron-FSDP v2 strategy, HSDP included, check clean",
    "[cli][capture][h100]") {
  for (const char* name : {"ddp-train-4", "ddp-train-2", "fsdp2-train-4", "fsdp2-hsdp-4", "mfsdp-no_shard-4",
                           "mfsdp-optim-4", "mfsdp-optim_grads-4", "mfsdp-optim_grads_params-4",
                           "mfsdp-hsdp-4", "ddp-train-1-nccl", "ddp-train-1-onegpu"}) {
    INFO(name);
    auto r = run_shardcheck("run " + h100(name));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    REQUIRE_THAT(r.out, Catch::Contains("clean   " + std::string(name) + ": no findings"));
  }
}

// The seeds' bugs in Megatron-FSDP itself (examples/megatron_fsdp/run-seeds.sh, the pairs of
// docs/fidelity.md), 4 ranks on one H100.
TEST_CASE("Megatron-FSDP #6187: its parent and the fix check clean at one and four microbatches",
          "[cli][capture][h100]") {
  // The parent frees the default-stream main_grad while the reduce-scatter stream still reads
  // it, but no default-stream allocation before the end of the backward takes its block
  // (docs/fidelity.md): nothing reuses it, so there is no race to find in these programs.
  for (const char* name : {"m6187-before-hsdp-4", "m6187-after-hsdp-4", "m6187-before-hsdp-mb4-4",
                           "m6187-before-4", "m6187-after-4"}) {
    INFO(name);
    auto r = run_shardcheck("run " + h100(name));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    REQUIRE_THAT(r.out, Catch::Contains("clean   " + std::string(name) + ": no findings"));
  }
  // The fix's HSDP run with four microbatches hung inside an all-reduce on the one-GPU backend,
  // every rank at the same collective: partial, so never clean, and nothing found before it.
  auto hung = run_shardcheck("run " + h100("m6187-after-hsdp-mb4-4"));
  REQUIRE(hung.exit_code == 1);
  REQUIRE_THAT(hung.out, Catch::Contains("PARTIAL m6187-after-hsdp-mb4-4: no findings in what was captured"));
}

TEST_CASE(
    "Megatron-FSDP #6187: with 128 rows the backward takes the freed main_grad's block, the fix is clean",
    "[cli][capture][h100]") {
  // 131,072-byte activation gradients: the first default-stream allocation after the free whose
  // best fit is the replaced main_grad's 133,120-byte block (docs/fidelity.md).
  auto r = run_shardcheck("run " + h100("m6187-before-hsdp-b128-4"));
  INFO(r.out);
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("FOUND   m6187-before-hsdp-b128-4: stream_race"));
  const std::string pkg = ".megatron/07a0de65ad/megatron_fsdp/experimental/";
  REQUIRE_THAT(r.out, Catch::Contains("the tensor allocated at " + pkg + "dbuffer.py:102 is freed at " + pkg +
                                      "parameter_group.py:382 while reduce_scatter"));
  REQUIRE_THAT(
      r.out, Catch::Contains("at " + pkg + "dbuffer.py:399 on stream 'stream from " + pkg + "module.py:60'"));
  REQUIRE_THAT(
      r.out,
      Catch::Contains("second: rank 2, stream 'default', aten::mm at examples/megatron_fsdp/train.py:315"));
  REQUIRE_THAT(r.out, Catch::Contains("on ranks 0, 1, 2, 3"));
  auto fixed = run_shardcheck("run " + h100("m6187-after-hsdp-b128-4"));
  INFO(fixed.out);
  REQUIRE(fixed.exit_code == 0);
  REQUIRE_THAT(fixed.out, Catch::Contains("clean   m6187-after-hsdp-b128-4: no findings"));
}

TEST_CASE("Megatron-FSDP #6336: the set-ordered post-step sync mismatches under HFSDP, the fix is clean",
          "[cli][capture][h100]") {
  for (const char* name : {"m6336-before-hsdp-4", "m6336-after-hsdp-4", "m6336-before-4", "m6336-after-4",
                           "m6336-fix-hfsdp-4"}) {
    INFO(name);
    auto r = run_shardcheck("run " + h100(name));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    REQUIRE_THAT(r.out, Catch::Contains("clean   " + std::string(name) + ": no findings"));
  }
  // Three runs of the graft (540f4203ef with the parent's optimizer.py), each rank process
  // with its own hash seed: in every one, the ranks of a dp_outer pair gather TinyLM's units
  // in different orders, so one all-gather differs in size.
  for (const char* name : {"m6336-graft-hfsdp-4-1", "m6336-graft-hfsdp-4-2", "m6336-graft-hfsdp-4-3"}) {
    INFO(name);
    auto r = run_shardcheck("run " + h100(name));
    INFO(r.out);
    REQUIRE(r.exit_code == 1);
    REQUIRE_THAT(r.out, Catch::Contains("FOUND   " + std::string(name) + ": collective_mismatch"));
    REQUIRE_THAT(r.out, Catch::Contains("megatron_fsdp/experimental/dbuffer.py:378"));
    REQUIRE_THAT(r.out, Catch::Contains("make every member pass the same element counts"));
  }
}

TEST_CASE("the engines issue Megatron-FSDP's collectives, but for the initial broadcast and the norm",
          "[cli][capture][h100][fidelity]") {
  // docs/fidelity.md's table: per strategy, the capture of train.py --model tinylm
  // --microbatches 4 at d98e8a64dd against scenarios/fidelity/mfsdp-<strategy>.yaml. Every
  // difference left is one of the two the table accounts for.
  for (const char* st : {"no_shard", "optim", "optim_grads", "optim_grads_params", "hsdp", "hfsdp"}) {
    INFO(st);
    auto r = run_shardcheck("compare " + std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/fidelity/mfsdp-" +
                            st + ".yaml --capture " + h100(std::string("mfsdp-tinylm-") + st + "-4"));
    INFO(r.out);
    REQUIRE(r.exit_code == 1);
    const std::string every = r.out.substr(r.out.find("every difference, over all ranks:"));
    REQUIRE(every ==
            "every difference, over all ranks:\n"
            "  4 x modeled only: broadcast 'embedding:init'\n"
            "  16 x modeled only: broadcast 'block.N:init'\n"
            "  4 x modeled only: broadcast 'head:init'\n"
            "  12 x modeled only: all_reduce 'grad_norm'\n");
  }
}

// Values in captures (docs/findings.md): the reproducers of examples/pytorch captured on CPU over
// gloo at 2 ranks (tests/capture/fixtures), and on one H100 and one H200 (tests/capture/h100, h200).
namespace {
// `shardcheck run FOLDER` of a capture with findings: exit 1; its output.
std::string found_in(const std::string& folder) {
  auto r = run_shardcheck("run " + folder);
  INFO(r.out);
  REQUIRE(r.exit_code == 1);
  return r.out;
}
// `shardcheck run FOLDER` of a clean capture: exit 0.
void require_clean(const std::string& folder) {
  auto r = run_shardcheck("run " + folder);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
}
}  // namespace

TEST_CASE(
    "a parameter left out of the gradient reduction is a missing_reduction at the step's line, and the fix "
    "is clean",
    "[cli][capture][values]") {
  const std::string out = found_in(fixture("replica-drift-2"));
  REQUIRE_THAT(
      out, Catch::Contains("[missing_reduction] head.weight, head.bias: the same on ranks 0, 1 before the "
                           "optimizer step at examples/pytorch/replica_drift.py:57 (step 0), different "
                           "after it: the step consumed gradients that no reduction over those ranks made."));
  REQUIRE_THAT(out, Catch::Contains("stayed the same on those ranks (2: body.0.weight, body.0.bias)"));
  REQUIRE_THAT(out, Catch::Contains("The other parameters' gradients there came from all_reduce at "
                                    "examples/pytorch/replica_drift.py:55 over ranks 0, 1."));
  REQUIRE_THAT(out, Catch::Contains(" run " + fixture("replica-drift-2") + "\n"));
  REQUIRE_THAT(out, Catch::Contains("FOUND   replica-drift-2: missing_reduction\n"));
  require_clean(fixture("replica-drift-fix-2"));
}

TEST_CASE(
    "a learning-rate schedule stepped on one rank is a replica_divergence with equal gradients, and the "
    "fix is clean",
    "[cli][capture][values]") {
  const std::string out = found_in(fixture("replica-drift-lr-2"));
  REQUIRE_THAT(out,
               Catch::Contains("[replica_divergence] body.0.weight, body.0.bias, head.weight and 1 more: "
                               "the same on ranks 0, 1 before the optimizer step at "
                               "examples/pytorch/replica_drift.py:57 (step 1), different after it: their "
                               "gradients were the same there: the step itself differed."));
  REQUIRE_THAT(out, Catch::Contains("FOUND   replica-drift-lr-2: replica_divergence\n"));
  require_clean(fixture("replica-drift-lr-fix-2"));
}

TEST_CASE(
    "expert gradients summed over their group and divided by its size, not the world's, are a "
    "divisor_mismatch naming both lines, and the fix is clean",
    "[cli][capture][values]") {
  // The all_to_all brought each expert every rank's tokens of its expert-parallel group, so the sum
  // over its expert-data-parallel group carries the losses of all 4 ranks (DeepSpeed #6546).
  const std::string out = found_in(fixture("expert-parallel-4"));
  REQUIRE_THAT(
      out, Catch::Contains("[divisor_mismatch] all_reduce (sum) at examples/pytorch/expert_parallel.py:91 "
                           "over ranks 0, 2, divided by 2 at examples/pytorch/expert_parallel.py:92: "
                           "the sum carries the losses of 4 ranks (0, 1, 2, 3), so their average "
                           "divides by 4, not 2."));
  REQUIRE_THAT(out, Catch::Contains("The gradients of 'expert.weight', 'expert.bias'"));
  REQUIRE_THAT(out,
               Catch::Contains("the other parameters' there ('router.weight', 'router.bias') weigh it 1/4"));
  // One finding for the division's line, over both expert-data-parallel groups.
  REQUIRE_THAT(out, Catch::Contains("FOUND   expert-parallel-4: divisor_mismatch\n"));
  // Divided by the world size, as the router's: clean.
  require_clean(fixture("expert-parallel-fix-4"));
}

TEST_CASE(
    "a gradient summed again after its reduction is a double_reduction naming both lines, and the fix is "
    "clean",
    "[cli][capture][values]") {
  auto r = run_shardcheck("run " + fixture("double-reduction-2"));
  INFO(r.out);
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(
      r.out, Catch::Contains("[double_reduction] all_reduce (sum) at examples/pytorch/double_reduction.py:66 "
                             "over ranks 0, 1 sums what all_reduce at "
                             "examples/pytorch/double_reduction.py:42 already reduced over them: the "
                             "result is 2 times it."));
  REQUIRE_THAT(r.out, Catch::Contains("FOUND   double-reduction-2: double_reduction\n"));
  REQUIRE(run_shardcheck("run " + fixture("double-reduction-fix-2")).exit_code == 0);
  // On the GPU, with DDP as the first reduction (its bucket all-reduce at the backward's line).
  auto ddp = run_shardcheck("run " + h100("double-reduction-ddp-4"));
  INFO(ddp.out);
  REQUIRE(ddp.exit_code == 1);
  REQUIRE_THAT(ddp.out,
               Catch::Contains("all_reduce (sum) at examples/pytorch/double_reduction.py:66 over ranks 0, 1, "
                               "2, 3 sums what all_reduce at examples/pytorch/double_reduction.py:63 already "
                               "reduced over them: the result is 4 times it"));
  auto fsdp2 = run_shardcheck("run " + h100("fsdp2-train-values-4"));
  INFO(fsdp2.out);
  REQUIRE(fsdp2.exit_code == 0);
}

TEST_CASE(
    "a norm whose terms count a tied embedding on both pipeline stages is a grad_norm_miscount, and the fix "
    "is "
    "clean",
    "[cli][capture][values]") {
  auto r = run_shardcheck("run " + fixture("tied-norm-2"));
  INFO(r.out);
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(
      r.out, Catch::Contains("[grad_norm_miscount] all_reduce (sum) at examples/pytorch/tied_norm.py:62 over "
                             "ranks 0, 1 adds up terms computed from the gradient of 'shared', which ranks "
                             "0, 1 each hold a copy of: it is counted 2 times."));
  REQUIRE_THAT(r.out, Catch::Contains("FOUND   tied-norm-2: grad_norm_miscount\n"));
  // Tensor parallelism by hand: the LayerNorm every rank holds whole, counted by each (#7227).
  REQUIRE_THAT(found_in(fixture("tp-norm-2")),
               Catch::Contains("[grad_norm_miscount] all_reduce (sum) at examples/pytorch/tp_norm.py:87 over "
                               "ranks 0, 1 adds up terms computed from the gradient of 'norm.weight', "
                               "'norm.bias', which ranks 0, 1 each hold a copy of: it is counted 2 times."));
  // Megatron's main_grad buffers: the norm taken over them before their copy into .grad.
  REQUIRE_THAT(
      found_in(fixture("main-grad-norm-2")),
      Catch::Contains("[grad_norm_miscount] all_reduce (sum) at examples/pytorch/main_grad_norm.py:71 "
                      "over ranks 0, 1 adds up terms computed from the gradient of 'weight', 'bias', "
                      "which ranks 0, 1 each hold a copy of: it is counted 2 times."));
  // The data-parallel reductions of the other reproducers are of gradients themselves, no norm.
  for (const char* name :
       {"tied-norm-fix-2", "replica-drift-fix-2", "replica-drift-lr-fix-2", "double-reduction-fix-2",
        "expert-parallel-fix-4", "tp-norm-fix-2", "main-grad-norm-fix-2"}) {
    INFO(name);
    REQUIRE(run_shardcheck("run " + fixture(name)).exit_code == 0);
  }
}

TEST_CASE(
    "the value reproducers on one H200, several ranks on the one GPU: each bug class at its line, every "
    "fix and Megatron-FSDP clean",
    "[cli][capture][values][h200]") {
  const std::pair<const char*, const char*> found[] = {
      {"replica-drift-4",
       "[missing_reduction] head.weight, head.bias: the same on ranks 0, 1, 2, 3 before the "
       "optimizer step at examples/pytorch/replica_drift.py:57 (step 0)"},
      {"replica-drift-lr-4",
       "[replica_divergence] body.0.weight, body.0.bias, head.weight and 1 more: the same on "
       "ranks 0, 1, 2, 3 before the optimizer step at examples/pytorch/replica_drift.py:57 "
       "(step 1), different after it: their gradients were the same there"},
      {"tied-norm-2",
       "[grad_norm_miscount] all_reduce (sum) at examples/pytorch/tied_norm.py:62 over ranks 0, 1 "
       "adds up terms computed from the gradient of 'shared'"},
      {"tp-norm-2",
       "[grad_norm_miscount] all_reduce (sum) at examples/pytorch/tp_norm.py:87 over ranks 0, 1 adds "
       "up terms computed from the gradient of 'norm.weight', 'norm.bias'"},
  };
  for (const auto& [name, text] : found) {
    const std::string out = found_in(h200(name));
    REQUIRE_THAT(out, Catch::Contains(text));
    REQUIRE_THAT(out, !Catch::Contains("collective_swap"));  // each stage's copy from its own line
  }
  for (const char* name : {"replica-drift-fix-4", "replica-drift-lr-fix-4", "tied-norm-fix-2",
                           "tp-norm-fix-2", "mfsdp-tinylm-values-4"})
    require_clean(h200(name));
}

// The value reproducers the GPU alone shows, and the capture cases of the caching allocator,
// CUDA graphs and cudaMallocAsync, from one H100 (python/tests/onegpu/run-values-on-gpu.sh and
// run-captures-on-gpu.sh, tests/capture/h100/README.md).
TEST_CASE("on the GPU: the expert divisor, the DTensor norm and DDP's reductions, with values",
          "[cli][capture][h100]") {
  // Captured from expert_parallel.py before its flag was turned around: without --fix it divided
  // the experts' sums by the world size (correct), with it by their group's size (the bug).
  const std::string ep = found_in(h100("expert-parallel-fix-4"));
  REQUIRE_THAT(
      ep, Catch::Contains("[divisor_mismatch] all_reduce (sum) at examples/pytorch/expert_parallel.py:87 "
                          "over ranks 0, 2, divided by 2 at examples/pytorch/expert_parallel.py:88"));
  REQUIRE_THAT(ep, Catch::Contains("FOUND   expert-parallel-fix-4: divisor_mismatch\n"));
  const std::string tp = found_in(h100("dtensor-tp-2"));
  REQUIRE_THAT(tp,
               Catch::Contains("[grad_norm_miscount] all_reduce (sum) at examples/pytorch/dtensor_tp.py:52 "
                               "over ranks 0, 1 adds up terms computed from the gradient of 'norm.weight', "
                               "'norm.bias'"));
  REQUIRE_THAT(tp, Catch::Contains("FOUND   dtensor-tp-2: grad_norm_miscount\n"));
  // DDP copies each gradient out of its bucket: summing that copy again is a double reduction,
  // not a norm over the bucket's other parameters.
  REQUIRE_THAT(found_in(h100("double-reduction-ddp-4")),
               Catch::Contains("FOUND   double-reduction-ddp-4: double_reduction\n"));
  for (const char* clean : {"expert-parallel-4", "dtensor-tp-fix-2", "double-reduction-ddp-fix-4",
                            "ddp-train-values-4", "fsdp2-train-values-4"}) {
    INFO(clean);
    require_clean(h100(clean));
  }
}

TEST_CASE("on the GPU: coalesced blocks, graph replays and cudaMallocAsync's frees race where the device did",
          "[cli][capture][h100]") {
  // Two 4 MiB buckets freed while a side stream reduces them; an 8 MiB activation took both
  // (the program printed "activation spans both buckets: True"), with expandable segments too.
  for (const char* name : {"coalesced-reuse-2", "coalesced-reuse-expandable-2"}) {
    const std::string out = found_in(h100(name));
    INFO(name);
    REQUIRE_THAT(out,
                 Catch::Contains("the tensor allocated at examples/pytorch/coalesced_reuse.py:29 is freed at "
                                 "examples/pytorch/coalesced_reuse.py:39"));
    REQUIRE_THAT(out,
                 Catch::Contains("the tensor allocated at examples/pytorch/coalesced_reuse.py:30 is freed at "
                                 "examples/pytorch/coalesced_reuse.py:39"));
  }
  // The fix's record_stream events had completed when the allocator handed the merged block over
  // (it took the same address): the check waits for them there, and the fix is clean.
  require_clean(h100("coalesced-reuse-fix-2"));
  require_clean(h100("coalesced-reuse-expandable-fix-2"));
  // The graph's kernels run at g.replay() (line 43), not where it was captured.
  REQUIRE_THAT(
      found_in(h100("graph-replay-2")),
      Catch::Contains("aten::mm at examples/pytorch/graph_replay.py:43 on stream 'default' reads the tensor "
                      "allocated at examples/pytorch/graph_replay.py:24 while aten::copy_ at "
                      "examples/pytorch/graph_replay.py:40"));
  require_clean(h100("graph-replay-fix-2"));
  // cudaMallocAsync reports no allocation or free: the gradient's block went to the next
  // storage at its address, and record_stream's fix is clean (it was a false alarm).
  const std::string async = found_in(h100("grad-reuse-async-2"));
  REQUIRE_THAT(async, Catch::Contains("cudaMallocAsync frees it on stream 'default'"));
  REQUIRE_THAT(async, Catch::Contains("FOUND   grad-reuse-async-2: stream_race\n"));
  require_clean(h100("grad-reuse-async-fix-2"));
}

// The acceptance run of 2026-12-07 (15:23 UTC, one H100, python/tests/onegpu/acceptance.py):
// programs with host threads, a data prefetcher, CUDA graph branches, an accumulator never
// zeroed, and ranks the program started itself (torch.multiprocessing.spawn, and a
// multiprocessing.Process per rank); the event polls from the run at 15:52 UTC.
TEST_CASE("on the GPU: threads, prefetchers, graph branches and spawned ranks are found at their lines",
          "[cli][capture][h100]") {
  const std::pair<const char*, const char*> found[] = {
      // gloo's worker happened to make the default stream wait for the write-back before the
      // main thread clamped: nothing ordered the two threads, so the clamp still races.
      {"gloo-inplace-2",
       "one finding for examples/pytorch/gloo_inplace_race.py:26 and "
       "examples/pytorch/gloo_inplace_race.py:29"},
      {"thread-backward-2",
       "aten::copy_ at examples/pytorch/thread_backward.py:30 on stream 'stream from "
       "examples/pytorch/thread_backward.py:23' reads the tensor allocated at "
       "examples/pytorch/thread_backward.py:25 while aten::mm at examples/pytorch/thread_backward.py:25"},
      {"thread-prefetch-2",
       "aten::mm at examples/pytorch/thread_prefetch.py:47 on stream 'default' reads the tensor allocated at "
       "examples/pytorch/thread_prefetch.py:28 while aten::_to_copy at "
       "examples/pytorch/thread_prefetch.py:28"},
      {"data-prefetcher-2",
       "the tensor allocated at examples/pytorch/data_prefetcher.py:33 is freed at "
       "examples/pytorch/data_prefetcher.py:53 while aten::mm at examples/pytorch/data_prefetcher.py:52"},
      {"graph-branches-2",
       "aten::linalg_vector_norm at examples/pytorch/graph_branches.py:46 on stream 'stream from "
       "examples/pytorch/graph_branches.py:25 of the graph replayed at "
       "examples/pytorch/graph_branches.py:46'"},
      {"uninit-accumulator-2",
       "[uninitialized_read] rank 1: aten::addmm at examples/pytorch/uninit_accumulator.py:30 reads 1024 "
       "bytes of 'tensor allocated at examples/pytorch/uninit_accumulator.py:23'"},
      {"spawn-missing-wait-4",
       "one finding for examples/pytorch/missing_wait.py:24 and examples/pytorch/missing_wait.py:27: 4 "
       "instances (tensors, streams, accesses) on ranks 0, 1, 2, 3"},
      {"event-poll-2",
       "aten::sum at examples/pytorch/event_poll.py:35 on stream 'default' reads the tensor allocated at "
       "examples/pytorch/event_poll.py:24 while aten::fill_ at examples/pytorch/event_poll.py:29"},
      {"process-missing-wait-4",
       "one finding for examples/pytorch/missing_wait.py:24 and examples/pytorch/missing_wait.py:27: 4 "
       "instances (tensors, streams, accesses) on ranks 0, 1, 2, 3"},
  };
  for (const auto& [name, text] : found) {
    INFO(name);
    const std::string out = found_in(h100(name));
    REQUIRE_THAT(out, Catch::Contains(text));
    size_t findings = 0;  // one per pair of code sites
    for (size_t at = out.find("\n["); at != std::string::npos; at = out.find("\n[", at + 1)) ++findings;
    REQUIRE(findings == 1);
  }
  for (const char* name : {"gloo-inplace-fix-2", "thread-backward-fix-2", "thread-prefetch-fix-2",
                           "data-prefetcher-fix-2", "graph-branches-fix-2", "uninit-accumulator-fix-2",
                           "spawn-missing-wait-fix-4", "process-missing-wait-fix-4",
                           // polled until the loader's event (or stream) said it was done: ordered
                           "event-poll-fix-2", "event-poll-stream-fix-2"}) {
    INFO(name);
    require_clean(h100(name));
  }
}
