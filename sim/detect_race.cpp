// Reports stream_race. For every access, touch_range (execute.cpp) asks the shadow which earlier
// accesses of the same bytes, in any lifetime of the block (allocator reuse), the stream's clock does
// not cover; each becomes a finding here: both accesses, the missing edge and the fixes.
#include <algorithm>

#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/base/inline_vector.hpp"
#include "sim/detector.hpp"

namespace shardcheck::sim {

namespace {
std::string q(const std::string& s) { return "'" + s + "'"; }

std::string access_verb(Access k) {
  switch (k) {
    case Access::read:
      return "reads";
    case Access::write:
      return "writes";
    case Access::free:
      return "frees";
  }
  return "?";
}

// An operation as the de-duplication key names it: a send or recv without its peer rank, which
// differs across ranks for one line of the program ("recv 'g' from 2" on rank 0, "from 3" on 1).
bool is_p2p(const WorldView& w, uint32_t op) {
  const OpKind k = w.op(op).kind;
  return k == OpKind::send || k == OpKind::recv;
}

std::string key_op(const std::string& op) {
  if (op.rfind("send '", 0) == 0 || op.rfind("recv '", 0) == 0) return op.substr(0, op.rfind('\'') + 1);
  return op;
}

// A race between lifetimes of one block: the places of the free that handed the block on and
// of the allocation that took it.
void mark_reuse(const WorldView& w, core::RaceDetail& d, bool reuse, const Lifetime& freed,
                const Lifetime& taken) {
  d.reuse = reuse;
  if (!reuse) return;
  if (taken.alloc_op != kNone) d.allocated = w.source_line(taken.alloc_op);
  if (freed.free_op != kNone) d.freed = w.source_line(freed.free_op);
}

core::AccessSite site(const WorldView& w, int rank, const AccessRec& a, Access kind, uint64_t begin,
                      uint64_t end, int64_t now) {
  const int stream = a.participant == kNoParticipant ? -1 : w.clock_stream(a.participant);
  const OpInfo& info = w.op(a.op);
  const Lifetime& l = w.lifetime(a.lifetime);
  core::AccessSite s;
  s.rank = rank;
  s.stream = stream >= 0 ? w.rank(rank).streams[stream].name : "host";
  s.op = w.op_text(a.op);
  s.step = info.exec_step >= 0 ? info.exec_step : now;
  s.op_id = a.op;
  s.buffer = w.name(l.name);
  s.lifetime = l.generation;
  s.address = l.addr;
  s.byte_begin = static_cast<int64_t>(begin - l.addr);
  s.byte_end = static_cast<int64_t>(end - l.addr);
  s.write = kind != Access::read;
  s.source = w.source_line(a.op);
  return s;
}

// Why a wait_event on b's stream, issued before its event was first recorded (on a's stream),
// does not order a before b; empty when there is no such wait.
std::string early_wait_reason(const WorldView& w, int rank, const AccessRec& a, const AccessRec& b) {
  const Rank& r = w.rank(rank);
  auto access_stream = [&w](const AccessRec& x) {
    return x.participant == kNoParticipant ? -1 : w.clock_stream(x.participant);
  };
  const int sa = access_stream(a), sb = access_stream(b);
  if (sa < 0 || sb < 0) return "";
  for (const auto& early : r.early_waits) {
    if (early.stream != sb || early.op > b.op) continue;
    for (uint32_t i = early.op + 1; i < w.ops().size(); ++i) {
      const OpInfo& o = w.op(i);
      if (o.rank == rank && o.stream == sa && o.kind == OpKind::record && w.name(o.name) == early.record) {
        const std::string ev = early.record.substr(7);  // "record 'x'" -> "'x'"
        return q(r.streams[sb].name) + " waits for " + ev + " before " + ev +
               " is ever recorded, so the wait orders nothing (an event with no record counts as " +
               "complete) and the later record on " + q(r.streams[sa].name) + " does not reach back to it";
      }
    }
  }
  return "";
}

bool race_sites(const WorldView& w, int rank, const AccessRec& a, Access a_kind, const AccessRec& b,
                Access b_kind, bool reuse, int64_t now, core::RaceDetail& d) {
  const Lifetime& la = w.lifetime(a.lifetime);
  const Lifetime& lb = w.lifetime(b.lifetime);
  d.first = site(w, rank, a, a_kind, la.addr, la.addr + la.bytes, now);
  d.second = site(w, rank, b, b_kind, lb.addr, lb.addr + lb.bytes, now);
  d.first.step = w.op(a.op).exec_step >= 0 ? w.op(a.op).exec_step : now;
  d.second.step = w.op(b.op).exec_step >= 0 ? w.op(b.op).exec_step : now;
  mark_reuse(w, d, reuse, la, lb);
  // A held reuse (report_held_reuse_races) pairs lifetimes that do not share bytes in this
  // schedule: the block was kept back, so the new lifetime sits elsewhere.
  if (!reuse) return true;
  // Name the lifetimes of the bytes the two share: a split block's later lifetime may begin at
  // another address (generation 1 there), yet it is a later lifetime of these bytes.
  const uint64_t lo = std::max(la.addr, lb.addr), hi = std::min(la.addr + la.bytes, lb.addr + lb.bytes);
  int later = 0;
  for (uint32_t i = a.lifetime + 1; i <= b.lifetime; ++i) {
    const Lifetime& l = w.lifetime(i);
    if (l.rank == rank && l.addr < hi && lo < l.addr + l.bytes) ++later;
  }
  d.second.lifetime = d.first.lifetime + std::max(later, 1);
  return lo < hi;
}

// `host`: who issued the second access ("the host"; with several host threads, which one).
std::string missing_edge(const WorldView& w, int rank, const AccessRec& a, const AccessRec& b,
                         const core::RaceDetail& d, const std::string& host) {
  const auto& A = d.first;
  const auto& B = d.second;
  if (d.reuse) {
    return "the block was handed from " + q(A.buffer) + " to " + q(B.buffer) + " while " + A.op + " on " +
           q(A.stream) + " could still be running: nothing made " + q(B.stream) + " wait for " + q(A.stream) +
           " after it, the host did not sync with " + q(A.stream) +
           ", and no record_stream held the block back";
  }
  if (const std::string early = early_wait_reason(w, rank, a, b); !early.empty()) {
    return "no happens-before edge from " + A.op + " on " + q(A.stream) + " to " + B.op + " on " +
           q(B.stream) + ": " + early;
  }
  return "no happens-before edge from " + A.op + " on " + q(A.stream) + " to " + B.op + " on " + q(B.stream) +
         ": " + q(B.stream) + " never waits for an event recorded on " + q(A.stream) + " after it, and " +
         host + " never syncs with " + q(A.stream) + " before issuing " + B.op;
}

// A captured program's host threads: another thread than the one that issued the second access
// has waited for the first's stream, but nothing orders that wait before the second (a batch
// handed over before the prefetch thread's synchronize()). "" when no thread has.
struct ThreadGap {
  std::string missing;  // appended to the missing edge
  std::string fix;
  std::string issuer;  // "the program's main thread", "host thread 'loader'"
};
ThreadGap thread_gap(const WorldView& w, int rank, const AccessRec& a, const AccessRec& b,
                     const core::RaceDetail& d) {
  const int issuer = w.op(b.op).thread;
  const int waited = w.host_thread_after(rank, a.op, issuer);
  if (waited < 0) return {};
  auto label = [&](int t) {
    const std::string& name = w.host_thread_name(rank, t);
    return t == 0 ? std::string("the program's main thread")
                  : "host thread " + (name.empty() ? "#" + std::to_string(t) : q(name));
  };
  const std::string sa = q(d.first.stream);
  return {"; " + label(waited) + " waits for " + sa + " after " + d.first.op +
              ", but nothing orders that wait before " + d.second.op + ", which " + label(issuer) +
              " issued (host threads order each other through Thread.start and join, a queue's put and get, "
              "an Event's set and wait, a Semaphore's release and acquire, a Barrier's wait, the release and "
              "acquire of a Lock or Condition, ThreadPoolExecutor.submit and Future.result)",
          "on " + label(waited) + ", hand the " + (d.reuse ? d.second.buffer : d.first.buffer) +
              " over (queue put, Event set, lock release) only after its wait for " + sa +
              ", so the thread that takes it is ordered after that wait",
          label(issuer)};
}

void race_summary(int rank, Access b_kind, bool shares_bytes, const std::string& alloc_stream,
                  core::RaceDetail& d, core::Finding& f) {
  const auto& A = d.first;
  const auto& B = d.second;
  if (b_kind == Access::free) {
    f.summary = "rank " + std::to_string(rank) + ": the free of " + q(B.buffer) + " on " + q(B.stream) +
                " may run before " + A.op + " on " + q(A.stream) + " is done with it";
    d.fixes = {"make " + q(B.stream) + " wait for an event recorded on " + q(A.stream) + " after " + A.op +
                   " before the free",
               "call record_stream(" + q(A.buffer) + ", " + q(A.stream) + ") before freeing it",
               "allocate " + q(A.buffer) + " on " + q(A.stream) + ", the stream that uses it last"};
  } else if (d.reuse) {
    f.summary =
        "rank " + std::to_string(rank) + ": the block of " + q(A.buffer) + " (lifetime " +
        std::to_string(A.lifetime) + ") " +
        // A block only record_stream events kept back (report_held_reuse_races).
        (shares_bytes ? "is reused by " + q(B.buffer) + " (lifetime " + std::to_string(B.lifetime) + ")"
                      : "can be handed to " + q(B.buffer) + " once the record_stream events complete") +
        ": " + B.op + " on " + q(B.stream) + " " + access_verb(b_kind) + " it while " + A.op + " on " +
        q(A.stream) + " may still " + (A.write ? "write" : "read") + " it";
    d.fixes = {"call record_stream(" + q(A.buffer) + ", " + q(A.stream) + ") before freeing " + q(A.buffer) +
                   ", so its block is not reused until " + q(A.stream) + " is done with it",
               "allocate " + q(A.buffer) + " on " + q(A.stream) + " (it is allocated on " + q(alloc_stream) +
                   "), so the block returns to the pool of the stream that uses it last",
               "before freeing " + q(A.buffer) + ", make " + q(B.stream) + " wait for an event recorded on " +
                   q(A.stream) + " after " + A.op,
               "keep " + q(A.buffer) +
                   " allocated across steps (a persistent buffer), so its block is never reused"};
    if (alloc_stream == A.stream) d.fixes.erase(d.fixes.begin() + 1);
  } else {
    f.summary = "rank " + std::to_string(rank) + ": " + B.op + " on " + q(B.stream) + " " +
                access_verb(b_kind) + " " + q(B.buffer) + " while " + A.op + " on " + q(A.stream) +
                " may still " + (A.write ? "write" : "read") + " it";
    d.fixes = {"record an event on " + q(A.stream) + " after " + A.op + " and make " + q(B.stream) +
                   " wait for it (wait_event) before " + B.op,
               "or make " + q(B.stream) + " wait for " + q(A.stream) + " (wait_stream) before " + B.op};
  }
}

// A reuse race in PyTorch's words: the free, the allocation the block went to, and the fixes;
// returns the "handed over" line of the explanation.
std::string python_reuse(const WorldView& w, int rank, const AccessRec& a, const AccessRec& b, Access b_kind,
                         bool shares_bytes, core::RaceDetail& d, core::Finding& f) {
  const auto& A = d.first;
  const auto& B = d.second;
  const std::string sa = q(A.stream), sb = q(B.stream);
  const Lifetime& la = w.lifetime(a.lifetime);
  const Lifetime& lb = w.lifetime(b.lifetime);
  const bool free_known = la.free_op != kNone && !w.source_of(la.free_op).empty();
  const std::string freed = free_known ? "freed at " + w.source_of(la.free_op) : "freed";
  const std::string& alloc_b = lb.alloc_op != kNone ? w.source_of(lb.alloc_op) : A.buffer;
  const std::string free_at = free_known ? "the free at " + w.source_of(la.free_op) : "its free";
  f.summary = "rank " + std::to_string(rank) + ": the " + A.buffer + " is " + freed + " while " + A.op +
              " on stream " + sa + " may still " + (A.write ? "write" : "read") + " it; its block " +
              (shares_bytes ? "goes" : "can go, once its record_stream events complete,") +
              " to the tensor allocated at " + alloc_b + ", which " + B.op + " on stream " + sb + " " +
              access_verb(b_kind);
  d.missing_edge = "nothing orders " + A.op + " before " + free_at + ": the host does not wait for stream " +
                   sa + " (no work.wait(), wait_stream or synchronize) and no record_stream on " + sa +
                   " holds the block back";
  if (w.is_comm(a.op)) {
    d.fixes = {"call work.wait() on the work handle of " + A.op + " (or pass async_op=False) before " +
                   free_at +
                   ": the current stream then waits for the collective, and the block is not "
                   "handed over before it is done",
               "keep a reference to the " + A.buffer + " until after work.wait(), so " + free_at +
                   " does not free it while the collective still " + (A.write ? "writes" : "reads") + " it",
               "call tensor.record_stream(s) on it for the stream the collective runs on (" + sa +
                   "; older ProcessGroupNCCL did this itself unless TORCH_NCCL_AVOID_RECORD_STREAMS=1, torch "
                   "2.11's holds the tensor in the Work until wait() instead) before " +
                   free_at};
  } else {
    d.fixes = {"call tensor.record_stream(s) with s the stream " + sa + " on the " + A.buffer + " before " +
                   free_at + ", so the caching allocator does not reuse its block until the work queued on " +
                   sa + " is done",
               "before " + free_at + ", make the current stream wait for " + sa +
                   ": torch.cuda.current_stream().wait_stream(s) with s the stream " + sa,
               "keep a reference to the " + A.buffer + " until " + sa +
                   " is done with it (after a wait_stream or torch.cuda.synchronize()), so its block is not "
                   "freed early"};
  }
  const std::string& pool = w.rank(rank).streams[la.stream].name;
  if (w.options().allocator == core::Allocator::stream_ordered) {
    return "\n  handed over: " + freed + " (cudaMallocAsync frees it on stream " + q(pool) +
           ", the stream it was allocated on, which does not wait for stream " + sa +
           ") and gives its block to the next allocation ordered after that free, the tensor allocated at " +
           alloc_b;
  }
  return "\n  handed over: " + freed + " by the host without waiting for stream " + sa +
         "; the caching allocator gives its block to the next allocation from the pool of stream " + q(pool) +
         ", the tensor allocated at " + alloc_b;
}

// A race between two streams in PyTorch's words: the summary and the fixes.
void python_race(const WorldView& w, int rank, const AccessRec& a, const AccessRec& b, Access b_kind,
                 core::RaceDetail& d, core::Finding& f) {
  const auto& A = d.first;
  const auto& B = d.second;
  const std::string sa = q(A.stream), sb = q(B.stream);
  const std::string where_b = w.source_of(b.op).empty() ? B.op : w.source_of(b.op);
  const bool a_comm = w.is_comm(a.op);
  f.summary = "rank " + std::to_string(rank) + ": " + B.op + " on stream " + sb + " " + access_verb(b_kind) +
              " the " + B.buffer + " while " + A.op + " on stream " + sa + " may still " +
              (A.write ? "write" : "read") + " it";
  d.fixes.clear();
  // Two branches of one CUDA graph (the capture names a side stream's replay "... of the graph
  // replayed at LINE"): the order belongs in the code the graph captured.
  static constexpr std::string_view kGraph = " of the graph replayed at ";
  if (const size_t g = (A.stream + B.stream).find(kGraph); g != std::string::npos && A.source == B.source) {
    d.fixes.push_back(
        "both run inside the CUDA graph replayed at " + where_b +
        ": where it was captured, make the stream that reads wait for the one that writes after " +
        A.op.substr(0, A.op.find(" at ")) +
        " (s.wait_stream(torch.cuda.current_stream()) after it, for a side stream s), so every "
        "replay keeps that order");
    return;  // no stream outside the graph can order its branches
  }
  if (a_comm && is_p2p(w, a.op)) {
    d.fixes.push_back("call wait() on the request of " + A.op + " (what dist." +
                      (w.op(a.op).kind == OpKind::send ? "isend" : "irecv") +
                      " or the batch_isend_irecv returned) before " + where_b +
                      ", or use the blocking dist." + (w.op(a.op).kind == OpKind::send ? "send" : "recv") +
                      ": until its wait the transfer may still " + (A.write ? "write" : "read") +
                      " the tensor");
  } else if (a_comm) {
    d.fixes.push_back("call work.wait() on the work handle of " + A.op + " (or pass async_op=False) before " +
                      where_b + ": the current stream then waits for the collective");
  }
  if (w.is_comm(b.op)) {
    d.fixes.push_back(sb + " is where the process group runs " + B.op +
                      ": before issuing it, make the current stream wait for " + sa +
                      " (torch.cuda.current_stream().wait_stream(s) with s the stream " + sa +
                      "); the collective waits for the stream it is issued from");
  } else if (!a_comm) {
    d.fixes.push_back("before " + where_b + ", make stream " + sb + " wait for " + sa + ": " +
                      "s.wait_stream(t) with s the stream " + sb + " and t the stream " + sa +
                      " (torch.cuda.current_stream().wait_stream(t) where " + sb + " is the current stream)");
    d.fixes.push_back("or record an event on " + sa + " after " + A.op +
                      " (e = torch.cuda.Event(); e.record(t)) and call e.wait(s) before " + where_b);
  }
}

void speak_python(const WorldView& w, int rank, const AccessRec& a, const AccessRec& b, Access b_kind,
                  bool shares_bytes, const ThreadGap& gap, core::RaceDetail& d, core::Finding& f) {
  std::string handover;
  if (d.reuse) {
    handover = python_reuse(w, rank, a, b, b_kind, shares_bytes, d, f);
    d.missing_edge += gap.missing;  // python_reuse says it its own way
  } else {
    python_race(w, rank, a, b, b_kind, d, f);
  }
  if (!gap.fix.empty()) d.fixes.insert(d.fixes.begin(), gap.fix);
  const auto& A = d.first;
  const auto& B = d.second;
  f.explanation = f.summary + ".\n  first:  rank " + std::to_string(A.rank) + ", stream " + q(A.stream) +
                  ", " + A.op + " " + (A.write ? "writes" : "reads") + " the " + A.buffer + handover +
                  "\n  second: rank " + std::to_string(B.rank) + ", stream " + q(B.stream) + ", " + B.op +
                  " " + access_verb(b_kind) + " the " + B.buffer + (d.reuse ? " (the same memory)" : "") +
                  "\n  missing: " + d.missing_edge + "\n  fixes:";
  for (const auto& fix : d.fixes) f.explanation += "\n    - " + fix;
}

void report_race(const WorldView& w, int rank, const AccessRec& cur, Access cur_kind,
                 const Shadow::Conflict& c, int64_t now, Findings& out) {
  // Orient the pair by the program: `first` is the access issued first (for a reuse race, the one
  // on the older lifetime), whichever ran first in this schedule, so both execution orders of one
  // race give one finding and the fixes only add edges the issue order allows.
  const AccessRec* a = &c.prior;
  const AccessRec* b = &cur;
  Access a_kind = c.prior_kind, b_kind = cur_kind;
  const bool reuse = c.prior.lifetime != cur.lifetime;
  if (reuse ? c.prior.lifetime > cur.lifetime : c.prior.op > cur.op) {
    std::swap(a, b);
    std::swap(a_kind, b_kind);
  }
  core::RaceDetail d;
  const bool shares_bytes = race_sites(w, rank, *a, a_kind, *b, b_kind, reuse, now, d);
  // Where another host thread did sync, the missing edge says which one did not.
  const ThreadGap gap = thread_gap(w, rank, *a, *b, d);
  d.missing_edge =
      missing_edge(w, rank, *a, *b, d, gap.missing.empty() ? "the host" : gap.issuer) + gap.missing;
  core::Finding f;
  f.kind = core::FindingKind::stream_race;
  race_summary(rank, b_kind, shares_bytes, w.rank(rank).streams[w.lifetime(a->lifetime).stream].name, d, f);
  const auto& A = d.first;
  const auto& B = d.second;
  f.explanation = f.summary + ".\n  first:  rank " + std::to_string(A.rank) + ", stream " + q(A.stream) +
                  ", " + A.op + " " + (A.write ? "writes" : "reads") + " " + q(A.buffer) + " (lifetime " +
                  std::to_string(A.lifetime) + " of its block), step " + std::to_string(A.step) +
                  "\n  second: rank " + std::to_string(B.rank) + ", stream " + q(B.stream) + ", " + B.op +
                  " " + access_verb(b_kind) + " " + q(B.buffer) + " (lifetime " + std::to_string(B.lifetime) +
                  "), step " + std::to_string(B.step) + "\n  missing: " + d.missing_edge + "\n  fixes:";
  for (const auto& fix : d.fixes) f.explanation += "\n    - " + fix;
  if (w.op(a->op).source != kNone || w.op(b->op).source != kNone)
    speak_python(w, rank, *a, *b, b_kind, shares_bytes, gap, d, f);
  // Same key = same bug: the same two operations on the same buffers, on other ranks, steps or
  // schedules. Names are kept whole (t0 and t1 are two races) but for a send's or recv's peer, and
  // the pair is oriented above, so both execution orders of one race share the key.
  const std::string sa = A.stream + ":" + key_op(A.op) + ":" + A.buffer + ":" + access_verb(a_kind),
                    sb = B.stream + ":" + key_op(B.op) + ":" + B.buffer + ":" + access_verb(b_kind);
  f.key = std::string(d.reuse ? "reuse|" : "race|") + sa + "|" + sb;
  // A captured program's race is one finding per pair of lines (and for a reuse race, the free
  // and the allocation that handed the block over): the tensors, streams, ranks and accesses at
  // those lines are its instances, which the spread counts.
  if (A.source.known() && B.source.known()) {
    auto line = [](const core::SourceLine& l) { return l.file + ":" + std::to_string(l.line); };
    const std::string instance = f.key + "|" + std::to_string(rank) + "|" +
                                 std::to_string(w.lifetime(a->lifetime).buffer) + "|" +
                                 std::to_string(w.lifetime(b->lifetime).buffer);
    f.spread = core::spread_of(instance, rank, {A.stream, B.stream});
    f.key = std::string(d.reuse ? "reuse|" : "race|") + line(A.source) + "|" + line(B.source);
    if (d.reuse) f.key += "|" + line(d.freed) + "|" + line(d.allocated);
  }
  f.detail = std::move(d);
  f.seed = w.options().seed;
  core::add_finding(out, std::move(f));
}

class RaceDetector final : public Detector {
 public:
  unsigned hooks() const override { return on_access | on_alloc | on_free | on_end; }

