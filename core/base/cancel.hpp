// Cooperative cancellation for long work: a token that reads a flag someone else sets (run/'s
// signal handler), polled inside loops that can run for seconds, such as a kernel writing a
// large buffer, a reference step, or the training judge's reads. Polling throws Cancelled,
// which the caller that owns the run turns into a run marked cancelled.
//   CancelToken cancel{&flag};
//   for (int64_t i = 0; i < n; ++i) { if ((i & 0xffff) == 0) cancel.poll(); ... }
#pragma once

#include <atomic>
#include <stdexcept>

namespace shardcheck::core {

// Thrown by CancelToken::poll once the flag is set: the work was stopped, not wrong.
class Cancelled : public std::runtime_error {
 public:
  Cancelled() : std::runtime_error("cancelled") {}
};

struct CancelToken {
  const std::atomic<bool>* flag = nullptr;  // none: never cancelled

  bool requested() const { return flag != nullptr && flag->load(std::memory_order_relaxed); }
  void poll() const {
    if (requested()) throw Cancelled();
  }
};

}  // namespace shardcheck::core
