// Task<T>: lazy start, values and exceptions through co_await, deep chains without stack growth.
#include <catch2/catch.hpp>
#include <stdexcept>

#include "core/base/task.hpp"

using namespace shardcheck::core;

namespace {
Task<int> value(int v) { co_return v; }
Task<int> sum_to(int n) {
  if (n == 0) co_return 0;
  co_return n + co_await sum_to(n - 1);
}
Task<> thrower() {
  throw std::runtime_error("boom");
  co_return;
}
Task<int> catcher() {
  try {
    co_await thrower();
  } catch (const std::runtime_error&) {
    co_return 1;
  }
  co_return 0;
}
struct Yield {  // suspends once, remembering the handle
  std::coroutine_handle<>* slot;
  bool await_ready() { return false; }
  void await_suspend(std::coroutine_handle<> h) { *slot = h; }
  void await_resume() {}
};
}  // namespace

TEST_CASE("a task is lazy and returns its value", "[core][task]") {
  bool ran = false;
  // A lambda coroutine must outlive its task (the frame refers to the closure), so name it.
  auto body = [&]() -> Task<int> {
    ran = true;
    co_return 7;
  };
  auto t = body();
  REQUIRE_FALSE(ran);
  t.start();
  REQUIRE(t.done());
  REQUIRE(t.take() == 7);
  auto v = value(3);
  v.start();
  REQUIRE(v.take() == 3);
}

TEST_CASE("nested awaits compose without growing the stack", "[core][task]") {
  auto t = sum_to(20000);  // would overflow the stack without symmetric transfer
  t.start();
  REQUIRE(t.done());
  REQUIRE(t.take() == 20000 * 20001 / 2);
}

TEST_CASE("exceptions travel to the awaiter and out of the root", "[core][task]") {
  auto c = catcher();
  c.start();
  REQUIRE(c.take() == 1);
  auto t = thrower();
  t.start();
  REQUIRE_THROWS_AS(t.take(), std::runtime_error);
}

TEST_CASE("a suspended chain resumes where it stopped", "[core][task]") {
  std::coroutine_handle<> slot;
  int stage = 0;
  auto inner = [&]() -> Task<int> {
    stage = 1;
    co_await Yield{&slot};
    stage = 2;
    co_return 5;
  };
  auto outer_body = [&]() -> Task<int> { co_return 1 + co_await inner(); };
  auto outer = outer_body();
  outer.start();
  REQUIRE(stage == 1);
  REQUIRE_FALSE(outer.done());
  slot.resume();
  REQUIRE(stage == 2);
  REQUIRE(outer.done());
  REQUIRE(outer.take() == 6);
}
