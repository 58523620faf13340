// The scheduler keeps its runnable set step by step instead of scanning every rank at every
// step. With Options::verify_scheduler each step also scans the world and throws where the
// two differ, so every scenario run this way checks the bookkeeping (which ranks a step marks,
// each collective's arrival count), and the digests must equal a run without the check.
#include <catch2/catch.hpp>
#include <filesystem>

#include "run/scenario_run.hpp"
#include "sim/run_queue.hpp"

using namespace shardcheck;

namespace {
std::vector<std::string> scenario_files(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SHARDCHECK_SOURCE_DIR) + "/" + folder)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint64_t> digests(const run::LoadedScenario& s, sim::Policy policy, bool verify) {
  sim::ExploreOptions o;
  o.base = s.options;
  o.base.policy = policy;
  o.base.seed = 3;
  o.base.verify_scheduler = verify;
  o.runs = 3;
  const sim::ExploreResult r = sim::explore(s.factory, o);
  INFO(s.file << ": " << r.error);
  REQUIRE(r.error.empty());
  return r.digests;
}

// Every file under every policy: the digests with the check equal those without, and a step
// whose kept set differs from the scan ends the run with an error.
void check_every_policy(const std::vector<std::string>& files) {
  for (const auto& file : files) {
    auto s = run::load_scenario(file);
    REQUIRE(s.ok());
    for (auto policy :
         {sim::Policy::in_order, sim::Policy::random, sim::Policy::pct, sim::Policy::delay_comm}) {
      INFO(file << " under " << sim::to_string(policy));
      REQUIRE(digests(*s, policy, true) == digests(*s, policy, false));
    }
  }
}
}  // namespace

TEST_CASE("the runnable set kept step by step equals a scan of the world in every trace scenario",
          "[sim][scheduler]") {
  const auto files = scenario_files("scenarios/trace");
  REQUIRE(files.size() >= 12);
  check_every_policy(files);
}

// Collectives on several groups and streams, pipelines, event waits across streams.
TEST_CASE("the runnable set equals a scan in every catalog and training scenario", "[sim][scheduler]") {
  auto files = scenario_files("scenarios/catalog");
  const auto training = scenario_files("scenarios/training");
  files.insert(files.end(), training.begin(), training.end());
  REQUIRE(files.size() >= 20);
  check_every_policy(files);
}

TEST_CASE("the run queue picks what a scan of its slots would pick", "[sim][scheduler]") {
  core::Rng rng(5);
  constexpr int kSlots = 300;
  const int group = GENERATE(1, 7, 65);  // slots per leaf: 65 is a rank's host and streams
  INFO("groups of " << group);
  sim::RunQueue q(kSlots, group);
  std::vector<sim::RunQueue::Entry> plain(kSlots);
  for (int step = 0; step < 5000; ++step) {
    const int slot = static_cast<int>(rng.uniform(kSlots));
    const sim::RunQueue::Entry e{rng.uniform(2) == 0, rng.uniform(2) == 0, rng.uniform(2) == 0,
                                 static_cast<int64_t>(rng.uniform(8))};
    plain[static_cast<size_t>(slot)] = e;
    // Every other step stages a few slots and sums their groups once, as the scheduler does.
    if (step % 2 == 0) {
      q.set(slot, e);
    } else {
      q.stage(slot, e);
      const int extra = static_cast<int>(rng.uniform(4));
      for (int i = 0; i < extra; ++i) {
        const int other = static_cast<int>(rng.uniform(kSlots));
        const sim::RunQueue::Entry x{rng.uniform(2) == 0, rng.uniform(2) == 0, rng.uniform(2) == 0,
                                     static_cast<int64_t>(rng.uniform(8))};
        q.stage(other, x);
        plain[static_cast<size_t>(other)] = x;
      }
      q.commit();
    }
    std::vector<int> present, eager;
    int first_stream = sim::RunQueue::kNone, best = sim::RunQueue::kNone;
    for (int i = 0; i < kSlots; ++i) {
      const auto& p = plain[static_cast<size_t>(i)];
      if (!p.present) continue;
      present.push_back(i);
      if (p.eager) eager.push_back(i);
      if (p.stream && first_stream == sim::RunQueue::kNone) first_stream = i;
      if (best == sim::RunQueue::kNone || p.priority > plain[static_cast<size_t>(best)].priority) best = i;
    }
    REQUIRE(q.count() == static_cast<int>(present.size()));
    REQUIRE(q.eager_count() == static_cast<int>(eager.size()));
    REQUIRE(q.first_stream() == first_stream);
    REQUIRE(q.best() == best);
    for (size_t k = 0; k < present.size(); k += 5) REQUIRE(q.kth(static_cast<int>(k)) == present[k]);
    for (size_t k = 0; k < eager.size(); k += 5) REQUIRE(q.kth_eager(static_cast<int>(k)) == eager[k]);
  }
}
