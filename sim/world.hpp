// The simulated world: R ranks in one process, each with a host program (a coroutine), named
// streams, events, a caching or stream-ordered allocator over real bytes, and collectives
// that compute real results. One OS thread runs everything; at each step the scheduler picks,
// from the seed, which host program or stream head advances. Detectors (sim/detector.hpp, one
// type per family in sim/detect_<family>.cpp) hear of every access (stream_race,
// uninitialized_read), every collective (collective_mismatch, collective_swap, layout_mismatch)
// and the end state (deadlock) through hooks, and read the world through a WorldView; the world
// is the shared machinery of world.cpp (scheduling), issue.cpp, execute.cpp, definedness.cpp
// and shadow.cpp.
//   sim::World world(options);
//   RunResult r = world.run([&](core::Runtime& rt) -> core::Task<> { ... });
//   r.findings, r.trace_digest, world.read(rank, buffer)
#pragma once

#include <coroutine>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/base/inline_vector.hpp"
#include "core/base/rng.hpp"
#include "core/check/findings.hpp"
#include "core/runtime/runtime.hpp"
#include "sim/clock.hpp"
#include "sim/heap.hpp"
#include "sim/options.hpp"
#include "sim/run_queue.hpp"
#include "sim/shadow.hpp"

namespace shardcheck::sim {

enum class OpKind : uint8_t {
  kernel,
  collective,
  send,
  recv,
  record,
  wait,
  upload,
  download,
  free_async,  // stream ops
  host_alloc,
  host_free,
  host_sync,  // host events
};
std::string_view to_string(OpKind k);

inline constexpr uint32_t kNone = 0xffffffffu;

// What the run remembers of every operation, for reports and traces.
struct OpInfo {
  int32_t rank = 0;
  int32_t stream = -1;  // -1: the host
  OpKind kind = OpKind::kernel;
  uint16_t thread = 0;  // the host thread that issued it (a captured program's; 0: the main one)
  uint32_t name = 0;    // interned description, e.g. "kernel 'backward'"
  int64_t issue_step = 0;
  int64_t exec_step = -1;
  uint32_t epoch = 0;  // the executing stream's clock component (stream ops)
  // Where the user's program issued it (Runtime::set_source): an interned "file:line (op)"
  // of a captured program; kNone for every other program. Findings speak Python with it.
  uint32_t source = kNone;
};

// One allocation: a buffer's lifetime on a block of device memory.
struct Lifetime {
  int rank = 0;
  uint32_t name = 0;  // interned buffer name
  uint64_t addr = 0;
  uint64_t bytes = 0;
  int stream = 0;
  int generation = 1;   // 1 for the first lifetime starting at this address, 2 for the next...
  uint32_t buffer = 0;  // the rank's buffer id: its allocations counted in the host's order
  bool live = true;
  uint32_t alloc_op = kNone;
  uint32_t free_op = kNone;
  std::vector<int> recorded_streams;
};

// Where undefined bytes came from, once an elementwise kernel, collective or p2p carried them
// out of the buffer that never wrote them: that buffer's lifetime, and the first operation that
// carried them (World::carried_origin).
struct UndefOrigin {
  uint32_t lifetime = 0;
  uint32_t op = 0;
};

struct TraceEvent {
  int64_t step = 0;
  int32_t rank = 0;
  int32_t stream = -1;  // -1: the host
  uint32_t op = 0;
};

// What a timeline shows of an operation beyond its name (kept only with record_trace): the
// lifetimes it touched and how many bytes, and for a collective its group and its index there.
struct OpArgs {
  std::vector<uint32_t> lifetimes;  // indices into World::lifetimes(), in the order touched
  int64_t bytes = 0;                // bytes touched, summed over its accesses
  int group = -1;                   // collective: world group index
  int64_t seq = -1;                 // collective: the k-th on its group
};

// A named point of a rank's host program (Runtime::mark), kept only with record_trace.
struct HostMark {
  int64_t step = 0;
  int32_t rank = 0;
  std::string text;
};

struct RunResult {
  std::vector<core::Finding> findings;
  uint64_t trace_digest = 0;
  int64_t steps = 0;
  int64_t ops_executed = 0;   // stream operations run
  int64_t collectives = 0;    // collectives and point-to-point transfers run (each once, not per member)
  int64_t bytes_checked = 0;  // bytes of device memory accesses the detectors checked
  bool completed = false;     // every host program finished and every stream drained
  bool cancelled = false;     // stopped early because Options::cancel was set: a partial run
  std::string error;          // set when a host program threw (an internal error)
  // The run reached the simulator's own bound (simulated device memory, scheduler steps), not
  // a fault of shardcheck: the file needs more than a run may take, and `error` says which.
  // Whatever the cut run had found is not a verdict on the file.
  bool limit = false;
};

class SimRuntime;
class WorldView;
class Detector;
// The world's internal state (sim/world_state.hpp), private to sim/.
struct Op;
struct Transfer;
struct Stream;
struct Host;
struct Rank;
struct Record;
struct Group;
struct Instance;
struct Channel;

class World {
 public:
  explicit World(Options options);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int ranks() const { return options_.ranks; }
  const Options& options() const { return options_; }
  core::Runtime& runtime(int rank);