  void access(const WorldView& w, const AccessEvent& e, Findings& out) override {
    for (const auto& c : e.conflicts) report_race(w, e.rank, e.access, e.kind, c, w.step(), out);
    if (w.options().allocator == core::Allocator::caching)
      note_lifetime_access(e.access.lifetime, e.access, e.kind, e.clock);
  }

  // The held blocks the allocation could have taken (each block once, the first time).
  void alloc(const WorldView&, const AllocEvent& e) override {
    if (lifetime_accesses_.size() <= e.lifetime) lifetime_accesses_.resize(e.lifetime + 1);
    std::vector<HeldReuse> could;
    for (const AllocEvent::Held& b : e.held) {
      if (e.taken_size != 0 && b.size > e.taken_size) continue;
      if (held_taken_.count(b.free_op)) continue;
      const auto it = freed_lifetime_.find(b.free_op);
      if (it == freed_lifetime_.end()) continue;
      held_taken_.insert(b.free_op);
      could.push_back({e.rank, it->second, {b.records.begin(), b.records.end()}, {}});
    }
    if (!could.empty()) held_reuses_[e.lifetime] = std::move(could);
  }

  void free(const WorldView&, const FreeEvent& e) override {
    if (e.held_back) freed_lifetime_[e.free_op] = e.lifetime;
  }

