// Schedule exploration and replay.
#include "sim/explore.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/base/cancel.hpp"
#include "sim/heap.hpp"

namespace shardcheck::sim {

Factory plain(Program program) {
  return [program](World&) { return RunSetup{program, nullptr}; };
}

RunResult run_once(World& world, const Factory& factory) {
  RunSetup setup;
  RunResult r;
  try {
    setup = factory(world);
    r = world.run(setup.program);
  } catch (const ResourceError& e) {
    r.error = e.what();
    r.limit = true;
    return r;
  } catch (const core::Cancelled&) {
    r.cancelled = true;  // the factory's own long work (the single-rank reference) was stopped
    return r;
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  if (setup.after && r.error.empty() && !r.cancelled) {
    try {
      setup.after(world, r);
    } catch (const core::Cancelled&) {
      r.cancelled = true;  // the training judge's comparison was stopped
    } catch (const std::exception& e) {
      r.error = std::string("oracle: ") + e.what();
    }
  }
  return r;
}

int64_t measure_steps(const Factory& factory, Options base) {
  base.policy = Policy::in_order;
  base.detectors = false;
  base.record_trace = false;
  World w(base);
  try {
    RunSetup setup = factory(w);
    return w.run(setup.program).steps;
  } catch (const core::Cancelled&) {
    return 0;  // the factory's reference was stopped: the run that follows stops too
  }
}

namespace {

// Merges run results into an exploration in seed order, as a sequential loop would: the same
// findings (each once, with its first seed), counts, digests and stopping point for any number
// of threads.
struct Merge {
  const ExploreOptions& o;
  ExploreResult r;  // but its findings, which `found` holds until result()
  bool done = false;
  core::FindingList found;

  ExploreResult result() && {
    r.findings = std::move(found).take();
    return std::move(r);
  }

  // Folds in run `i`; false once exploration ends with it.
  bool add(int i, RunResult run) {
    if (run.cancelled) {
      r.cancelled = true;
      if (!run.findings.empty() && r.first_hit < 0) r.first_hit = i;
      for (auto& f : run.findings) found.add(std::move(f));
      return false;
    }
    r.runs_done++;
    r.steps += run.steps;
    r.ops += run.ops_executed;
    r.collectives += run.collectives;
    r.bytes_checked += run.bytes_checked;
    r.digests.push_back(run.trace_digest);
    if (!run.error.empty() && r.error.empty()) {
      r.error = run.error;
      r.error_seed = o.base.seed + static_cast<uint64_t>(i);
      r.limit = run.limit;
    }
    if (run.limit) return false;  // no findings claimed for a cut run, and the next would be cut too
    for (auto& f : run.findings) found.add(std::move(f));
    if (!run.findings.empty() && r.first_hit < 0) r.first_hit = i;
    if (o.stop_at_first && (r.first_hit >= 0 || !r.error.empty())) return false;
    if (o.stop_at_error && !r.error.empty()) return false;
    return true;
  }
  // Whether run `i` alone ends exploration (then no later seed need run).
  bool ends(const RunResult& run) const {
    if (run.cancelled || run.limit) return true;
    if (o.stop_at_first && (!run.findings.empty() || !run.error.empty())) return true;
    return o.stop_at_error && !run.error.empty();
  }
};

RunResult guarded_run(const Options& opts, const Factory& factory) {
  try {
    World w(opts);
    return run_once(w, factory);
  } catch (const std::exception& e) {
    RunResult r;
    r.error = e.what();
    return r;
  }
}

// Appends `part`, the exploration of the seeds from index `offset` on, to `total`, which holds
// every seed below it: the sequential merge, chunk by chunk. False once exploration ends in
// `part` (it stopped before its last seed, or its last seed ends exploration).
bool append(ExploreResult& total, ExploreResult part, int offset, int planned, const ExploreOptions& o) {
  core::add_findings(total.findings, std::move(part.findings));
  if (total.first_hit < 0 && part.first_hit >= 0) total.first_hit = offset + part.first_hit;
  total.runs_done += part.runs_done;
  total.steps += part.steps;
  total.ops += part.ops;
  total.digests.insert(total.digests.end(), part.digests.begin(), part.digests.end());
  if (total.error.empty() && !part.error.empty()) {
    total.error = part.error;
    total.error_seed = part.error_seed;
    total.limit = part.limit;
  }
  total.cancelled = total.cancelled || part.cancelled;
  if (part.cancelled || part.limit || part.runs_done < planned) return false;
  if (o.stop_at_first && (total.first_hit >= 0 || !total.error.empty())) return false;
  return !(o.stop_at_error && !total.error.empty());
}

// Reruns the seed of each finding that arrived without its text, on process 0.
void fill_in(ExploreResult& r, const std::vector<size_t>& stubs, const Factory& factory,
             const Options& opts) {
  for (size_t i : stubs) {
    core::Finding& f = r.findings[i];
    Options run_opts = opts;
    run_opts.seed = f.seed;
    RunResult run = guarded_run(run_opts, factory);
    for (auto& g : run.findings) {
      if (g.kind != f.kind || g.key != f.key) continue;
      g.seed = f.seed;
      g.occurrences = f.occurrences;
      g.spread = std::move(f.spread);  // every process's instances, not only this run's
      f = std::move(g);
      break;
    }
  }
}

// Exploration shared by ExploreOptions::share.count processes, window by window.
ExploreResult explore_shared(const Factory& factory, const ExploreOptions& o, const Options& opts) {
  const Share& sh = o.share;
  ExploreResult total;
  std::vector<size_t> stubs;  // findings of total that came without their text
  for (int begin = 0; begin < o.runs;) {
    const int end = static_cast<int>(std::min<int64_t>(o.runs, begin + int64_t{sh.chunk} * sh.count));
    auto chunk_of = [&](int p) {
      const int b = std::min(end, begin + p * sh.chunk);
      return std::pair<int, int>{b, std::min(end, b + sh.chunk)};
    };
    const auto [own_begin, own_end] = chunk_of(sh.index);
    ExploreResult own;
    if (own_end > own_begin) {
      ExploreOptions sub = o;
      sub.share = {};
      sub.progress = nullptr;
      sub.base = opts;
      sub.base.seed = o.base.seed + static_cast<uint64_t>(own_begin);
      sub.runs = own_end - own_begin;
      own = explore(factory, sub);
    }
    std::vector<ExploreResult> parts = sh.exchange(own);
    parts[static_cast<size_t>(sh.index)] = std::move(own);  // with its findings' text
    bool more = true;
    for (int p = 0; p < sh.count && more; ++p) {
      const auto [b, e] = chunk_of(p);
      const size_t known = total.findings.size();
      more = append(total, std::move(parts[static_cast<size_t>(p)]), b, e - b, o);
      if (p != sh.index)
        for (size_t i = known; i < total.findings.size(); ++i) stubs.push_back(i);
    }
    if (o.progress) o.progress(total.runs_done, static_cast<int>(total.findings.size()));
    if (!more) break;
    begin = end;
  }
  if (sh.index == 0) fill_in(total, stubs, factory, opts);
  return total;
}

}  // namespace

int resolve_jobs(int jobs) {
  if (jobs > 0) return jobs;
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace {
ExploreResult explore_sequential(const Factory& factory, const ExploreOptions& o, const Options& opts) {
  Merge m{o, {}, false, {}};
  for (int i = 0; i < o.runs; ++i) {
    if (opts.cancel && opts.cancel->load(std::memory_order_relaxed)) {
      m.r.cancelled = true;
      break;
    }
    Options run_opts = opts;
    run_opts.seed = o.base.seed + static_cast<uint64_t>(i);
    World w(run_opts);
    const bool more = m.add(i, run_once(w, factory));
    if (o.progress) o.progress(m.r.runs_done, static_cast<int>(m.found.size()));
    if (!more) break;
  }
  return std::move(m).result();
}

// Each thread takes the next seed; results wait in `pending` until every lower seed is merged.
// A run that ends exploration lowers `limit`, so no higher seed starts, and cancels the higher
// seeds already running (their results would be dropped), while every lower seed still runs:
// the merged result, first finding included, is the sequential one.
class ParallelExplore {
 public:
  ParallelExplore(const Factory& factory, const ExploreOptions& o, const Options& opts, int threads)
      : factory_(factory),
        o_(o),
        opts_(opts),
        m_{o, {}, false, {}},
        limit_(o.runs),
        slots_(static_cast<size_t>(threads)) {}

  ExploreResult run() {
    // The caller's cancel flag reaches the runs through their own flags: a watcher copies it.
    std::thread watcher;
    if (opts_.cancel) watcher = std::thread([this] { watch(); });
    std::vector<std::thread> pool;
    pool.reserve(slots_.size() - 1);
    for (size_t t = 1; t < slots_.size(); ++t) pool.emplace_back([this, t] { worker(slots_[t]); });
    worker(slots_[0]);
    for (auto& t : pool) t.join();
    if (watcher.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        all_done_ = true;
      }
      finished_.notify_all();
      watcher.join();
    }
    return std::move(m_).result();
  }

 private:
  // What each thread runs now (-1: nothing), and the cancel flag its run polls: set when its
  // seed is past `limit_`, or when the caller's own flag is.
  struct Slot {
    int seed_index = -1;
    std::atomic<bool> stop{false};
  };

  bool cancelled() const { return opts_.cancel && opts_.cancel->load(std::memory_order_relaxed); }

  void cut_above(int last) {  // under mu_
    for (Slot& s : slots_) {
      if (s.seed_index > last) s.stop.store(true, std::memory_order_relaxed);
    }
  }

  // The next seed index for `slot`, or -1 when no more start.
  int take(Slot& slot) {
    std::lock_guard<std::mutex> lock(mu_);
    slot.seed_index = -1;
    if (m_.done || next_ >= limit_) return -1;
    if (cancelled()) {
      limit_ = std::min(limit_, next_);
      m_.r.cancelled = true;
      return -1;
    }
    slot.seed_index = next_++;
    slot.stop.store(false, std::memory_order_relaxed);
    return slot.seed_index;
  }

  void worker(Slot& slot) {
    for (int i = take(slot); i >= 0; i = take(slot)) {
      Options run_opts = opts_;
      run_opts.seed = o_.base.seed + static_cast<uint64_t>(i);
      run_opts.cancel = &slot.stop;
      RunResult run = guarded_run(run_opts, factory_);
      std::lock_guard<std::mutex> lock(mu_);
      if (m_.ends(run) && i + 1 < limit_) {
        limit_ = i + 1;
        cut_above(i);
      }
      pending_.emplace(i, std::move(run));
      while (!m_.done && !pending_.empty() && pending_.begin()->first == merged_) {
        RunResult first = std::move(pending_.begin()->second);
        pending_.erase(pending_.begin());
        if (!m_.add(merged_++, std::move(first))) m_.done = true;
        if (o_.progress) o_.progress(m_.r.runs_done, static_cast<int>(m_.found.size()));
      }
      if (m_.done) pending_.clear();
    }
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!all_done_) {
      if (cancelled()) {
        cut_above(-1);
        return;
      }
      finished_.wait_for(lock, std::chrono::milliseconds(5));
    }
  }

  const Factory& factory_;
  const ExploreOptions& o_;
  const Options& opts_;
  Merge m_;
  std::mutex mu_;
  std::map<int, RunResult> pending_;  // finished, not yet merged
  int next_ = 0;                      // the next seed index to start
  int limit_;                         // seeds at or past it do not start
  int merged_ = 0;                    // seeds merged so far
  std::vector<Slot> slots_;
  std::condition_variable finished_;
  bool all_done_ = false;
};
}  // namespace

ExploreResult explore(const Factory& factory, const ExploreOptions& o) {
  Options opts = o.base;
  if (opts.policy == Policy::pct && opts.pct_steps_hint <= 0)
    opts.pct_steps_hint = measure_steps(factory, opts);
  const int threads = std::max(1, std::min(resolve_jobs(o.jobs), o.runs));
  ExploreResult r = o.share.count > 1 ? explore_shared(factory, o, opts)
                    : threads == 1    ? explore_sequential(factory, o, opts)
                                      : ParallelExplore(factory, o, opts, threads).run();
  core::fold_symptoms(r.findings);
  return r;
}

Replay replay(const Factory& factory, Options options, bool timeline) {
  Replay r;
  if (options.policy == Policy::pct && options.pct_steps_hint <= 0)
    options.pct_steps_hint = measure_steps(factory, options);
  options.record_trace = true;
  r.world = std::make_unique<World>(options);
  r.result = run_once(*r.world, factory);
  core::fold_symptoms(r.result.findings);
  if (timeline) r.log = trace_log(*r.world, "");
  return r;
}

namespace {

// A slice's arguments from what its operation touched (and, for an alloc or free, the
// lifetime it began or ended).
void fill_args(const World& w, const OpArgs* args, int64_t lifetime_of_op, core::TraceLog::Slice& s) {
  auto add = [&](uint32_t l) {
    const Lifetime& life = w.lifetimes()[l];
    s.buffers.push_back(w.name(life.name) + "#" + std::to_string(life.generation));
    if (s.buffer.empty()) {
      s.buffer = w.name(life.name);
      s.lifetime = life.generation;
    }
  };
  if (lifetime_of_op >= 0) {
    add(static_cast<uint32_t>(lifetime_of_op));
    s.bytes = static_cast<int64_t>(w.lifetimes()[static_cast<size_t>(lifetime_of_op)].bytes);
  }
  if (!args) return;
  for (const uint32_t l : args->lifetimes) add(l);
  if (!args->lifetimes.empty()) s.bytes = std::max<int64_t>(s.bytes, 0) + args->bytes;
  if (args->group >= 0) {
    s.group = w.group_name(args->group);
    s.seq = args->seq;
  }
}

}  // namespace

// Each stream pool's live bytes: a lifetime counts from its alloc's first event to its
// free's last (a stream-ordered free runs on the stream after its host issue). Every change,
// in (step, rank, stream) order, with the pool's bytes after it.
Timeline::Timeline(const World& w) : w_(w) {
  for (size_t l = 0; l < w.lifetimes().size(); ++l) {
    lifetime_of_op_[w.lifetimes()[l].alloc_op] = static_cast<int64_t>(l);
    if (w.lifetimes()[l].free_op != kNone)
      lifetime_of_op_[w.lifetimes()[l].free_op] = static_cast<int64_t>(l);
  }
  std::unordered_map<uint32_t, int64_t> first_step, last_step;
  for (const TraceEvent& e : w.trace()) {
    if (!lifetime_of_op_.contains(e.op)) continue;
    first_step.try_emplace(e.op, e.step);
    last_step[e.op] = e.step;
  }
  std::map<std::tuple<int64_t, int, int>, int64_t> deltas;  // (step, rank, stream) -> bytes
  for (const Lifetime& l : w.lifetimes()) {
    const auto a = first_step.find(l.alloc_op);
    if (a == first_step.end()) continue;
    deltas[{a->second, l.rank, l.stream}] += static_cast<int64_t>(l.bytes);
    if (const auto f = last_step.find(l.free_op); l.free_op != kNone && f != last_step.end())
      deltas[{f->second, l.rank, l.stream}] -= static_cast<int64_t>(l.bytes);
  }
  std::map<std::pair<int, int>, int64_t> live;
  std::map<std::pair<int, std::string>, size_t> pool_of;  // a timeline names a pool by its stream's name
  for (const auto& [at, delta] : deltas) {
    const auto [step, rank, stream] = at;
    int64_t& bytes = live[{rank, stream}];
    bytes += delta;
    const auto [it, fresh] = pool_of.try_emplace({rank, w.stream_name(rank, stream)}, pools_.size());
    if (fresh) pools_.emplace_back();
    pools_[it->second].push_back(changes_.size());
    changes_.push_back({step, rank, stream, bytes});
  }
}

core::TraceLog::Counter Timeline::counter(size_t change, int64_t at) const {
  const Change& c = changes_[change];
  return {c.rank, w_.stream_name(c.rank, c.stream), at, c.bytes};
}

// The counters of the span [lo, hi], each pool's value before lo carried in at lo, the pools in
// the order of their first change: a search per pool, and the span's own changes.
void Timeline::add_counters(core::TraceLog& log, int64_t lo, int64_t hi) const {
  const size_t begin =
      static_cast<size_t>(std::lower_bound(changes_.begin(), changes_.end(), lo,
                                           [](const Change& c, int64_t t) { return c.step < t; }) -
                          changes_.begin());
  for (const std::vector<size_t>& pool : pools_) {
    const auto after = std::lower_bound(pool.begin(), pool.end(), begin);
    if (after != pool.begin()) log.counters.push_back(counter(*(after - 1), lo));
  }
  for (size_t c = begin; c < changes_.size() && changes_[c].step <= hi; ++c)
    log.counters.push_back(counter(c, changes_[c].step));
}

core::TraceLog Timeline::log(const std::string& title, size_t first, size_t last) const {
  const World& w = w_;
  core::TraceLog log;
  log.ranks = w.ranks();
  log.title = title;
  for (int r = 0; r < w.ranks(); ++r) {
    log.threads.push_back({r, 0, "host"});
    for (int s = 0; s < w.num_streams(r); ++s) log.threads.push_back({r, s + 1, w.stream_name(r, s)});
  }
  const std::vector<TraceEvent>& events = w.trace();
  last = std::min(last, events.size());
  for (size_t i = std::min(first, last); i < last; ++i) {
    const TraceEvent& e = events[i];
    const OpInfo& info = w.ops()[e.op];
    core::TraceLog::Slice s;
    s.rank = e.rank;
    s.tid = e.stream + 1;
    s.ts_us = e.step;
    s.dur_us = 1;
    s.op = e.op;
    s.name = e.stream < 0 && info.stream >= 0 ? "issue " + w.name(info.name) : w.name(info.name);
    s.category = e.stream < 0 ? "host" : std::string(to_string(info.kind));
    const auto l = lifetime_of_op_.find(e.op);
    fill_args(w, e.op < w.op_args().size() ? &w.op_args()[e.op] : nullptr,
              l == lifetime_of_op_.end() ? -1 : l->second, s);
    log.slices.push_back(std::move(s));
  }
  // A window keeps the marks and counters of its span; the whole run (or an empty cut), all.
  const bool all = (first == 0 && last == events.size()) || log.slices.empty();
  const int64_t lo = all ? INT64_MIN : log.slices.front().ts_us;
  const int64_t hi = all ? INT64_MAX : log.slices.back().ts_us;
  for (const HostMark& m : w.marks()) {
    if (m.step >= lo && m.step <= hi) log.marks.push_back({m.rank, m.step, m.text});
  }
  add_counters(log, lo, hi);
  return log;
}

core::TraceLog trace_log(const World& w, const std::string& title) {
  return Timeline(w).log(title, 0, w.trace().size());
}

uint64_t combined_digest(const std::vector<uint64_t>& digests) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint64_t d : digests) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (d >> (8 * byte)) & 0xffU;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

}  // namespace shardcheck::sim
