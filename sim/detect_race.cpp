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
}  // namespace

core::AccessSite World::site(int rank, const AccessRec& a, Access kind, uint64_t begin, uint64_t end) {
  const int per_rank = 1 + Options::kMaxStreamsPerRank;
  const int stream = static_cast<int>(a.participant) % per_rank - 1;
  const OpInfo& info = op_info_[a.op];
  const Lifetime& l = lifetimes_[a.lifetime];
  core::AccessSite s;
  s.rank = rank;
  s.stream = stream >= 0 ? ranks_[rank]->streams[stream].name : "host";
  s.op = names_[info.name];
  s.step = info.exec_step >= 0 ? info.exec_step : step_;
  s.op_id = a.op;
  s.buffer = names_[l.name];
  s.lifetime = l.generation;
  s.address = l.addr;
  s.byte_begin = static_cast<int64_t>(begin - l.addr);
  s.byte_end = static_cast<int64_t>(end - l.addr);
  s.write = kind != Access::read;
  return s;
}

void World::report_race(int rank, const AccessRec& cur, Access cur_kind, const Shadow::Conflict& c) {
  const Lifetime& lp = lifetimes_[std::min(c.prior.lifetime, cur.lifetime)];
  const Lifetime& lc = lifetimes_[cur.lifetime];
  core::RaceDetail d;
  const Lifetime& lprior = lifetimes_[c.prior.lifetime];
  d.first = site(rank, c.prior, c.prior_kind, lprior.addr, lprior.addr + lprior.bytes);
  d.second = site(rank, cur, cur_kind, lc.addr, lc.addr + lc.bytes);
  d.first.step = op_info_[c.prior.op].exec_step;
  d.second.step = step_;
  d.reuse = c.prior.lifetime != cur.lifetime;
  // Tell a reuse race from the old lifetime's side, whichever access happened to run first.
  if (d.reuse && c.prior.lifetime > cur.lifetime) {
    std::swap(d.first, d.second);
    cur_kind = c.prior_kind;
  }
  const auto& A = d.first;
  const auto& B = d.second;
  const std::string alloc_stream = ranks_[rank]->streams[lp.stream].name;
  if (d.reuse) {
    d.missing_edge = "the block was handed from " + q(A.buffer) + " to " + q(B.buffer) + " while " + A.op +
                     " on " + q(A.stream) + " could still be running: nothing made " + q(B.stream) +
                     " wait for " + q(A.stream) + " after it, the host did not sync with " + q(A.stream) +
                     ", and no record_stream held the block back";
  } else {
    d.missing_edge = "no happens-before edge from " + A.op + " on " + q(A.stream) + " to " + B.op + " on " +
                     q(B.stream) + ": " + q(B.stream) + " never waits for an event recorded on " +
                     q(A.stream) + " after it, and the host never " + "syncs with " + q(A.stream) +
                     " before issuing " + B.op;
  }
  core::Finding f;
  f.kind = core::FindingKind::stream_race;
  if (cur_kind == Access::free) {
    f.summary = "rank " + std::to_string(rank) + ": the free of " + q(B.buffer) + " on " + q(B.stream) +
                " may run before " + A.op + " on " + q(A.stream) + " is done with it";
    d.fixes = {"make " + q(B.stream) + " wait for an event recorded on " + q(A.stream) + " after " + A.op +
                   " before the free",
               "call record_stream(" + q(A.buffer) + ", " + q(A.stream) + ") before freeing it",
               "allocate " + q(A.buffer) + " on " + q(A.stream) + ", the stream that uses it last"};
  } else if (d.reuse) {
    f.summary = "rank " + std::to_string(rank) + ": the block of " + q(A.buffer) + " (lifetime " +
                std::to_string(A.lifetime) + ") " +
                // A block only record_stream events kept back (report_held_reuse_races).
                (A.address == B.address
                     ? "is reused by " + q(B.buffer) + " (lifetime " + std::to_string(B.lifetime) + ")"
                     : "can be handed to " + q(B.buffer) + " once the record_stream events complete") +
                ": " + B.op + " on " + q(B.stream) + " " + access_verb(cur_kind) + " it while " + A.op +
                " on " + q(A.stream) + " may still " + (A.write ? "write" : "read") + " it";
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
                access_verb(cur_kind) + " " + q(B.buffer) + " while " + A.op + " on " + q(A.stream) +
                " may still " + (A.write ? "write" : "read") + " it";
    d.fixes = {"record an event on " + q(A.stream) + " after " + A.op + " and make " + q(B.stream) +
                   " wait for it (wait_event) before " + B.op,
               "or make " + q(B.stream) + " wait for " + q(A.stream) + " (wait_stream) before " + B.op};
  }
  f.explanation = f.summary + ".\n  first:  rank " + std::to_string(A.rank) + ", stream " + q(A.stream) +
                  ", " + A.op + " " + (A.write ? "writes" : "reads") + " " + q(A.buffer) + " (lifetime " +
                  std::to_string(A.lifetime) + " of its block), step " + std::to_string(A.step) +
                  "\n  second: rank " + std::to_string(B.rank) + ", stream " + q(B.stream) + ", " + B.op +
                  " " + access_verb(cur_kind) + " " + q(B.buffer) + " (lifetime " +
                  std::to_string(B.lifetime) + "), step " + std::to_string(B.step) +
                  "\n  missing: " + d.missing_edge + "\n  fixes:";
  for (const auto& fix : d.fixes) f.explanation += "\n    - " + fix;
  // One bug repeated over layers, tensors and chunks is one finding: digits are folded.
  auto fold = [](std::string s) {
    for (char& ch : s) {
      if (ch >= '0' && ch <= '9') ch = '#';
    }
    return s;
  };
  const std::string sa = fold(A.stream + ":" + (d.reuse ? "" : A.op) + ":" + A.buffer),
                    sb = fold(B.stream + ":" + B.buffer);
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
    return e.first.participant == cur.participant && (e.second != Access::read) == write;
  });
  if (same == mine.end()) {
    mine.emplace_back(cur, kind);
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
