// Reports stream_race. For every access, touch_range (execute.cpp) asks the shadow which earlier
// accesses of the same bytes, in any lifetime of the block (allocator reuse), the stream's clock does
// not cover; each becomes a finding here: both accesses, the missing edge and the fixes.
#include <algorithm>

#include "sim/world_state.hpp"

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
std::string key_op(const std::string& op) {
  if (op.rfind("send '", 0) == 0 || op.rfind("recv '", 0) == 0) return op.substr(0, op.rfind('\'') + 1);
  return op;
}

}  // namespace

// A race between lifetimes of one block: the places of the free that handed the block on and
// of the allocation that took it.
void World::mark_reuse(core::RaceDetail& d, bool reuse, const Lifetime& freed, const Lifetime& taken) const {
  d.reuse = reuse;
  if (!reuse) return;
  if (taken.alloc_op != kNone) d.allocated = source_line(taken.alloc_op);
  if (freed.free_op != kNone) d.freed = source_line(freed.free_op);
}

core::AccessSite World::site(int rank, const AccessRec& a, Access kind, uint64_t begin, uint64_t end) {
  const int stream = a.participant == kNoParticipant ? -1 : clock_stream(a.participant);
  const OpInfo& info = op_info_[a.op];
  const Lifetime& l = lifetimes_[a.lifetime];
  core::AccessSite s;
  s.rank = rank;
  s.stream = stream >= 0 ? ranks_[rank]->streams[stream].name : "host";
  s.op = op_text(a.op);
  s.step = info.exec_step >= 0 ? info.exec_step : step_;
  s.op_id = a.op;
  s.buffer = names_[l.name];
  s.lifetime = l.generation;
  s.address = l.addr;
  s.byte_begin = static_cast<int64_t>(begin - l.addr);
  s.byte_end = static_cast<int64_t>(end - l.addr);
  s.write = kind != Access::read;
  s.source = source_line(a.op);
  return s;
}

// Why a wait_event on b's stream, issued before its event was first recorded (on a's stream),
// does not order a before b; empty when there is no such wait.
std::string World::early_wait_reason(int rank, const AccessRec& a, const AccessRec& b) const {
  const Rank& r = *ranks_[rank];
  auto access_stream = [this](const AccessRec& x) {
    return x.participant == kNoParticipant ? -1 : clock_stream(x.participant);
  };
  const int sa = access_stream(a), sb = access_stream(b);
  if (sa < 0 || sb < 0) return "";
  for (const auto& w : r.early_waits) {
    if (w.stream != sb || w.op > b.op) continue;
    for (uint32_t i = w.op + 1; i < op_info_.size(); ++i) {
      const OpInfo& o = op_info_[i];
      if (o.rank == rank && o.stream == sa && o.kind == OpKind::record && names_[o.name] == w.record) {
        const std::string ev = w.record.substr(7);  // "record 'x'" -> "'x'"
        return q(r.streams[sb].name) + " waits for " + ev + " before " + ev +
               " is ever recorded, so the wait orders nothing (an event with no record counts as " +
               "complete) and the later record on " + q(r.streams[sa].name) + " does not reach back to it";
      }
    }
  }
  return "";
}

bool World::race_sites(int rank, const AccessRec& a, Access a_kind, const AccessRec& b, Access b_kind,
                       bool reuse, core::RaceDetail& d) {
  const Lifetime& la = lifetimes_[a.lifetime];
  const Lifetime& lb = lifetimes_[b.lifetime];
  d.first = site(rank, a, a_kind, la.addr, la.addr + la.bytes);
  d.second = site(rank, b, b_kind, lb.addr, lb.addr + lb.bytes);
  d.first.step = op_info_[a.op].exec_step >= 0 ? op_info_[a.op].exec_step : step_;
  d.second.step = op_info_[b.op].exec_step >= 0 ? op_info_[b.op].exec_step : step_;
  mark_reuse(d, reuse, la, lb);
  // A held reuse (report_held_reuse_races) pairs lifetimes that do not share bytes in this
  // schedule: the block was kept back, so the new lifetime sits elsewhere.
  if (!reuse) return true;
  // Name the lifetimes of the bytes the two share: a split block's later lifetime may begin at
  // another address (generation 1 there), yet it is a later lifetime of these bytes.
  const uint64_t lo = std::max(la.addr, lb.addr), hi = std::min(la.addr + la.bytes, lb.addr + lb.bytes);
  int later = 0;
  for (uint32_t i = a.lifetime + 1; i <= b.lifetime; ++i) {
    const Lifetime& l = lifetimes_[i];
    if (l.rank == rank && l.addr < hi && lo < l.addr + l.bytes) ++later;
  }
  d.second.lifetime = d.first.lifetime + std::max(later, 1);
  return lo < hi;
}

