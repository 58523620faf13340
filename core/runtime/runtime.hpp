// core::Runtime: the one interface through which strategy code touches devices, time and
// other ranks (FoundationDB's flow/sim2 idea). The simulator (sim/) and the CUDA backend
// (gpu/) implement it; strategy code never knows which one runs it.
//
// One Runtime per rank. Every operation is issued when called and returns an awaitable; the
// host program co_awaits it, which lets the backend schedule (the simulator interleaves
// ranks there; host syncs suspend until the awaited work has run):
//   Task<> step(Runtime& rt) {
//     StreamId rs = rt.stream("rs");
//     BufferId g = co_await rt.alloc(4096, rs, "grad");
//     co_await rt.launch(kernels::fill(rs, TensorRef::f32(g, 0, 1024), 0.0));
//     co_await rt.sync(rs);
//   }
#pragma once

#include <coroutine>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/base/reduce_op.hpp"
#include "core/base/status.hpp"
#include "core/base/task.hpp"
#include "core/kernels/kernels.hpp"
#include "core/runtime/logical_map.hpp"

namespace shardcheck::core {

// reduce, all_to_all and barrier come from captured programs (docs/capture-format.md).
enum class CollectiveKind : uint8_t {
  all_gather,
  reduce_scatter,
  all_reduce,
  broadcast,
  reduce,
  all_to_all,
  barrier
};
std::string_view to_string(CollectiveKind k);

// Where the tensor a collective carries was made, so that ranks exchanging different tensors of
// one shape are told apart (a collective_swap): the n-th tensor the rank allocated at a line of
// the program, or a parameter that existed before. Unknown (`kind == none`) is never compared.
struct TensorOrigin {
  enum class Kind : uint8_t { none, allocated, parameter };
  Kind kind = Kind::none;
  std::string where;  // allocated: "file:line"; parameter: its name ("fc.weight")
  int64_t nth = -1;   // allocated: the tensors the rank allocated there before it (-1: not said)
  int64_t of = -1;    // allocated: the tensors the rank had allocated there by the collective
  // allocated: the capture saw every free where it happened (the device reports them), so the
  // line is where this very tensor was made (CPU: a new tensor at a freed one's address may be
  // taken for the old one for a while)
  bool exact = true;
};
// Whether two known origins name different tensors: two parameters of other names; tensors made
// at other lines, where both lines are exact; or other places in the order of one line's tensors
// where both ranks had allocated as many there (ranks that allocated different numbers at a line
// number them differently). A parameter and an allocated tensor are not told apart.
bool different_tensors(const TensorOrigin& a, const TensorOrigin& b);
// "the 2nd tensor allocated at t.py:12", "the tensor allocated at t.py:12", "parameter 'fc.weight'";
// "" for none.
std::string to_string(const TensorOrigin& o);

// A collective on a process group. Sizes follow NCCL: all_gather output = input * members,
// reduce_scatter input = output * members, all_reduce, broadcast, reduce and all_to_all input =
// output (in place when input and output are the same range; reduce writes only the root's
// output; all_to_all sends block j of member i's input to block i of member j's output). A
// barrier moves no data: its input and output are empty references. Members contribute in
// group-rank order.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::all_reduce;
  GroupId group = -1;
  StreamId stream = -1;
  TensorRef input;
  TensorRef output;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;     // broadcast: group rank of the source; reduce: of the destination
  std::string tag;  // logical name ("grad:group0"); equal fingerprints, different tags = swap
  // Where the tensor it reads was made; equal fingerprints and tags, different known origins =
  // swap too (captured programs, whose tags name the call, not the tensor).
  TensorOrigin origin = {};
  // The list forms (torch.distributed.all_gather into a list of tensors, reduce_scatter from a
  // list): the side that is a list, one tensor per member in group-rank order, each one
  // member's block (all_gather: output_parts; reduce_scatter: input_parts; all_to_all: either).
  // The whole side (`output` or `input`) then carries only the total size and the dtype, with no
  // buffer (-1). Empty for the tensor forms. Only the simulator runs them (captured programs).
  std::vector<TensorRef> input_parts = {}, output_parts = {};
};

