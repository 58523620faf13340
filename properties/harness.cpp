// One training case on the simulator, through the training-run factory `shardcheck run` uses
// (run/training_run.hpp), with the recorders the properties need plugged into it. The recorders
// only watch: the recording Runtime forwards every call unchanged (each call is still one
// scheduling point) and the observer reads through the world's global view, so the run — its
// schedule and trace digest included — is the one `shardcheck run` makes of the saved file.
#include "properties/harness.hpp"

#include <exception>

#include "core/kernels/kernels.hpp"
#include "core/train/trainer.hpp"
#include "run/training_run.hpp"
#include "sim/explore.hpp"

namespace shardcheck::properties {

namespace {

using CollectiveLog = std::vector<std::pair<std::string, std::string>>;  // (group, fingerprint)

// core::Runtime around another one: every call goes through unchanged; collectives are
// logged with their group, kind, dtype, counts, reduction, root and logical tag.
class RecordingRuntime final : public core::Runtime {
 public:
  RecordingRuntime(core::Runtime& inner, CollectiveLog& log, std::map<std::string, std::vector<int>>& groups)
      : in_(inner), log_(log), groups_(groups) {}

  int rank() const override { return in_.rank(); }
  int world_size() const override { return in_.world_size(); }
  core::StreamId stream(std::string_view name) override { return in_.stream(name); }
  const std::string& stream_name(core::StreamId s) const override { return in_.stream_name(s); }
  core::EventId create_event(std::string_view name) override { return in_.create_event(name); }
  core::GroupId group(std::string_view name, std::span<const int> members) override {
    const core::GroupId g = in_.group(name, members);
    std::string key = std::string(name) + " [";
    for (size_t i = 0; i < members.size(); ++i) key += (i ? "," : "") + std::to_string(members[i]);
    names_[g] = key + "]";
    groups_[key + "]"] = std::vector<int>(members.begin(), members.end());
    return g;
  }
  std::span<const int> group_members(core::GroupId g) const override { return in_.group_members(g); }
  void annotate(core::BufferId b, std::shared_ptr<const core::LogicalMap> map) override {
    in_.annotate(b, std::move(map));
  }
  bool host_may_continue() override { return in_.host_may_continue(); }
  void park(std::coroutine_handle<> h) override { in_.park(h); }

 protected:
  core::BufferId do_alloc(int64_t bytes, core::StreamId s, std::string_view name) override {
    return in_.alloc(bytes, s, name).await_resume();
  }
  void do_free(core::BufferId b) override { (void)in_.free(b); }
  void do_record_stream(core::BufferId b, core::StreamId s) override { (void)in_.record_stream(b, s); }
  void do_record(core::EventId e, core::StreamId s) override { (void)in_.record(e, s); }
  void do_wait_event(core::StreamId s, core::EventId e) override { (void)in_.wait_event(s, e); }
  void do_wait_stream(core::StreamId waiter, core::StreamId waited) override {
    (void)in_.wait_stream(waiter, waited);
  }
  void do_sync(core::StreamId s) override { (void)in_.sync(s); }
  void do_sync_event(core::EventId e) override { (void)in_.sync_event(e); }
  void do_sync_device() override { (void)in_.sync_device(); }
  void do_launch(core::KernelCall call) override { (void)in_.launch(std::move(call)); }
  void do_collective(core::CollectiveCall call) override {
    std::string f = std::string(core::to_string(call.kind)) + " " +
                    std::string(core::to_string(call.input.dtype)) + " " + std::to_string(call.input.numel) +
                    "->" + std::to_string(call.output.numel);
    if (call.kind == core::CollectiveKind::all_reduce || call.kind == core::CollectiveKind::reduce_scatter) {
      f += " " + std::string(core::to_string(call.reduce));
    }
    if (call.kind == core::CollectiveKind::broadcast) f += " root " + std::to_string(call.root);
    f += " '" + call.tag + "'";
    auto it = names_.find(call.group);
    log_.emplace_back(it == names_.end() ? "?" : it->second, std::move(f));
    (void)in_.collective(std::move(call));
  }
  void do_send(core::P2PCall call) override { (void)in_.send(std::move(call)); }
  void do_recv(core::P2PCall call) override { (void)in_.recv(std::move(call)); }
  void do_upload(core::TensorRef dst, core::StreamId s, std::span<const std::byte> data) override {
    (void)in_.upload(dst, s, data);
  }
  void do_download(core::TensorRef src, core::StreamId s, std::span<std::byte> out) override {
    (void)in_.download(src, s, out);
  }

