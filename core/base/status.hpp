// Errors as values at API boundaries (after Abseil's Status): a function that can fail on
// bad input returns Expected<T>, which holds either the value or a message saying why.
//   Expected<Shape> s = parse_shape("5x4");
//   if (!s) return s.error();
#pragma once

#include <cassert>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace shardcheck::core {

// A failure with a human-readable reason. Empty message means success.
class [[nodiscard]] Error {
 public:
  Error() = default;
  explicit Error(std::string message) : message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// Thrown when a caller ignores an Error and asks for the value anyway: a bug in shardcheck,
// which the command line reports as an internal error (exit 3).
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Expected(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  const T& value() const& {
    if (!ok()) throw InternalError("Expected::value() on an error: " + error().message());
    return std::get<T>(v_);
  }
  T& value() & {
    if (!ok()) throw InternalError("Expected::value() on an error: " + error().message());
    return std::get<T>(v_);
  }
  T&& value() && {
    if (!ok()) throw InternalError("Expected::value() on an error: " + error().message());
    return std::get<T>(std::move(v_));
  }
  const T& operator*() const& { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  const Error& error() const { return std::get<Error>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Expected<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT: implicit by design
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return error_; }
  const std::string& message() const { return error_.message(); }

 private:
  Error error_;
  bool failed_ = false;
};

// Builds an Error from pieces: fail("rank ", r, " is outside the mesh").
template <class... Parts>
Error fail(Parts&&... parts) {
  std::string s;
  auto append = [&s](const auto& p) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(p)>>) {
      s += std::to_string(p);
    } else {
      s += p;
    }
  };
  (append(parts), ...);
  return Error(std::move(s));
}

}  // namespace shardcheck::core