std::string World::missing_edge(int rank, const AccessRec& a, const AccessRec& b,
                                const core::RaceDetail& d) const {
  const auto& A = d.first;
  const auto& B = d.second;
  if (d.reuse) {
    return "the block was handed from " + q(A.buffer) + " to " + q(B.buffer) + " while " + A.op + " on " +
           q(A.stream) + " could still be running: nothing made " + q(B.stream) + " wait for " + q(A.stream) +
           " after it, the host did not sync with " + q(A.stream) +
           ", and no record_stream held the block back";
  }
  if (const std::string early = early_wait_reason(rank, a, b); !early.empty()) {
    return "no happens-before edge from " + A.op + " on " + q(A.stream) + " to " + B.op + " on " +
           q(B.stream) + ": " + early;
  }
  return "no happens-before edge from " + A.op + " on " + q(A.stream) + " to " + B.op + " on " + q(B.stream) +
         ": " + q(B.stream) + " never waits for an event recorded on " + q(A.stream) +
         " after it, and the host never " + "syncs with " + q(A.stream) + " before issuing " + B.op;
}

void World::race_summary(int rank, Access b_kind, bool shares_bytes, const std::string& alloc_stream,
                         core::RaceDetail& d, core::Finding& f) const {
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

void World::report_race(int rank, const AccessRec& cur, Access cur_kind, const Shadow::Conflict& c) {
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
  const bool shares_bytes = race_sites(rank, *a, a_kind, *b, b_kind, reuse, d);
  d.missing_edge = missing_edge(rank, *a, *b, d);
  core::Finding f;
  f.kind = core::FindingKind::stream_race;
  race_summary(rank, b_kind, shares_bytes, ranks_[rank]->streams[lifetimes_[a->lifetime].stream].name, d, f);
  const auto& A = d.first;
  const auto& B = d.second;
  f.explanation = f.summary + ".\n  first:  rank " + std::to_string(A.rank) + ", stream " + q(A.stream) +
                  ", " + A.op + " " + (A.write ? "writes" : "reads") + " " + q(A.buffer) + " (lifetime " +
                  std::to_string(A.lifetime) + " of its block), step " + std::to_string(A.step) +
                  "\n  second: rank " + std::to_string(B.rank) + ", stream " + q(B.stream) + ", " + B.op +
                  " " + access_verb(b_kind) + " " + q(B.buffer) + " (lifetime " + std::to_string(B.lifetime) +
                  "), step " + std::to_string(B.step) + "\n  missing: " + d.missing_edge + "\n  fixes:";
  for (const auto& fix : d.fixes) f.explanation += "\n    - " + fix;
  if (op_info_[a->op].source != kNone || op_info_[b->op].source != kNone)
    speak_python(rank, *a, *b, b_kind, shares_bytes, d, f);
  // Same key = same bug: the same two operations on the same buffers, on other ranks, steps or
  // schedules. Names are kept whole (t0 and t1 are two races) but for a send's or recv's peer, and
  // the pair is oriented above, so both execution orders of one race share the key.
  const std::string sa = A.stream + ":" + key_op(A.op) + ":" + A.buffer + ":" + access_verb(a_kind),
                    sb = B.stream + ":" + key_op(B.op) + ":" + B.buffer + ":" + access_verb(b_kind);
  f.key = std::string(d.reuse ? "reuse|" : "race|") + sa + "|" + sb;
  f.detail = std::move(d);
  f.seed = options_.seed;
  core::add_finding(findings_, std::move(f));
}

void World::note_lifetime_access(uint32_t lifetime, const AccessRec& cur, Access kind,
                                 const VectorClock& clock) {
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

void World::report_held_reuse_races() {
  const int64_t end_step = step_;
  for (const auto& [lifetime, holds] : held_reuses_) {
    for (const HeldReuse& h : holds) {
      // In the schedule where the held block is handed over, the allocator has seen every
      // record_stream event complete: the new lifetime's accesses come after all of them.
      const bool complete = std::all_of(h.records.begin(), h.records.end(),
                                        [&](uint64_t rec) { return records_[rec].executed; });
      if (!complete) continue;  // the block could never have been handed over
      for (const auto& [cur, kind, clock] : h.accesses) {
        VectorClock c = clock;
        for (uint64_t rec : h.records) c.join(records_[rec].clock);
        for (const auto& [prior, prior_kind] : lifetime_accesses_[h.old_lifetime]) {
          if (kind == Access::read && prior_kind == Access::read) continue;  // reads change no byte
          if (prior.participant == kNoParticipant || prior.participant == cur.participant ||
              c.covers(prior.participant, prior.epoch))
            continue;
          step_ = op_info_[cur.op].exec_step;
          report_race(h.rank, cur, kind, {prior, prior_kind});
        }
      }
    }
  }
  step_ = end_step;
}

}  // namespace shardcheck::sim

namespace shardcheck::sim {

bool World::is_comm(uint32_t op) const {
  const OpKind k = op_info_[op].kind;
  return k == OpKind::collective || k == OpKind::send || k == OpKind::recv;
}

// A reuse race in PyTorch's words: the free, the allocation the block went to, and the fixes;
// returns the "handed over" line of the explanation.
std::string World::python_reuse(int rank, const AccessRec& a, const AccessRec& b, Access b_kind,
                                bool shares_bytes, core::RaceDetail& d, core::Finding& f) {
  const auto& A = d.first;
  const auto& B = d.second;
  const std::string sa = q(A.stream), sb = q(B.stream);
  const Lifetime& la = lifetimes_[a.lifetime];
  const Lifetime& lb = lifetimes_[b.lifetime];
  const bool free_known = la.free_op != kNone && !source_of(la.free_op).empty();
  const std::string freed = free_known ? "freed at " + source_of(la.free_op) : "freed";
  const std::string& alloc_b = lb.alloc_op != kNone ? source_of(lb.alloc_op) : A.buffer;
  const std::string free_at = free_known ? "the free at " + source_of(la.free_op) : "its free";
  f.summary = "rank " + std::to_string(rank) + ": the " + A.buffer + " is " + freed + " while " + A.op +
              " on stream " + sa + " may still " + (A.write ? "write" : "read") + " it; its block " +
              (shares_bytes ? "goes" : "can go, once its record_stream events complete,") +
              " to the tensor allocated at " + alloc_b + ", which " + B.op + " on stream " + sb + " " +
              access_verb(b_kind);
  d.missing_edge = "nothing orders " + A.op + " before " + free_at + ": the host does not wait for stream " +
                   sa + " (no work.wait(), wait_stream or synchronize) and no record_stream on " + sa +
                   " holds the block back";
  if (is_comm(a.op)) {
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
  return "\n  handed over: " + freed + " by the host without waiting for stream " + sa +
         "; the caching allocator gives its block to the next allocation from the pool of stream " +
         q(ranks_[rank]->streams[la.stream].name) + ", the tensor allocated at " + alloc_b;
}

// A race between two streams in PyTorch's words: the summary and the fixes.
void World::python_race(int rank, const AccessRec& a, const AccessRec& b, Access b_kind, core::RaceDetail& d,
                        core::Finding& f) {
  const auto& A = d.first;
  const auto& B = d.second;
  const std::string sa = q(A.stream), sb = q(B.stream);
  const std::string where_b = source_of(b.op).empty() ? B.op : source_of(b.op);
  const bool a_comm = is_comm(a.op);
  f.summary = "rank " + std::to_string(rank) + ": " + B.op + " on stream " + sb + " " + access_verb(b_kind) +
              " the " + B.buffer + " while " + A.op + " on stream " + sa + " may still " +
              (A.write ? "write" : "read") + " it";
  d.fixes.clear();
  if (a_comm) {
    d.fixes.push_back("call work.wait() on the work handle of " + A.op + " (or pass async_op=False) before " +
                      where_b + ": the current stream then waits for the collective");
  }
  if (is_comm(b.op)) {
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

void World::speak_python(int rank, const AccessRec& a, const AccessRec& b, Access b_kind, bool shares_bytes,
                         core::RaceDetail& d, core::Finding& f) {
  std::string handover;
  if (d.reuse) {
    handover = python_reuse(rank, a, b, b_kind, shares_bytes, d, f);
  } else {
    python_race(rank, a, b, b_kind, d, f);
  }
  const auto& A = d.first;
  const auto& B = d.second;
  f.explanation = f.summary + ".\n  first:  rank " + std::to_string(A.rank) + ", stream " + q(A.stream) +
                  ", " + A.op + " " + (A.write ? "writes" : "reads") + " the " + A.buffer + handover +
                  "\n  second: rank " + std::to_string(B.rank) + ", stream " + q(B.stream) + ", " + B.op +
                  " " + access_verb(b_kind) + " the " + B.buffer + (d.reuse ? " (the same memory)" : "") +
                  "\n  missing: " + d.missing_edge + "\n  fixes:";
  for (const auto& fix : d.fixes) f.explanation += "\n    - " + fix;
}

}  // namespace shardcheck::sim