 private:
  core::Runtime& in_;
  CollectiveLog& log_;
  std::map<std::string, std::vector<int>>& groups_;
  std::map<core::GroupId, std::string> names_;
};

struct GradPiece {
  int logical = 0;
  int64_t first = 0;
  std::vector<float> values;
};

class CaseObserver;

// Everything one simulated run records beyond the oracle, built per World (PCT's step
// measurement runs the program once more in a world of its own, whose records are dropped).
struct RunRecord final : run::TrainingRecorder {
  RunRecord(sim::World& w, const core::TrainingSetup& setup, TrainingOutcome& out, bool& recorded);

  core::Runtime& runtime(core::Runtime& rt) override { return *runtimes[rt.rank()]; }
  core::Observer* observer(core::TrainingJudge& oracle) override;
  void after(const run::JudgedTraining& training, sim::World& world, sim::RunResult& r) override;

  sim::World& world;
  const core::TrainingSetup& setup;
  TrainingOutcome& out;
  bool& recorded;
  std::vector<std::unique_ptr<RecordingRuntime>> runtimes;
  std::vector<CollectiveLog> collectives;
  std::map<std::string, std::vector<int>> groups;               // "name [members]" -> members
  std::vector<std::vector<int64_t>> resting_bytes;              // per rank, per step
  std::map<std::pair<int, int>, std::vector<GradPiece>> grads;  // (step, rank)
  std::unique_ptr<CaseObserver> case_observer;
};

// Reads the rank's live bytes and finalized gradients at each step end, then lets the
// training oracle take its snapshot.
class CaseObserver final : public core::Observer {
 public:
  CaseObserver(sim::World& w, RunRecord& rec, core::TrainingJudge& oracle)
      : world_(w), rec_(rec), oracle_(oracle) {}

  core::Task<> on_initialized(core::Runtime& rt, const core::RankView& view) override {
    co_await oracle_.on_initialized(rt, view);
  }

  core::Task<> on_step_end(core::Runtime& rt, int step, const core::RankView& view, double norm,
                           const core::NormPlan& plan) override {
    const int rank = rt.rank();
    rec_.resting_bytes[rank].push_back(world_.live_bytes(rank));
    std::vector<GradPiece>& out = rec_.grads[{step, rank}];
    for (const core::Piece& p : view.grads) {
      const std::span<const std::byte> bytes = world_.read(rank, p.buffer);
      GradPiece g{p.logical, p.first, std::vector<float>(static_cast<size_t>(p.count))};
      for (int64_t i = 0; i < p.count; ++i)
        g.values[i] = static_cast<float>(core::load_element(bytes.data(), p.dtype, p.offset + i));
      out.push_back(std::move(g));
    }
    co_await oracle_.on_step_end(rt, step, view, norm, plan);
  }

