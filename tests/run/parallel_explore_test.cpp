// Exploring on several threads (ExploreOptions::jobs, `-j N`) gives the result of one thread:
// the same findings in the same order with the same seeds and counts, the same digests,
// counts and reports, and a first-finding stop at the lowest seed that has a finding,
// whichever thread finds one first. Two cores suffice: threads interleave either way.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/base/cancel.hpp"
#include "reports/report.hpp"
#include "run/processes.hpp"
#include "run/report.hpp"
#include "run/scenario_run.hpp"

using namespace shardcheck;

namespace {

std::vector<std::string> files_in(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SHARDCHECK_SOURCE_DIR) + "/" + folder)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Everything an exploration returns, as one comparable value.
std::string fingerprint(const sim::ExploreResult& r) {
  std::string s = "runs " + std::to_string(r.runs_done) + " first " + std::to_string(r.first_hit) +
                  " steps " + std::to_string(r.steps) + " ops " + std::to_string(r.ops) + " error '" +
                  r.error + "' " + std::to_string(r.error_seed) + (r.limit ? " limit" : "") +
                  (r.cancelled ? " cancelled" : "") + "\n";
  for (uint64_t d : r.digests) s += std::to_string(d) + " ";
  s += "\n";
  for (const auto& f : r.findings) {
    s += std::string(core::to_string(f.kind)) + " | " + f.key + " | " + f.summary + " | " + f.explanation +
         " | seed " + std::to_string(f.seed) + " x" + std::to_string(f.occurrences) + "\n";
  }
  return s;
}

// The scenario's report entry as JSON, without its wall-clock time.
std::string report_json(const run::CheckedRun& c) {
  reports::Report r;
  r.scenarios.push_back(*c.result);
  r.scenarios.back().seconds = 0;
  return reports::to_json(r);
}

}  // namespace

TEST_CASE("every scenario explores to the same result, report and determinism check on 1, 2 and 4 threads",
          "[run][parallel]") {
  std::vector<std::string> files = files_in("scenarios/trace");
  for (const auto& f : files_in("scenarios/catalog")) {
    // Two training scenarios (a bug and its fix) keep the test short; the demo runs them all.
    if (f.find("tied-grad-norm-double-count") != std::string::npos) files.push_back(f);
  }
  for (const auto& file : files) {
    auto s = run::load_scenario(file);
    REQUIRE(s.ok());
    std::string want, want_report;
    for (int jobs : {1, 2, 4}) {
      run::ScheduleOverrides o;
      o.jobs = jobs;
      int calls = 0, last = 0;
      o.progress = [&](int done, int) {
        ++calls;
        CHECK(done > last);  // in seed order, one schedule at a time
        last = done;
      };
      const run::CheckedRun c = run::run_checked(*s, o, true, run::ResultOptions{});
      INFO(file << " with " << jobs << " threads");
      REQUIRE(c.outcome.determinism);
      REQUIRE(c.outcome.determinism->matched);
      REQUIRE(c.error.empty());
      REQUIRE(calls == 2 * c.outcome.explored.runs_done);  // the run and its rerun
      const std::string got = fingerprint(c.outcome.explored);
      const std::string got_report = report_json(c);
      if (jobs == 1) {
        want = got;
        want_report = got_report;
      } else {
        REQUIRE(got == want);
        REQUIRE(got_report == want_report);
      }
    }
  }
}

TEST_CASE("the first-finding stop is the lowest seed with a finding, whichever thread finds one first",
          "[run][parallel]") {
  const std::string dir = std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/";
  auto racy = run::load_scenario(dir + "reuse-race.yaml");
  auto clean = run::load_scenario(dir + "reuse-fix-record-stream.yaml");
  REQUIRE(racy.ok());
  REQUIRE(clean.ok());
  // Seeds 40 and up are clean except a few racy ones: several threads run seeds past the
  // lowest racy one before it is merged.
  for (const std::vector<uint64_t>& racy_seeds :
       {std::vector<uint64_t>{57, 58, 70}, {41, 42}, {90}, {52, 53, 54, 55, 56, 57, 58}, {}}) {
    const sim::Factory factory = [&, racy_seeds](sim::World& w) {
      const bool bug = std::find(racy_seeds.begin(), racy_seeds.end(), w.options().seed) != racy_seeds.end();
      return (bug ? racy->factory : clean->factory)(w);
    };
    sim::ExploreOptions e;
    e.base = run::options_for(*racy, {}).value();
    e.base.seed = 40;
    e.runs = 60;
    e.stop_at_first = true;
    std::string want;
    for (int jobs : {1, 2, 4, 8}) {
      for (int repeat = 0; repeat < (jobs == 1 ? 1 : 5); ++repeat) {
        e.jobs = jobs;
        const sim::ExploreResult r = sim::explore(factory, e);
        const std::string got = fingerprint(r);
        INFO(jobs << " threads, repeat " << repeat);
        if (jobs == 1) {
          want = got;
          if (racy_seeds.empty()) {
            REQUIRE(r.first_hit == -1);
            REQUIRE(r.runs_done == 60);
          } else {
            REQUIRE(r.first_hit == static_cast<int>(racy_seeds.front() - 40));
            REQUIRE(r.runs_done == r.first_hit + 1);
          }
        }
        REQUIRE(got == want);
      }
    }
  }
}