  // A caller's detector that watches this world's runs after the table's (sim/detectors.cpp):
  // an observer such as sim::CollectiveLog. The world does not own it; it must outlive the run.
  void add_detector(Detector& detector);

  // Runs body on every rank until all finish or nothing can move.
  RunResult run(const std::function<core::Task<>(core::Runtime&)>& body);

  // The global view the oracles use: a rank's live buffer bytes, read without an operation.
  std::span<const std::byte> read(int rank, core::BufferId buffer);
  // Bytes of the buffers a rank holds now (allocated and not yet freed), as requested at
  // allocation: what its memory would be at rest, without allocator rounding or caching.
  int64_t live_bytes(int rank) const;

  // Tables for reports and traces.
  const std::vector<OpInfo>& ops() const { return op_info_; }
  const std::vector<Lifetime>& lifetimes() const { return lifetimes_; }
  const std::vector<TraceEvent>& trace() const { return trace_; }
  // Parallel to ops() up to its size (shorter when the last ops touched nothing); empty
  // without record_trace.
  const std::vector<OpArgs>& op_args() const { return op_args_; }
  const std::vector<HostMark>& marks() const { return marks_; }
  const std::string& group_name(int group) const;
  // An interned name's text; an event operation's name is made here when first read.
  const std::string& name(uint32_t id) const { return id < kLazyName ? names_[id] : lazy_text(id); }
  const std::string& stream_name(int rank, int stream) const;
  int num_streams(int rank) const;

 private:
  friend class SimRuntime;
  friend class WorldView;

  // --- issue side (issue.cpp), called by SimRuntime ---
  int stream_of(int rank, std::string_view name);
  // `at`: the device address a capture recorded (0: none); the lifetime is placed there when
  // the heap can (Heap::place), else where the allocator model puts it.
  core::BufferId alloc(int rank, int64_t bytes, int stream, std::string_view name, uint64_t at = 0);
  void free(int rank, core::BufferId b);
  void record_stream(int rank, core::BufferId b, int stream);
  void annotate(int rank, core::BufferId b, std::shared_ptr<const core::LogicalMap> map);
  uint32_t record(int rank, int stream, std::string_view what);
  uint32_t record(int rank, int stream, uint32_t name);  // `name`: an interned name
  void wait(int rank, int stream, uint32_t record, std::string_view what);
  void wait(int rank, int stream, uint32_t record, uint32_t name);
  void host_wait(int rank, std::vector<uint32_t> records);
  // A captured program's host threads (core::Runtime::set_host_thread): never suspend.
  void host_thread(int rank, int thread, std::string_view name);
  void host_signal(int rank, int signal);
  void host_join(int rank, int signal);
  void launch(int rank, core::KernelCall call);
  void collective(int rank, core::CollectiveCall call);
  void p2p(int rank, core::P2PCall call, bool send);
  void upload(int rank, core::TensorRef dst, int stream, std::span<const std::byte> data);
  void download(int rank, core::TensorRef src, int stream, std::span<std::byte> out);
  void push(int rank, int stream, Op&& op);
  uint32_t new_op(int rank, int stream, OpKind kind, std::string name);
  uint32_t new_op(int rank, int stream, OpKind kind, uint32_t name);
  Lifetime& live_buffer(int rank, core::BufferId b, const char* use);
  void check_ref(int rank, const core::TensorRef& t, const char* use);
  int group_index(int rank, core::GroupId g);
  Channel& channel(int from, int to, const std::string& name);
  // The channel of a queued send or recv issued by `rank`.
  Channel& channel_of(int rank, const Op& op);
  const Channel& channel_of(int rank, const Op& op) const;

