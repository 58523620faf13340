// Running independent items (scenarios) on several threads while their results are handed
// back in index order on the calling thread, so what a command prints and reports is what one
// thread would: `deliver(i, result)` sees item i only after every item before it, and once it
// returns false no further item starts and later results are dropped (the command stopped
// there, as a loop would have).
//   ordered_pool<CheckedRun>(n, jobs, [&](size_t i) { return run_checked(...); },
//                            [&](size_t i) { print_header(i); },
//                            [&](size_t i, CheckedRun c) { print(c); return !stop(); });
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace shardcheck::run {

// `work(i)` runs on up to `threads` threads (0 or 1: on the calling thread, one after
// another). `turn(i)` runs on the calling thread when item i is next to be delivered (before
// its result, which it may still wait for); `deliver` after it. An exception from `work` is
// rethrown on the calling thread when its item's turn comes.
template <typename Result>
void ordered_pool(size_t n, int threads, const std::function<Result(size_t)>& work,
                  const std::function<void(size_t)>& turn,
                  const std::function<bool(size_t, Result)>& deliver) {
  if (threads <= 1 || n <= 1) {
    for (size_t i = 0; i < n; ++i) {
      turn(i);
      if (!deliver(i, work(i))) return;
    }
    return;
  }
  struct Slot {
    std::optional<Result> result;
    std::exception_ptr error;
  };
  std::vector<Slot> slots(n);
  std::mutex mu;
  std::condition_variable ready;
  size_t next = 0;
  bool stop = false;
  auto worker = [&] {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop || next >= n) return;
        i = next++;
      }
      Slot s;
      try {
        s.result.emplace(work(i));
      } catch (...) {
        s.error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      slots[i] = std::move(s);
      ready.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads && static_cast<size_t>(t) < n; ++t) pool.emplace_back(worker);
  std::exception_ptr failure;
  for (size_t i = 0; i < n; ++i) {
    turn(i);
    Slot s;
    {
      std::unique_lock<std::mutex> lock(mu);
      ready.wait(lock, [&] { return slots[i].result || slots[i].error; });
      s = std::move(slots[i]);
    }
    if (s.error) {
      failure = s.error;
      break;
    }
    if (!deliver(i, std::move(*s.result))) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;  // nothing new starts; items already running finish and are dropped
  }
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace shardcheck::run