// Point-to-point transfer with rendezvous semantics: a send completes only when the matching
// recv runs on the peer, and both block their streams until then.
struct P2PCall {
  int peer = -1;  // global rank
  StreamId stream = -1;
  TensorRef buffer;
  std::string tag;
  // Transfers match in order per (sender, receiver, channel), like separate communicators:
  // a pipeline keeps activations and their gradients on two channels.
  std::string channel;
};

class Runtime;

// The awaitable every Runtime operation returns. Awaiting it gives the backend a chance to
// suspend the host (a scheduling point, or a host sync that must wait).
template <class T = void>
class [[nodiscard]] Issued;

class Runtime {
 public:
  virtual ~Runtime() = default;

  // Identity and set-up: host-side bookkeeping that never suspends.
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Finds or creates a stream of this rank. The first stream created is the default one.
  virtual StreamId stream(std::string_view name) = 0;
  virtual const std::string& stream_name(StreamId s) const = 0;
  virtual EventId create_event(std::string_view name) = 0;
  // A process group (communicator). Members are global ranks and must include this rank;
  // every member must call this with the same name and members.
  virtual GroupId group(std::string_view name, std::span<const int> members) = 0;
  virtual std::span<const int> group_members(GroupId g) const = 0;

  // Memory. alloc takes a block for `stream` at host time, as a caching allocator does;
  // free acts at host time too (a framework's tensor destructor); record_stream marks a
  // buffer as used by another stream so its block is not reused before that stream passes.
  Issued<BufferId> alloc(int64_t bytes, StreamId stream, std::string_view name);
  // The same, for a buffer whose device address a capture recorded (`address`, never 0): a
  // backend that checks what happened places it there, so two lifetimes share exactly the
  // bytes they shared on the device (blocks the real allocator split or coalesced included);
  // the others ignore the address.
  Issued<BufferId> alloc_at(int64_t bytes, StreamId stream, std::string_view name, uint64_t address);
  Issued<> free(BufferId buffer);
  Issued<> record_stream(BufferId buffer, StreamId stream);

  // Ordering between streams, and between the host and streams.
  Issued<> record(EventId event, StreamId stream);
  Issued<> wait_event(StreamId stream, EventId event);
  Issued<> wait_stream(StreamId waiter, StreamId waited);  // waiter waits for all work so far
  Issued<> sync(StreamId stream);                          // host waits for the stream
  Issued<> sync_event(EventId event);                      // host waits for the event
  Issued<> sync_device();                                  // host waits for every stream

  // Work on streams.
  Issued<> launch(KernelCall call);
  Issued<> collective(CollectiveCall call);
  Issued<> send(P2PCall call);
  Issued<> recv(P2PCall call);
  // Host -> device copy, ordered on `stream`; the data is captured when issued.
  Issued<> upload(TensorRef dst, StreamId stream, std::span<const std::byte> data);
  // Device -> host copy on `stream`; the host waits for it, so `out` is filled on resume.
  Issued<> download(TensorRef src, StreamId stream, std::span<std::byte> out);

  // Says which logical parameter elements a buffer holds (see logical_map.hpp). The
  // simulator checks reductions with it; other backends ignore it.
  virtual void annotate(BufferId, std::shared_ptr<const LogicalMap>) {}