  // --- scheduling (world.cpp) ---
  bool host_ready(int rank) const;
  bool stream_ready(int rank, int stream) const;
  // The runnable set is kept up to date rather than rescanned every step (its cost would grow
  // with the rank count): a step marks the slots (a rank's host, or one of its streams) it may
  // have made runnable or not, and only those are looked at again before the next pick.
  //   a stream step: that stream (its head changed) and its rank's host (which may wait on it);
  //   a record: every stream of its rank too (a head may wait on it);
  //   a push onto an empty stream, or a new head: that stream (arrived);
  //   a collective: each member's stream and host, and the streams of the group's next instance
  //   (a communicator runs its instances in order); a transfer: both ends' streams and hosts.
  static constexpr int kSlotsPerRank = 1 + Options::kMaxStreamsPerRank;  // the host, then streams
  static int slot(int rank, int stream) { return rank * kSlotsPerRank + 1 + stream; }  // -1: host
  // Marks a slot (stream -1: the host) to be looked at again before the next pick.
  void mark(int rank, int stream) {
    const size_t sl = static_cast<size_t>(slot(rank, stream));
    if (dirty_flag_[sl]) return;
    dirty_flag_[sl] = 1;
    dirty_.push_back(static_cast<int>(sl));
  }
  void mark_rank(int rank);  // the host and every stream
  void refresh(int slot);
  // Stream `stream` of `rank` has a new head: it is marked, a collective counts the member as
  // arrived, a transfer lets its peer look again.
  void arrived(int rank, int stream);
  // Options::verify_scheduler: the runnable set against a full scan of the world.
  void verify_runnable();
  int pick();
  void step_host(int rank);
  void step_stream(int rank, int stream);

  // --- execution (execute.cpp): operations run, and every access is recorded in the shadow ---
  void begin(int rank, int stream, Op& op);
  void finish(int rank, int stream, Op& op);
  void execute_kernel(int rank, int stream, Op& op);
  void execute_collective(int rank, int stream);
  void move_collective_data(const Group& g, const std::vector<Op*>& ops);
  void join_members(Group& g, const Instance& inst, std::vector<Op*>& ops, int64_t k);
  void execute_p2p(int rank, int stream);
  void execute_transfer(int rank, int stream, Op& op);
  void execute_free(int rank, int stream, Op& op);
  void touch(int rank, int stream, uint32_t op, const core::TensorRef& t, Access kind);
  void touch_range(int rank, int stream, uint32_t op, uint32_t lifetime, uint64_t a, uint64_t b, Access kind);
  uint64_t address(int rank, const core::TensorRef& t);
  std::byte* host_pointer(int rank, const core::TensorRef& t);

  // --- definedness (definedness.cpp): the shadow's record of bytes never written, carried by
  // elementwise kernels, collectives and p2p; reads that consume them go to the detectors ---
  // Undefined bytes relative to a tensor's start; `origin` receives the first range's (0: the
  // tensor's own never-written bytes).
  Shadow::Ranges undefined_rel(int rank, const core::TensorRef& t, uint32_t* origin = nullptr);
  void set_undefined_rel(int rank, const core::TensorRef& t, const Shadow::Ranges& rel, uint32_t origin);
  void check_defined(int rank, uint32_t op, const core::TensorRef& t);
  // The same for one side of a collective (its tensor, or a list form's parts end to end), bytes
  // relative to the side's start; `origin` (if still 0) receives what op carries them under.
  Shadow::Ranges undefined_side(int rank, uint32_t op, std::span<const core::TensorRef> parts,
                                uint32_t& origin);
  void set_undefined_side(int rank, std::span<const core::TensorRef> parts, const Shadow::Ranges& rel,
                          uint32_t origin);
  // The origin that op carries undefined bytes of t under: `found` (undefined_rel's) when they
  // came from elsewhere, else t's own lifetime with op as its first carrier (one per lifetime).
  uint32_t carried_origin(int rank, const core::TensorRef& t, uint32_t found, uint32_t op);
  const UndefOrigin& undef_origin(uint32_t id) const { return undef_origins_[id - 1]; }
  using ElementRanges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end) in elements
  // Checks the inputs of a kernel that consumes them; for an elementwise kernel, returns
  // instead the undefined elements that its outputs inherit, and their origin.
  ElementRanges check_kernel_inputs(int rank, uint32_t op, const core::KernelCall& k, uint32_t& origin);
  void set_kernel_outputs_undefined(int rank, const core::KernelCall& k, const ElementRanges& elems,
                                    uint32_t origin);
  // Member m's undefined output bytes, from every member's undefined input bytes.
  static Shadow::Ranges collective_undefined_rel(const core::CollectiveCall& c,
                                                 const std::vector<Shadow::Ranges>& undef, size_t m);

