// A non-owning reference to something callable, for a parameter the callee only calls before
// it returns: unlike std::function it never copies the callable or allocates, which matters
// where a lambda with a few captures is passed once per simulated operation. It must not
// outlive what it refers to, so it is for parameters, never for members or return values.
//   void visit(FunctionRef<bool(int)> keep);   visit([&](int x) { return x < limit; });
#pragma once

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace shardcheck::core {

template <class Signature>
class FunctionRef;

template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
                                              std::is_invocable_r_v<R, F&, A...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): converts like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, A... a) -> R {
          return std::invoke(*static_cast<std::remove_reference_t<F>*>(o), std::forward<A>(a)...);
        }) {}

  R operator()(A... a) const { return call_(object_, std::forward<A>(a)...); }

 private:
  void* object_;
  R (*call_)(void*, A...);
};

}  // namespace shardcheck::core