  // Where in the user's program the operations issued next come from, for findings: a
  // captured program (docs/capture-format.md) names each record's Python line and operator,
  // file and line ("train.py", 31). define_source returns a handle for a line (define each
  // once per run); set_source(h) applies to every operation issued until the next call, and
  // kNoSource clears it. Backends that do not report ignore both.
  static constexpr uint32_t kNoSource = 0xffffffffu;
  virtual uint32_t define_source(std::string_view /*file*/, int /*line*/) { return kNoSource; }
  virtual void set_source(uint32_t) {}
  // A named point of the host program (the end of a training step), for timelines: the
  // simulator shows it in a replay's Chrome trace and places findings of that step on it.
  // It issues nothing and orders nothing; backends that keep no timeline ignore it.
  virtual void mark(std::string_view) {}
  // Host threads of a captured program: the operations issued next come from host thread
  // `thread`, called `name` in findings (0, where every rank starts, is the program's own;
  // another starts having waited for nothing). host_signal(s) marks where the current thread stands (a
  // queue's put, a thread's start or end); host_join(s) makes the current thread wait for the latest mark of
  // s (the get, the thread's first step, its join), never for one not yet made. None
  // suspends: the mark was made earlier in issue order. Backends with one host timeline
  // ignore them.
  virtual void set_host_thread(int /*thread*/, std::string_view /*name*/) {}
  virtual void host_signal(int /*signal*/) {}
  virtual void host_join(int /*signal*/) {}

  // --- the backend's side of Issued<> ---
  // True when the host may continue at once (no scheduling point, no pending wait).
  virtual bool host_may_continue() = 0;
  // Suspends the host program; the backend resumes `h` when it may continue.
  virtual void park(std::coroutine_handle<> h) = 0;

 protected:
  virtual BufferId do_alloc(int64_t bytes, StreamId stream, std::string_view name) = 0;
  virtual BufferId do_alloc_at(int64_t bytes, StreamId stream, std::string_view name, uint64_t /*address*/) {
    return do_alloc(bytes, stream, name);
  }
  virtual void do_free(BufferId buffer) = 0;
  virtual void do_record_stream(BufferId buffer, StreamId stream) = 0;
  virtual void do_record(EventId event, StreamId stream) = 0;
  virtual void do_wait_event(StreamId stream, EventId event) = 0;
  virtual void do_wait_stream(StreamId waiter, StreamId waited) = 0;
  virtual void do_sync(StreamId stream) = 0;
  virtual void do_sync_event(EventId event) = 0;
  virtual void do_sync_device() = 0;
  virtual void do_launch(KernelCall call) = 0;
  virtual void do_collective(CollectiveCall call) = 0;
  virtual void do_send(P2PCall call) = 0;
  virtual void do_recv(P2PCall call) = 0;
  virtual void do_upload(TensorRef dst, StreamId stream, std::span<const std::byte> data) = 0;
  virtual void do_download(TensorRef src, StreamId stream, std::span<std::byte> out) = 0;
};

template <class T>
class [[nodiscard]] Issued {
 public:
  Issued(Runtime* rt, T value) : rt_(rt), value_(std::move(value)) {}
  bool await_ready() { return rt_->host_may_continue(); }
  void await_suspend(std::coroutine_handle<> h) { rt_->park(h); }
  T await_resume() { return std::move(value_); }

 private:
  Runtime* rt_;
  T value_;
};

template <>
class [[nodiscard]] Issued<void> {
 public:
  explicit Issued(Runtime* rt) : rt_(rt) {}
  bool await_ready() { return rt_->host_may_continue(); }
  void await_suspend(std::coroutine_handle<> h) { rt_->park(h); }
  void await_resume() {}

 private:
  Runtime* rt_;
};

// How every backend names a stream operation in findings and delay sites:
// "kernel 'fc1.forward'", "reduce_scatter 'grad:block.2'", "send 'act:0:mb1' to 2",
// "recv 'grad:1:mb2' from 2".
std::string op_name(const KernelCall& c);
std::string op_name(const CollectiveCall& c);
std::string op_name(const P2PCall& c, bool send);

// Element counts a collective expects, for validation by every backend.
// Returns an empty string when the call is consistent, else why not.
Status check_collective_shape(const CollectiveCall& c, int members);

}  // namespace shardcheck::core
