// Task<T>: the lazy C++20 coroutine every host program is written as (docs/semantics.md §7).
// A Task starts when awaited and resumes its awaiter when it finishes (symmetric transfer,
// so deep call chains do not grow the OS stack). A backend drives root tasks with start().
//   Task<int> twice(Runtime& rt) { co_await rt.sync_device(); co_return 2; }
//   Task<> body(Runtime& rt) { int n = co_await twice(rt); ... }
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

namespace shardcheck::core {

template <class T = void>
class Task;

namespace detail {

struct PromiseBase {
  std::coroutine_handle<> continuation = std::noop_coroutine();
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct Final {
    bool await_ready() noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      return h.promise().continuation;
    }
    void await_resume() noexcept {}
  };
  Final final_suspend() noexcept { return {}; }
  void unhandled_exception() { error = std::current_exception(); }
};

template <class T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object();
  template <class U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object();
  void return_void() {}
};

}  // namespace detail

template <class T>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::Promise<T>;
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle h) : h_(h) {}
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  // Awaiting: run the child until it finishes, then continue the awaiter.
  bool await_ready() const noexcept { return !h_ || h_.done(); }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    h_.promise().continuation = awaiting;
    return h_;
  }
  T await_resume() { return take(); }

  // Driving a root task: start() runs it until its first suspension; done() says whether it
  // finished; take() returns its value or rethrows what it threw.
  void start() { h_.resume(); }
  bool valid() const { return static_cast<bool>(h_); }
  bool done() const { return h_ && h_.done(); }
  T take() {
    if (h_.promise().error) std::rethrow_exception(h_.promise().error);
    if constexpr (!std::is_void_v<T>) return std::move(*h_.promise().value);
  }

 private:
  void reset() {
    if (h_) h_.destroy();
    h_ = {};
  }
  Handle h_;
};

namespace detail {
template <class T>
Task<T> Promise<T>::get_return_object() {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}
}  // namespace detail

}  // namespace shardcheck::core
