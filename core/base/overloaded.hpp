// The overload-set idiom for std::visit: std::visit(Overloaded{[](A&){...}, [](B&){...}}, v).
#pragma once

namespace shardcheck::core {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
// Clang 14 does not deduce aggregate template arguments by itself (P1816).
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace shardcheck::core
