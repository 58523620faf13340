// Detectors as parts of the simulator. Each finding family is a type of its own
// (sim/detect_<family>.cpp) that owns its state, sees the world through a read-only WorldView
// and is called by the world at a few hooks: an access the shadow checked, a read of bytes
// never written, an allocation, a free, a collective or p2p transfer every member has issued,
// and the end of the run. The world calls, for each hook, only the detectors that ask for it,
// in the order of kDetectors; a new detector is a type and one row there.
//   for (auto& d : make_detectors()) ...   // what World does at construction
#pragma once

#include <bit>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/world_state.hpp"

namespace shardcheck::sim {

// The world as a detector may see it: everything readable, nothing writable.
class WorldView {
 public:
  explicit WorldView(const World& w) : w_(w) {}

  const Options& options() const { return w_.options_; }
  int ranks() const { return w_.ranks(); }
  const Rank& rank(int r) const { return *w_.ranks_[static_cast<size_t>(r)]; }
  const Stream& stream(int r, int s) const { return rank(r).streams[static_cast<size_t>(s)]; }
  int num_streams(int r) const { return w_.num_streams(r); }
  const Record& record(uint64_t i) const { return w_.records_[i]; }
  const Group& group(int g) const { return w_.groups_[static_cast<size_t>(g)]; }
  const Channel& channel_of(int rank, const Op& op) const { return w_.channel_of(rank, op); }
  const std::vector<OpInfo>& ops() const { return w_.op_info_; }
  const OpInfo& op(uint32_t i) const { return w_.op_info_[i]; }
  const Lifetime& lifetime(uint32_t i) const { return w_.lifetimes_[i]; }
  const core::LogicalMap* layout(uint32_t lifetime) const { return w_.lifetime_maps_[lifetime].get(); }
  const UndefOrigin& undef_origin(uint32_t id) const { return w_.undef_origin(id); }
  const std::string& name(uint32_t id) const { return w_.name(id); }
  // How findings name an operation, its Python line as text and as data (World::op_text).
  std::string op_text(uint32_t op) const { return w_.op_text(op); }
  const std::string& source_of(uint32_t op) const { return w_.source_of(op); }
  core::SourceLine source_line(uint32_t op) const { return w_.source_line(op); }
  bool is_comm(uint32_t op) const { return w_.is_comm(op); }  // a collective, send or recv
  int host_thread_after(int r, uint32_t op, int except) const { return w_.host_thread_after(r, op, except); }
  const std::string& host_thread_name(int r, int t) const { return w_.host_thread_name(r, t); }
  int64_t step() const { return w_.step_; }
  bool host_ready(int r) const { return w_.host_ready(r); }
  bool stream_ready(int r, int s) const { return w_.stream_ready(r, s); }
  // Participants (a rank's host and streams) as PCT, the digest and the wait-for graph number them.
  int participants() const { return w_.participants_; }
  int participant(int r, int s) const { return w_.participant(r, s); }
  int host_participant(int r) const { return w_.host_participant(r); }
  std::pair<int, int> rank_stream(int e) const { return w_.rank_stream(e); }
  int clock_stream(uint32_t index) const { return w_.clock_stream(index); }
  bool sources_seen() const { return w_.sources_seen_; }  // a captured program named Python lines
  bool diverged() const { return w_.diverged_; }          // a collective's members disagreed

 private:
  const World& w_;
};

using Findings = core::FindingList;  // a finding found again is counted in constant time

// A stream's access, after the shadow compared it with the earlier accesses of its bytes.
struct AccessEvent {
  int rank = 0;
  const AccessRec& access;
  Access kind;
  const VectorClock& clock;                     // the stream's, when it accessed
  std::span<const Shadow::Conflict> conflicts;  // earlier accesses it is not ordered after
};

// A read that consumes bytes never written in their lifetime (a kernel that is not
// elementwise, a download).
struct UndefinedRead {
  int rank = 0;
  uint32_t op = 0;
  const core::TensorRef& tensor;
  const Shadow::Ranges& undefined;  // relative to the tensor's first byte
  uint32_t origin = 0;              // where they came from (WorldView::undef_origin); 0: the tensor's own
};

// An allocation, with the same-stream blocks that only their record_stream events held back
// (caching allocator): it could have taken them had those streams run ahead.
struct AllocEvent {
  struct Held {
    uint64_t size = 0;
    uint64_t free_op = 0;
    std::span<const uint64_t> records;  // the record_stream events that held it back (during the hook)
  };
  int rank = 0;
  uint32_t lifetime = 0;
  uint64_t taken_size = 0;  // the size of the reused block it took; 0: a fresh one
  std::span<const Held> held;
};

// A free under the caching allocator: its block returns to the pool, after `held_back`
// record_stream events when there are any.
struct FreeEvent {
  int rank = 0;
  uint32_t lifetime = 0;
  uint64_t free_op = 0;
  bool held_back = false;
};

// The k-th collective of a group, once every member has issued it. A detector that explains
// it sets `explained` (later ones then count it but add no finding of their own); one that
// finds the members disagree sets `diverged`, and the world never runs it.
struct CollectiveEvent {
  int group = 0;
  const Instance& instance;
  int64_t k = 0;
  bool explained = false;
  bool diverged = false;
};

// The k-th transfer from `from` to `to` on a channel, once both halves are issued.
struct P2PEvent {
  int from = 0, to = 0;
  const Channel& channel;
  int64_t k = 0;
};

// The end of a run: whether everything finished, and whether it ended by itself (no internal
// error, not cancelled), so that the end state means something.
struct RunEnd {
  bool done = false;
  bool whole = false;
};

class Detector {
 public:
  enum Hook : unsigned {
    on_access = 1u << 0,
    on_undefined_read = 1u << 1,
    on_alloc = 1u << 2,
    on_free = 1u << 3,
    on_collective = 1u << 4,
    on_p2p = 1u << 5,
    on_end = 1u << 6,
  };
  virtual ~Detector() = default;
  virtual unsigned hooks() const = 0;  // the hooks it asks for
  virtual void access(const WorldView&, const AccessEvent&, Findings&) {}
  virtual void undefined_read(const WorldView&, const UndefinedRead&, Findings&) {}
  virtual void alloc(const WorldView&, const AllocEvent&) {}
  virtual void free(const WorldView&, const FreeEvent&) {}
  virtual void collective(const WorldView&, CollectiveEvent&, Findings&) {}
  virtual void p2p(const WorldView&, const P2PEvent&, Findings&) {}
  virtual void end(const WorldView&, const RunEnd&, Findings&) {}
};

// One row per detector: its family (the FindingKindInfo::family of the kinds it reports) and
// how to make one. The order is the order hooks are called in.
struct DetectorEntry {
  std::string_view family;
  std::unique_ptr<Detector> (*make)();
};
std::span<const DetectorEntry> detector_table();

inline bool World::asks(unsigned hook) const { return !hooked_[std::countr_zero(hook)].empty(); }

template <class F>
void World::notify(unsigned hook, F call) {
  const std::vector<Detector*>& asked = hooked_[std::countr_zero(hook)];
  if (asked.empty()) return;
  const WorldView view(*this);
  for (Detector* d : asked) call(*d, view);
}

std::unique_ptr<Detector> make_race_detector();
std::unique_ptr<Detector> make_uninit_detector();
std::unique_ptr<Detector> make_layout_detector();
std::unique_ptr<Detector> make_collective_detector();
std::unique_ptr<Detector> make_deadlock_detector();

}  // namespace shardcheck::sim
