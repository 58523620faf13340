// Forced race replay: the holds' bookkeeping on the host (gpu/holds.hpp).
#include "gpu/holds.hpp"

#include <atomic>

#include "gpu/check.hpp"

namespace shardcheck::gpu {

std::string OpSite::text() const {
  return "rank " + std::to_string(rank) + " '" + stream + "' " + op + " (#" + std::to_string(occurrence + 1) +
         ")";
}

const char* to_string(HoldOutcome::How how) {
  switch (how) {
    case HoldOutcome::How::not_reached:
      return "not reached";
    case HoldOutcome::How::second_access:
      return "by the second access";
    case HoldOutcome::How::ordering:
      return "by the program's ordering";
    case HoldOutcome::How::program_end:
      return "at the program's end";
    case HoldOutcome::How::deadline:
      return "by the deadline";
  }
  return "?";
}

Holds::Holds(std::vector<HoldSite> sites, double deadline_seconds)
    : sites_(std::move(sites)), state_(sites_.size()), deadline_seconds_(deadline_seconds) {
  if (sites_.empty()) return;
  const size_t bytes = 2 * sites_.size() * sizeof(uint32_t);
  void* host = nullptr;
  SC_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  flags_ = static_cast<uint32_t*>(host);
  for (size_t i = 0; i < 2 * sites_.size(); ++i) flags_[i] = 0;
  void* dev = nullptr;
  SC_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  device_flags_ = static_cast<uint32_t*>(dev);
  for (const HoldSite& h : sites_) {
    counts_.emplace(std::tuple{h.held.rank, h.held.stream, h.held.op}, 0);
    counts_.emplace(std::tuple{h.until.rank, h.until.stream, h.until.op}, 0);
  }
}

Holds::~Holds() {
  if (flags_) cudaFreeHost(flags_);
}

void Holds::before(int rank, int s, const std::string& stream, const std::string& op, cudaStream_t cs) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(std::tuple{rank, stream, op});
  if (it == counts_.end()) return;
  stream_names_[{rank, s}] = stream;
  const uint32_t occurrence = it->second++;
  last_[rank] = {s, occurrence};
  for (size_t i = 0; i < sites_.size(); ++i) {
    const OpSite& h = sites_[i].held;
    State& st = state_[i];
    if (st.armed || st.outcome.how != HoldOutcome::How::not_reached) continue;
    if (h.rank != rank || h.stream != stream || h.op != op || h.occurrence != occurrence) continue;
    const auto deadline_ns = static_cast<uint64_t>(deadline_seconds_ * 1e9);
    launch_hold_wait(device_flags_ + 2 * i, device_flags_ + 2 * i + 1, deadline_ns, cs);
    st.armed = true;
    st.streams[{rank, s}] = "";  // the held stream itself
  }
}

std::vector<int> Holds::second_accesses(int rank, int s, const std::string& stream, const std::string& op) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  auto last = last_.find(rank);
  if (!counts_.count(std::tuple{rank, stream, op}) || last == last_.end() || last->second.stream != s)
    return out;
  const uint32_t occurrence = last->second.occurrence;
  for (size_t i = 0; i < sites_.size(); ++i) {
    const OpSite& u = sites_[i].until;
    State& st = state_[i];
    if (u.rank != rank || u.stream != stream || u.op != op || u.occurrence != occurrence) continue;
    if (!st.armed) {
      if (st.outcome.how == HoldOutcome::How::not_reached)
        st.outcome.why = "its second access was issued before it";
      st.released = true;  // never armed from here on
      continue;
    }
    if (st.released) continue;
    if (const std::string* how = behind(st, rank, s)) {
      release_now(static_cast<int>(i), HoldOutcome::How::ordering,
                  how->empty() ? "the second access is on the held access's stream" : *how);
      continue;
    }
    st.released = true;
    st.outcome.how = HoldOutcome::How::second_access;
    out.push_back(static_cast<int>(i));
  }
  return out;
}

