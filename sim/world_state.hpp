// Internal state of sim::World: queued operations, streams, hosts, records (events),
// process groups with their collective instances, and p2p channels. Private to sim/: the
// scheduler, the issue side, the executors and the detectors (detect_*.cpp) share it.
#pragma once

#include <memory>
#include <unordered_map>
#include <utility>
#include <variant>

#include "sim/world.hpp"

namespace shardcheck::sim {

// A stream operation, queued at issue and executed when the scheduler picks its stream: a
// small header and the one call its kind carries. The calls sit in one variant rather than
// side by side (an Op of 488 bytes): the rings of queued operations of every rank are what a
// step touches, and at many ranks they no longer fit in the caches.
struct Transfer {
  core::TensorRef ref;          // upload: the destination; download: the source
  std::vector<std::byte> data;  // upload
  std::span<std::byte> out;     // download
};

struct Op {
  OpKind kind = OpKind::kernel;
  uint32_t id = 0;            // index into op_info_
  uint32_t host_version = 0;  // host clock version to join when it runs
  uint32_t record = kNone;    // record: the record it completes; wait: the record awaited
  uint32_t lifetime = kNone;  // free_async
  int group = -1;             // collective: world group index
  int64_t instance = -1;      // collective: k-th on its group; p2p: k-th on its channel
  std::variant<std::monostate, core::KernelCall, core::CollectiveCall, core::P2PCall, Transfer> call;