 private:
  sim::World& world_;
  RunRecord& rec_;
  core::TrainingJudge& oracle_;
};

void collect(const core::TrainingSetup& setup, const run::JudgedTraining& training, RunRecord& rec,
             TrainingOutcome& out) {
  const core::ModelLayout& m = *setup.model;
  out.steps_completed = training.judge()->steps_completed();
  out.weights = training.weights(out.steps_completed);
  for (int step = 0; step < out.steps_completed; ++step) {
    std::vector<std::vector<float>> g(m.num_logical());
    std::vector<std::vector<bool>> seen(m.num_logical());
    for (int l = 0; l < m.num_logical(); ++l) {
      g[l].assign(static_cast<size_t>(core::numel(m.logical_shape(l))), 0.0f);
      seen[l].assign(g[l].size(), false);
    }
    for (int rank = 0; rank < setup.mesh->world_size(); ++rank) {  // the lowest rank's copy wins
      for (const GradPiece& p : rec.grads[{step, rank}]) {
        for (size_t i = 0; i < p.values.size(); ++i) {
          const size_t e = static_cast<size_t>(p.first) + i;
          if (seen[p.logical][e]) continue;
          seen[p.logical][e] = true;
          g[p.logical][e] = p.values[i];
        }
      }
    }
    out.grads.push_back(std::move(g));
    out.grad_seen.push_back(std::move(seen));
  }
  for (const core::RankResult& r : training.ranks()) out.norms.push_back(r.norms);
  out.resting_bytes = rec.resting_bytes;
  for (const auto& [group, members] : rec.groups) {
    for (int m : members) out.collectives[group][m];  // a member that issued nothing has an empty list
  }
  for (size_t rank = 0; rank < rec.collectives.size(); ++rank) {
    for (const auto& [group, fp] : rec.collectives[rank])
      out.collectives[group][static_cast<int>(rank)].push_back(fp);
  }
}

RunRecord::RunRecord(sim::World& w, const core::TrainingSetup& s, TrainingOutcome& o, bool& r)
    : world(w), setup(s), out(o), recorded(r), collectives(w.ranks()), resting_bytes(w.ranks()) {
  for (int rank = 0; rank < w.ranks(); ++rank)
    runtimes.push_back(std::make_unique<RecordingRuntime>(w.runtime(rank), collectives[rank], groups));
}

core::Observer* RunRecord::observer(core::TrainingJudge& oracle) {
  case_observer = std::make_unique<CaseObserver>(world, *this, oracle);
  return case_observer.get();
}

// Read while the world still exists: the records and the oracle were built against it.
void RunRecord::after(const run::JudgedTraining& training, sim::World&, sim::RunResult& r) {
  collect(setup, training, *this, out);
  out.completed = r.completed && out.steps_completed == setup.config.steps;
  recorded = true;
}

}  // namespace

core::ReferenceResult reference_for(const TrainingCase& c) {
  return core::run_reference(c.config, c.dp_total());
}

TrainingCase distopt_twin(const TrainingCase& c) {
  TrainingCase d = c;
  d.config.strategy = core::Strategy::distopt;
  d.config.mutations = {};
  d.dp = c.dp_total();
  d.dp_outer = d.dp_inner = 1;
  return d;
}

TrainingOutcome run_training_case(const TrainingCase& c, const RunNeeds& needs) {
  TrainingOutcome out;
  try {
    auto setup_or = core::make_training_setup(c.config, c.mesh());
    if (!setup_or) {
      out.error = "the core refuses the case: " + setup_or.error().message();
      return out;
    }
    const core::TrainingSetup setup = std::move(setup_or).value();
    std::optional<core::ReferenceResult> own;
    const core::ReferenceResult* ref = needs.reference;
    if (needs.oracle && !ref) ref = &own.emplace(reference_for(c));
    bool recorded = false;
    std::shared_ptr<const core::TrainingSetup> shared(std::shared_ptr<void>{}, &setup);  // non-owning
    const sim::Factory factory = run::training_factory(
        shared, [ref] { return ref; },
        [&setup, &out, &recorded](sim::World& w) {
          return std::make_shared<RunRecord>(w, setup, out, recorded);
        });
    sim::ExploreOptions eo;
    eo.base = c.sim_options();
    eo.runs = 1;
    const sim::ExploreResult r = sim::explore(factory, eo);
    out.error = r.error;
    out.findings = r.findings;
    out.trace_digest = r.digests.empty() ? 0 : r.digests.front();
    if (!recorded && out.error.empty()) out.error = "the run left no record";
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace shardcheck::properties