TEST_CASE("an exploration a cancel flag stops on several threads still ends cleanly", "[run][parallel]") {
  auto s = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/reuse-race.yaml");
  REQUIRE(s.ok());
  std::atomic<bool> cancel{false};
  sim::ExploreOptions e;
  e.base = run::options_for(*s, {}).value();
  e.base.cancel = &cancel;
  e.runs = 100000;
  e.jobs = 4;
  e.progress = [&](int done, int) {
    if (done == 50) cancel.store(true);
  };
  const sim::ExploreResult r = sim::explore(s->factory, e);
  REQUIRE(r.cancelled);
  REQUIRE(r.runs_done >= 50);
  REQUIRE(r.runs_done < 100000);
  REQUIRE(r.digests.size() == static_cast<size_t>(r.runs_done));
  // The schedules it finished are the first ones, as on one thread.
  e.jobs = 1;
  e.base.cancel = nullptr;
  e.progress = nullptr;
  e.runs = r.runs_done;
  REQUIRE(sim::explore(s->factory, e).digests == r.digests);
}

TEST_CASE("a first-finding stop on several threads cancels the higher seeds still running",
          "[run][parallel]") {
  auto racy = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/reuse-race.yaml");
  REQUIRE(racy.ok());
  // Seed 40 finds its race after a pause; every later seed waits for its cancel flag (for up to
  // a minute, a bound that fails the test instead of hanging it). On two threads seed 41 starts
  // beside seed 40, so only its cancellation ends the exploration promptly.
  std::atomic<int> slow_started{0}, slow_cancelled{0};
  const sim::Factory factory = [&](sim::World& w) {
    if (w.options().seed == 40) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return racy->factory(w);
    }
    ++slow_started;
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      if (w.options().cancel && w.options().cancel->load()) {
        ++slow_cancelled;
        throw core::Cancelled();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return racy->factory(w);
  };
  sim::ExploreOptions e;
  e.base = run::options_for(*racy, {}).value();
  e.base.seed = 40;
  e.base.pct_steps_hint = 1000;  // no measuring run through the factory
  e.runs = 10;
  e.stop_at_first = true;
  e.jobs = 1;
  const std::string want = fingerprint(sim::explore(factory, e));
  REQUIRE(slow_started == 0);
  e.jobs = 2;
  const sim::ExploreResult r = sim::explore(factory, e);
  REQUIRE(fingerprint(r) == want);
  REQUIRE(r.first_hit == 0);
  REQUIRE(!r.cancelled);
  REQUIRE(slow_started == 1);
  REQUIRE(slow_cancelled == 1);
}

namespace {

// Every "process" (a thread here) hands in its bytes and gets everyone's, in process order, as
// MPI_Allgather gives them: one round at a time, all processes in each round.
class FakeLaunch {
 public:
  explicit FakeLaunch(int count) : count_(count), bytes_(static_cast<size_t>(count)) {}
  std::vector<std::string> all_gather(int index, const std::string& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t round = round_;
    bytes_[static_cast<size_t>(index)] = mine;
    if (++arrived_ == count_) {
      result_ = bytes_;
      arrived_ = 0;
      ++round_;
      turned_.notify_all();
    } else {
      turned_.wait(lock, [&] { return round_ != round; });
    }
    return result_;
  }

 private:
  int count_;
  std::vector<std::string> bytes_, result_;
  int arrived_ = 0;
  int64_t round_ = 0;
  std::mutex mu_;
  std::condition_variable turned_;
};

}  // namespace

// Seeds shared among processes (sim::Share, what `mpirun -np P` does through run/processes):
// process 0's merged result is the one of a single process, findings' text included, whichever
// process's chunk a finding was first seen in; every process stops at the same seed. Would
// fail if a window were merged out of seed order, if a stop did not end every process at once,
// or if a finding seen first in another process's chunk kept its stub.
TEST_CASE("an exploration shared by 2 and 3 processes is the one of a single process", "[run][parallel]") {
  auto racy = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/reuse-race.yaml");
  auto clean = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) +
                                  "/scenarios/trace/reuse-fix-record-stream.yaml");
  REQUIRE(racy.ok());
  REQUIRE(clean.ok());
  for (const std::vector<uint64_t>& racy_seeds : {std::vector<uint64_t>{45, 46, 51}, {40}, {43}, {57}, {}}) {
    const sim::Factory factory = [&, racy_seeds](sim::World& w) {
      const bool bug = std::find(racy_seeds.begin(), racy_seeds.end(), w.options().seed) != racy_seeds.end();
      return (bug ? racy->factory : clean->factory)(w);
    };
    for (bool stop_at_first : {true, false}) {
      sim::ExploreOptions e;
      e.base = run::options_for(*racy, {}).value();
      e.base.seed = 40;
      e.runs = 20;
      e.stop_at_first = stop_at_first;
      e.jobs = 1;
      const std::string want = fingerprint(sim::explore(factory, e));
      for (int count : {2, 3}) {
        for (int chunk : {1, 3}) {
          FakeLaunch launch(count);
          std::vector<std::string> got(static_cast<size_t>(count));
          std::vector<std::thread> processes;
          for (int p = 0; p < count; ++p) {
            processes.emplace_back([&, p] {
              sim::ExploreOptions mine = e;
              mine.jobs = 2;
              mine.share.index = p;
              mine.share.count = count;
              mine.share.chunk = chunk;
              mine.share.exchange = [&, p](const sim::ExploreResult& own) {
                std::vector<sim::ExploreResult> parts;
                for (const std::string& b : launch.all_gather(p, run::encode(own)))
                  parts.push_back(run::decode(b));
                return parts;
              };
              got[static_cast<size_t>(p)] = fingerprint(sim::explore(factory, mine));
            });
          }
          for (auto& t : processes) t.join();
          INFO(count << " processes, " << chunk << " seeds per chunk, stop at first " << stop_at_first);
          REQUIRE(got[0] == want);
        }
      }
    }
  }
}