  void end(const WorldView& w, const RunEnd& e, Findings& out) override {
    if (e.whole) report_held_reuse_races(w, out);
  }

 private:
  // A reuse race that the schedule did not act out (caching allocator): an allocation could
  // have taken a freed block that only its record_stream events held back (a schedule where
  // those streams ran ahead). Decided at the end of the run from happens-before over the two
  // lifetimes' accesses, with the new lifetime's joined with those events.
  void note_lifetime_access(uint32_t lifetime, const AccessRec& cur, Access kind, const VectorClock& clock) {
    const bool write = kind != Access::read;
    auto& mine = lifetime_accesses_[lifetime];
    auto same = std::find_if(mine.begin(), mine.end(), [&](const auto& e) {
      return e.rec.participant == cur.participant && (e.kind != Access::read) == write;
    });
    if (same == mine.end()) {
      mine.push_back({cur, kind});
    } else {
      *same = {cur, kind};  // the latest: it is ordered after the participant's earlier ones
    }
    const auto it = held_reuses_.find(lifetime);
    if (it == held_reuses_.end()) return;
    for (HeldReuse& h : it->second) {
      const bool seen = std::any_of(h.accesses.begin(), h.accesses.end(), [&](const auto& e) {
        return std::get<0>(e).participant == cur.participant && (std::get<1>(e) != Access::read) == write;
      });
      if (!seen) h.accesses.emplace_back(cur, kind, clock);  // the first: ordered before the later ones
    }
  }