  // --- detectors (detector.hpp): the hooks, each calling the detectors that ask for it ---
  template <class F>
  void notify(unsigned hook, F call);
  bool asks(unsigned hook) const;  // some detector asks for the hook
  // The k-th collective of `group` (or p2p transfer on a channel) has been issued by all.
  void all_issued(int group, Instance& inst, int64_t k);
  void all_issued(int from, int to, const Channel& ch, int64_t k);

  // run()'s parts (world.cpp): PCT's priorities and change points, the scheduler loop, the end.
  void seed_pct();
  void pct_demote(int last, size_t& next_change);
  bool schedule();
  void end_run(RunResult& result);
  // --- shared (world.cpp) ---
  uint32_t intern(std::string_view s);
  // The names of an event's record and wait operations ("record 'e'", "wait_event 'e'"): a
  // captured program makes an event per event id, so interning both names of every event, every
  // schedule, cost a hash, two strings and a map entry each. Their ids count from kLazyName
  // instead, with the hash the trace digest takes, and their text is made only where it is read
  // (findings and traces name few of them). Two events never share an id, whatever their names.
  static constexpr uint32_t kLazyName = 0x80000000u;
  struct LazyName {
    int32_t rank;
    uint32_t event;
    bool wait;
  };
  uint32_t event_op_name(int rank, uint32_t event, bool wait);
  const std::string& lazy_text(uint32_t id) const;
  uint64_t name_hash(uint32_t id) const {
    return id < kLazyName ? name_hashes_[id] : lazy_hashes_[id - kLazyName];
  }
  // The names the issue side gives every operation ("alloc 'act' on 'compute'"), interned once
  // per form and parts: `key` packs the form and the parts' ids (name_key), `make` builds the
  // text the first time. A repeated operation then costs a lookup, not a string and its hash.
  enum class NameForm : uint8_t { alloc, free, kernel, collective, wait_stream, constant };
  static uint64_t name_key(NameForm form, uint32_t a, uint32_t b = 0) {
    return static_cast<uint64_t>(form) << 56 | static_cast<uint64_t>(a) << 28 | b;
  }
  template <class F>
  uint32_t cached_name(NameForm form, uint32_t a, uint32_t b, F make) {
    if (a >= (1u << 28) || b >= (1u << 28)) return intern(make());  // beyond the key's room
    const auto [it, fresh] = name_cache_.try_emplace(name_key(form, a, b), 0);
    if (fresh) it->second = intern(make());
    return it->second;
  }
  // Participants number each rank's host and streams for vector clocks, PCT priorities and
  // the trace digest. A rank's host and its first kDenseStreams streams keep the numbers
  // rank * (1 + kDenseStreams) + {0, 1 + stream}, the layout every pinned digest was made
  // with; streams past those follow all ranks' dense ones, kMaxStreamsPerRank - kDenseStreams
  // numbers per rank. Vector clocks index streams their own way (clock_index).
  static constexpr int kDenseStreams = 12;
  static constexpr int kDenseStride = 1 + kDenseStreams;
  static constexpr int kExtraStride = Options::kMaxStreamsPerRank - kDenseStreams;
  int dense_participants() const { return ranks() * kDenseStride; }
  void set_source(int rank, uint32_t id);
  void mark(int rank, std::string_view text);
  // The timeline arguments of op `op`, grown on demand (record_trace only).
  OpArgs& args_of(uint32_t op);
  // The source of op `op`, or "" when it has none.
  const std::string& source_of(uint32_t op) const;
  // The program's line of op `op` as data (empty when it has none).
  core::SourceLine source_line(uint32_t op) const;
  // A source line's handle for Runtime::set_source: the interned "file:line".
  uint32_t define_source(std::string_view file, int line);
  // How findings name op `op`: its name ("kernel 'fc1.forward'"), or, with a source, the
  // operator and its Python line ("aten::add_ at train.py:40", "reduce_scatter 'grad' at ...").
  std::string op_text(uint32_t op) const;
  bool is_comm(uint32_t op) const;  // a collective, send or recv
  // A host thread of `rank` other than `except` whose clock covers stream op `op` (it has
  // waited for it), or -1; and a host thread's name ("" when the capture gave none).
  int host_thread_after(int rank, uint32_t op, int except) const;
  const std::string& host_thread_name(int rank, int thread) const;
  // A group as fingerprints name it: "name [0,1,2,3]", made once per group.
  static std::string group_text(const std::string& group, const std::vector<int>& members);
  int participant(int rank, int stream) const {
    if (stream < kDenseStreams) return rank * kDenseStride + 1 + stream;
    return dense_participants() + rank * kExtraStride + (stream - kDenseStreams);
  }
  int host_participant(int rank) const { return rank * kDenseStride; }
  // A stream's component in the vector clocks (and the `participant` of its AccessRecs):
  // stream-major, every rank's stream 0, then every rank's stream 1, and so on, so the few
  // streams a program uses fill whole chunks and the others never get one; hosts never tick
  // and have none. Participant numbers stay as they are for PCT and the digest.
  uint32_t clock_index(int rank, int stream) const {
    return static_cast<uint32_t>(stream) * static_cast<uint32_t>(ranks()) + static_cast<uint32_t>(rank);
  }
  int clock_stream(uint32_t index) const { return static_cast<int>(index / static_cast<uint32_t>(ranks())); }
  // The rank of participant e, and its stream (-1: the host).
  std::pair<int, int> rank_stream(int e) const {
    if (e < dense_participants()) return {e / kDenseStride, e % kDenseStride - 1};
    const int x = e - dense_participants();
    return {x / kExtraStride, kDenseStreams + x % kExtraStride};
  }

