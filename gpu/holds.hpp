// Forced race replay (`run --backend gpu --force-race`): for each race the simulator found,
// the access the program issued first is held on its stream by a device-side wait on a flag in
// host-mapped memory, and the flag is set on the other access's stream right after that access
// (and so after the allocation that handed it the block). The racing order then happens on
// the hardware every run, not when timing allows.
//
// A hold ends one of four ways, and the run says which:
//  - second_access: the other access ran first, as the race allows: the order was forced;
//  - ordering: the program orders the other access after the held one (a stream or the host
//    waits for work behind the hold), so the forced order cannot happen; the host sets the
//    flag when it sees that ordering, never on a timer. This is what a fix does;
//  - program_end: the program ended without issuing the other access after the held one;
//  - deadline: the device gave up waiting (every hold has one; the wait kernel exits by
//    itself, so the GPU stays usable) and the run ends with an error naming the hold.
// Which streams and events run behind an unreleased hold is tracked as the program issues
// its waits: an event recorded on such a stream, a stream that waits for it, a collective or
// transfer with such a member, a host wait on one.
//   Holds h(sites, 10.0);
//   h.before(rank, s, "rs", "kernel 'x'", stream);   // before enqueueing the op
//   for (int i : h.second_accesses(rank, s, "compute", "kernel 'y'")) h.release_after(i, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace shardcheck::gpu {

// An operation of one rank on one stream: the `occurrence`-th (from 0) operation of that rank
// on that stream with that core::op_name.
struct OpSite {
  int rank = 0;
  std::string stream;
  std::string op;
  uint32_t occurrence = 0;
  std::string text() const;  // "rank 0 'rs' kernel 'x' (#3)"
};

// Run `held` only after `until` has completed. For a reuse race, `until` writes a buffer that
// received the block of the one `held` uses: `handoff_from` (freed) and `handoff_to` (allocated
// after it), on held's rank; the allocation is handed that block, as on the simulator, when
// the allocator may hand it out (empty names: not a reuse race).
struct HoldSite {
  OpSite held;
  OpSite until;
  std::string handoff_from, handoff_to;
};

struct HoldOutcome {
  enum class How : uint8_t { not_reached, second_access, ordering, program_end, deadline };
  How how = How::not_reached;
  std::string why;  // for `ordering`: the wait that orders the two accesses
};
const char* to_string(HoldOutcome::How how);

class Holds {
 public:
  Holds(std::vector<HoldSite> sites, double deadline_seconds);
  ~Holds();
  Holds(const Holds&) = delete;
  Holds& operator=(const Holds&) = delete;

  bool empty() const { return sites_.empty(); }
  size_t size() const { return sites_.size(); }

  // Before an operation is enqueued on `cs` (stream `s`, named `stream`, of `rank`): counts its
  // occurrence and, when it is a held access, enqueues the hold's wait on `cs` first. Call once
  // per operation, before second_accesses.
  void before(int rank, int s, const std::string& stream, const std::string& op, cudaStream_t cs);
  // The holds this operation is the second access of and that are still held. The caller
  // enqueues release_after on the stream once the operation's device work is enqueued. A hold
  // whose held access already runs behind this operation's stream (the program ordered them)
  // is released here by that ordering and not returned.
  std::vector<int> second_accesses(int rank, int s, const std::string& stream, const std::string& op);
  void release_after(int hold, cudaStream_t cs);

  // Reuse races: a buffer of `rank` was freed; the block to hand to the allocation of `buffer`
  // (nullptr: allocate as usual).
  void freed(int rank, const std::string& buffer, void* ptr);
  void* handoff(int rank, const std::string& buffer);

  // The program's orderings, as issued.
  // e recorded on stream s; `label` names it for a host wait ("'rs'", "event 'e' on 'rs'").
  void record(int rank, int s, cudaEvent_t e, const std::string& label);
  // Stream s waits for e; `what` names the wait for a release message.
  void wait(int rank, int s, cudaEvent_t e, const std::string& what);
  // Streams wait for every event in `from` (a collective's members, a transfer's two sides).
  void join(const std::vector<cudaEvent_t>& from, const std::vector<std::pair<int, int>>& streams,
            const std::string& what);

  // The host of `rank` is stuck waiting for `e` and nothing else can run: when `e` runs behind
  // a hold, releases that hold by the ordering and returns true.
  bool release_for_host_wait(int rank, cudaEvent_t e);
  bool behind_hold(cudaEvent_t e) const;
  // The program has ended: every hold still held is released (program_end).
  void release_rest();
  // After the device has synchronized: each hold's outcome, and the deadline misses as an error.
  std::vector<HoldOutcome> outcomes(std::string& error) const;

 private:
  struct State {
    bool armed = false, released = false;
    HoldOutcome outcome;
    std::map<std::pair<int, int>, std::string> streams;  // (rank, stream) behind the hold -> how
    std::map<cudaEvent_t, std::string> events;           // events recorded behind it -> how
  };
  void release_now(int hold, HoldOutcome::How how, const std::string& why);
  const std::string* behind(const State& st, int rank, int s) const;

  std::vector<HoldSite> sites_;
  std::vector<State> state_;
  double deadline_seconds_;
  uint32_t* flags_ = nullptr;  // host-mapped: per hold, [2i] the flag, [2i+1] the wait's status
  uint32_t* device_flags_ = nullptr;
  std::map<std::tuple<int, std::string, std::string>, uint32_t> counts_;  // occurrences so far
  std::map<std::pair<int, int>, std::string> stream_names_;
  std::map<cudaEvent_t, std::string> labels_;
  std::map<std::pair<int, std::string>, void*>
      freed_;  // handoff_from buffers' last free  // what a host wait on the event waits for
  struct Last {
    int stream = -1;
    uint32_t occurrence = 0;
  };
  std::map<int, Last> last_;  // per rank, the operation `before` counted last
  mutable std::mutex mu_;     // NCCL mode: a thread per rank
};

// The device side (gpu/local_comm.cu): a one-thread wait until flag != 0 or the deadline
// (status becomes 1, or 2 when the deadline passed), and the write that releases it.
void launch_hold_wait(uint32_t* flag, uint32_t* status, uint64_t deadline_ns, cudaStream_t stream);
void launch_hold_release(uint32_t* flag, cudaStream_t stream);

}  // namespace shardcheck::gpu
