// Argument checks for the CPU reference's kernels: the dtype kinds and the shape arithmetic
// behind ArgCheck (arg_check.hpp).
#include "core/kernels/cpu/arg_check.hpp"

namespace shardcheck::core::cpu {

bool kind_allows(Kind k, DType t) {
  switch (k) {
    case Kind::floating:
      return t == DType::f32 || t == DType::bf16;
    case Kind::any_float:
      return is_float(t);
    case Kind::f32:
      return t == DType::f32;
    case Kind::f64:
      return t == DType::f64;
    case Kind::i32:
      return t == DType::i32;
  }
  return false;
}

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::floating:
      return "f32 or bf16";
    case Kind::any_float:
      return "f32, bf16 or f64";
    case Kind::f32:
      return "f32";
    case Kind::f64:
      return "f64";
    case Kind::i32:
      return "i32";
  }
  return "?";
}

int64_t numel_of(std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

}  // namespace shardcheck::core::cpu