  Options options_;
  core::Rng rng_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<std::unique_ptr<SimRuntime>> runtimes_;
  std::vector<Record> records_;
  std::vector<Group> groups_;
  std::map<std::tuple<int, int, std::string>, Channel> channels_;
  std::vector<OpInfo> op_info_;
  std::vector<Lifetime> lifetimes_;
  std::vector<std::shared_ptr<const core::LogicalMap>> lifetime_maps_;  // parallel to lifetimes_
  // Parallel to lifetimes_: the host bytes behind each block (nullptr without values), so an
  // access finds them without searching its rank's segments.
  std::vector<std::byte*> lifetime_bytes_;
  std::vector<TraceEvent> trace_;
  std::vector<OpArgs> op_args_;
  std::vector<HostMark> marks_;
  std::vector<std::string> names_;
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_ids_;
  std::unordered_map<uint64_t, uint32_t> name_cache_;  // cached_name
  std::vector<uint64_t> name_hashes_;
  std::vector<LazyName> lazy_names_;  // event_op_name's, id kLazyName + k
  std::vector<uint64_t> lazy_hashes_;
  mutable std::unordered_map<uint32_t, std::string> lazy_texts_;  // made by lazy_text
  core::FindingList findings_;
  std::vector<UndefOrigin> undef_origins_;            // origin id k is undef_origins_[k - 1]
  std::unordered_map<uint32_t, uint32_t> origin_of_;  // lifetime -> its origin id
  std::vector<int64_t> pct_priority_;
  std::vector<int64_t> pct_change_steps_;
  int64_t step_ = 0;
  RunQueue run_queue_;
  std::vector<int> dirty_;           // slots to look at again before the next pick
  std::vector<uint8_t> dirty_flag_;  // per slot: in dirty_
  int64_t ops_executed_ = 0;
  int64_t collectives_ = 0;
  int64_t bytes_checked_ = 0;
  int64_t device_bytes_ = 0;
  uint64_t digest_ = 0xcbf29ce484222325ULL;
  std::vector<Shadow::Conflict> conflicts_;
  Shadow::Ranges ranges_;
  int participants_ = 0;
  bool diverged_ = false;                             // a collective's members disagreed: it never runs
  bool sources_seen_ = false;                         // a captured program named its operations' Python lines
  std::vector<std::unique_ptr<Detector>> detectors_;  // in detector_table()'s order
  std::vector<Detector*> hooked_[7];                  // per hook (bit index): those that ask for it
  std::unordered_map<uint32_t, core::SourceLine> source_lines_;  // define_source's, by handle
};

}  // namespace shardcheck::sim