void Holds::freed(int rank, const std::string& buffer, void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const HoldSite& h : sites_) {
    if (h.held.rank == rank && h.handoff_from == buffer) freed_[{rank, buffer}] = ptr;
  }
}

void* Holds::handoff(int rank, const std::string& buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < sites_.size(); ++i) {
    const HoldSite& h = sites_[i];
    if (h.held.rank != rank || h.handoff_to != buffer || !state_[i].armed || state_[i].released) continue;
    auto it = freed_.find({rank, h.handoff_from});
    if (it != freed_.end()) return it->second;
  }
  return nullptr;
}

void Holds::release_after(int hold, cudaStream_t cs) { launch_hold_release(device_flags_ + 2 * hold, cs); }

const std::string* Holds::behind(const State& st, int rank, int s) const {
  auto it = st.streams.find({rank, s});
  return it == st.streams.end() ? nullptr : &it->second;
}

void Holds::record(int rank, int s, cudaEvent_t e, const std::string& label) {
  std::lock_guard<std::mutex> lock(mu_);
  labels_[e] = label.empty() ? "work on rank " + std::to_string(rank) + "'s streams" : label;
  for (State& st : state_) {
    if (!st.armed || st.released) continue;
    if (const std::string* how = behind(st, rank, s)) {
      st.events[e] = *how;
    } else {
      st.events.erase(e);
    }
  }
}

void Holds::wait(int rank, int s, cudaEvent_t e, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  for (State& st : state_) {
    if (!st.armed || st.released || !st.events.count(e)) continue;
    st.streams.emplace(std::pair{rank, s}, "rank " + std::to_string(rank) + " " + what);
  }
}

void Holds::join(const std::vector<cudaEvent_t>& from, const std::vector<std::pair<int, int>>& streams,
                 const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  for (State& st : state_) {
    if (!st.armed || st.released) continue;
    bool any = false;
    for (cudaEvent_t e : from) any |= st.events.count(e) > 0;
    if (!any) continue;
    for (const auto& rs : streams) st.streams.emplace(rs, what);
  }
}

bool Holds::behind_hold(cudaEvent_t e) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const State& st : state_) {
    if (st.armed && !st.released && st.events.count(e)) return true;
  }
  return false;
}

bool Holds::release_for_host_wait(int rank, cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string what = labels_.count(e) ? labels_.at(e) : "an event";
  bool any = false;
  for (size_t i = 0; i < state_.size(); ++i) {
    State& st = state_[i];
    if (!st.armed || st.released || !st.events.count(e)) continue;
    release_now(static_cast<int>(i), HoldOutcome::How::ordering,
                "rank " + std::to_string(rank) + "'s host waits for " + what);
    any = true;
  }
  return any;
}

void Holds::release_rest() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].armed && !state_[i].released)
      release_now(static_cast<int>(i), HoldOutcome::How::program_end,
                  "its second access was not issued after it");
  }
}

void Holds::release_now(int hold, HoldOutcome::How how, const std::string& why) {
  State& st = state_[hold];
  st.released = true;
  st.outcome = {how, why};
  std::atomic_thread_fence(std::memory_order_seq_cst);
  reinterpret_cast<volatile uint32_t*>(flags_)[2 * hold] = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

std::vector<HoldOutcome> Holds::outcomes(std::string& error) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<HoldOutcome> out;
  for (size_t i = 0; i < state_.size(); ++i) {
    HoldOutcome o = state_[i].outcome;
    const uint32_t status = reinterpret_cast<volatile const uint32_t*>(flags_)[2 * i + 1];
    if (state_[i].armed && status == 2) {
      o = {HoldOutcome::How::deadline, ""};
      if (error.empty())
        error = "the hold on " + sites_[i].held.text() + " until " + sites_[i].until.text() +
                " missed its deadline of " + std::to_string(deadline_seconds_) +
                " s (the device stopped waiting; the run's values are not the forced order's)";
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace shardcheck::gpu