  void report_held_reuse_races(const WorldView& w, Findings& out) {
    for (const auto& [lifetime, holds] : held_reuses_) {
      for (const HeldReuse& h : holds) {
        // In the schedule where the held block is handed over, the allocator has seen every
        // record_stream event complete: the new lifetime's accesses come after all of them.
        const bool complete = std::all_of(h.records.begin(), h.records.end(),
                                          [&](uint64_t rec) { return w.record(rec).executed; });
        if (!complete) continue;  // the block could never have been handed over
        for (const auto& [cur, kind, clock] : h.accesses) {
          VectorClock c = clock;
          for (uint64_t rec : h.records) c.join(w.record(rec).clock);
          for (const auto& [prior, prior_kind] : lifetime_accesses_[h.old_lifetime]) {
            if (kind == Access::read && prior_kind == Access::read) continue;  // reads change no byte
            if (prior.participant == kNoParticipant || prior.participant == cur.participant ||
                c.covers(prior.participant, prior.epoch))
              continue;
            report_race(w, h.rank, cur, kind, {prior, prior_kind}, w.op(cur.op).exec_step, out);
          }
        }
      }
    }
  }

  // Per lifetime (caching allocator only): its latest read and latest write per participant;
  // a read and a write of two streams stay inline.
  struct LifetimeAccess {
    AccessRec rec;
    Access kind;
  };
  std::vector<core::InlineVector<LifetimeAccess, 4>> lifetime_accesses_;
  struct HeldReuse {
    int rank = 0;
    uint32_t old_lifetime = 0;
    std::vector<uint64_t> records;  // the record_stream events that held the block back
    // The new lifetime's first read and first write per participant, with their clocks.
    std::vector<std::tuple<AccessRec, Access, VectorClock>> accesses;
  };
  std::map<uint32_t, std::vector<HeldReuse>> held_reuses_;  // by the new lifetime
  std::unordered_map<uint64_t, uint32_t> freed_lifetime_;   // free op -> the lifetime it ended
  // Free ops whose block got a HeldReuse: a set, as a captured program frees 10^5 such blocks.
  std::unordered_set<uint64_t> held_taken_;
};

}  // namespace

std::unique_ptr<Detector> make_race_detector() { return std::make_unique<RaceDetector>(); }

}  // namespace shardcheck::sim