  // The call of a kernel, collective, send or recv, upload or download (kind says which).
  const core::KernelCall& kernel() const { return *std::get_if<core::KernelCall>(&call); }
  const core::CollectiveCall& coll() const { return *std::get_if<core::CollectiveCall>(&call); }
  const core::P2PCall& p2p() const { return *std::get_if<core::P2PCall>(&call); }
  const Transfer& transfer() const { return *std::get_if<Transfer>(&call); }
};

// A stream's queued operations, first in first out, in a ring that keeps its capacity: an Op
// is large enough that std::deque allocated a block for almost every push. References to the
// front stay valid until it is popped or something is pushed.
template <class Op>
class OpQueue {
 public:
  OpQueue() = default;
  OpQueue(OpQueue&& o) noexcept
      : buf_(std::exchange(o.buf_, nullptr)),
        cap_(std::exchange(o.cap_, 0)),
        head_(std::exchange(o.head_, 0)),
        size_(std::exchange(o.size_, 0)) {}
  OpQueue& operator=(OpQueue&& o) noexcept {
    if (this != &o) {
      this->~OpQueue();
      new (this) OpQueue(std::move(o));
    }
    return *this;
  }
  ~OpQueue() {
    while (size_ > 0) pop_front();
    std::allocator<Op>().deallocate(buf_, cap_);
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  Op& front() { return buf_[head_]; }
  const Op& front() const { return buf_[head_]; }
  void push_back(Op&& op) {
    if (size_ == cap_) grow();
    std::construct_at(buf_ + ((head_ + size_) & (cap_ - 1)), std::move(op));
    ++size_;
  }
  void pop_front() {
    std::destroy_at(buf_ + head_);
    head_ = (head_ + 1) & (cap_ - 1);
    --size_;
  }

 private:
  void grow() {
    const size_t cap = cap_ == 0 ? 4 : 2 * cap_;  // a power of two
    Op* buf = std::allocator<Op>().allocate(cap);
    for (size_t i = 0; i < size_; ++i) {
      Op* from = buf_ + ((head_ + i) & (cap_ - 1));
      std::construct_at(buf + i, std::move(*from));
      std::destroy_at(from);
    }
    std::allocator<Op>().deallocate(buf_, cap_);
    buf_ = buf;
    cap_ = cap;
    head_ = 0;
  }

  Op* buf_ = nullptr;
  size_t cap_ = 0, head_ = 0, size_ = 0;
};

struct Stream {
  std::string name;
  uint32_t name_id = 0;  // interned name
  bool comm = false;     // not the rank's default stream
  OpQueue<Op> queue;
  uint64_t issued = 0;
  uint64_t executed = 0;
  VectorClock clock;
  uint32_t joined_host_version = 0;
};

struct Host {
  core::Task<> task;
  std::coroutine_handle<> parked;
  enum class Status : uint8_t { not_started, running, parked, done } status = Status::not_started;
  std::vector<uint32_t> wait_records;  // waits until every one has executed, then joins them
  int wait_stream = -1;                // in_order: waits until this op has run (no join)
  uint64_t wait_position = 0;
  VectorClock clock;                  // the current host thread's
  std::vector<VectorClock> versions;  // the host clock after each join; ops carry an index
  // A captured program's host threads (Runtime::set_host_thread): each its own clock, the
  // current one in `clock`; the marks they left (host_signal), and where each free was made
  // (free op -> thread, version), so the thread that takes its block waits for that point,
  // as the allocator's lock makes it. Empty until a second thread appears.
  int thread = 0;
  bool threaded = false;
  std::vector<VectorClock> thread_clocks;
  std::vector<std::string> thread_names;
  std::unordered_map<int, VectorClock> signals;
  std::unordered_map<uint32_t, std::pair<int, uint32_t>> frees;
};

struct Rank {
  std::vector<Stream> streams;
  Host host;
  Heap heap;
  // Address -> lifetimes begun there (a finding's "lifetime" number): per rank, beside its heap,
  // so an allocation's lookup stays among the rank's own lines.
  std::unordered_map<uint64_t, int> generations;
  Shadow shadow;
  std::vector<uint32_t> buffers;       // BufferId -> lifetime index
  std::vector<uint32_t> event_latest;  // EventId -> latest record (kNone: never recorded)
  std::vector<std::string> event_names;
  // EventId -> the interned names of its record and wait operations ("record 'e'").
  std::vector<std::pair<uint32_t, uint32_t>> event_op_names;
  std::vector<int> groups;  // GroupId -> world group index
  // wait_event calls issued while their event had no record yet: as in CUDA, they order nothing.
  struct EarlyWait {
    int stream = 0;
    std::string record;  // "record 'name'": how the event's later records are named
    uint32_t op = 0;     // the wait
  };
  std::vector<EarlyWait> early_waits;
  uint32_t source = kNone;  // Runtime::set_source: the source of the operations issued next
  Rank(core::Allocator m, core::PoolReuse r, int64_t* bytes, int64_t limit, bool values, int index,
       core::PoolGeometry geometry)
      : heap(m, r, bytes, limit, values, index, geometry) {}
};

struct Record {
  int rank = 0;
  int stream = 0;
  bool executed = false;
  VectorClock clock;
  uint32_t op = 0;
};

// The k-th collective of a group, as each member issued it.
struct Instance {
  struct Member {
    bool issued = false;
    int stream = 0;
    uint64_t position = 0;  // its index in the member's stream
    // A p2p half's fingerprint; a collective's is made from the fields below and its group
    // when a finding needs it (World::fingerprint), and compared field by field.
    std::string fingerprint;
    std::string tag;
    core::TensorOrigin origin;  // where its input was made, when the program says
    uint32_t op = 0;
    core::TensorRef input;  // for the layout check of reductions (detect_layout.cpp; no buffer: a list)
    // What the fingerprint is made of, for naming the part that differs.
    core::CollectiveKind kind = core::CollectiveKind::all_reduce;
    core::DType dtype = core::DType::f32;
    int64_t in_numel = 0, out_numel = 0;
    core::ReduceOp reduce = core::ReduceOp::sum;
    int root = 0;
  };
  std::vector<Member> members;
  core::CollectiveKind kind = core::CollectiveKind::all_reduce;
  int issued = 0;
  bool mismatch = false;  // the fingerprints differ: it never runs (set in detect_collective.cpp)
  // Members that issued it and whose stream has run everything issued before it (it is their
  // stream's head): counted once each as that happens (World::arrived), so whether every
  // member can run it is known without visiting the members.
  int at_head = 0;
};

struct Group {
  std::string name;
  std::vector<int> members;     // global ranks, group-rank order
  std::string text;             // group_text(name, members), for fingerprints
  std::vector<int64_t> issued;  // per member: collectives issued so far
  std::deque<Instance> instances;
  int64_t first = 0;  // k of instances.front()
  Instance& at(int64_t k) {
    while (first + static_cast<int64_t>(instances.size()) <= k) {
      instances.emplace_back();
      instances.back().members.resize(members.size());
    }
    return instances[static_cast<size_t>(k - first)];
  }
  // An instance that exists: issued by some member and not yet run by all.
  const Instance& at(int64_t k) const { return instances.at(static_cast<size_t>(k - first)); }
  int index_of(int rank) const {
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] == rank) return static_cast<int>(i);
    }
    return -1;
  }
};

// Point-to-point traffic from one rank to another: the k-th send meets the k-th recv.
struct Channel {
  struct Half {
    bool issued = false;
    int stream = 0;
    uint64_t position = 0;
    int64_t bytes = 0;
    std::string tag;
    uint32_t op = 0;
  };
  std::deque<std::pair<Half, Half>> pairs;  // (send, recv)
  int64_t first = 0;
  int64_t sends = 0, recvs = 0;
  std::pair<Half, Half>& at(int64_t k) {
    while (first + static_cast<int64_t>(pairs.size()) <= k) pairs.emplace_back();
    return pairs[static_cast<size_t>(k - first)];
  }
  const std::pair<Half, Half>& at(int64_t k) const { return pairs.at(static_cast<size_t>(k - first)); }
};

}  // namespace shardcheck::sim
