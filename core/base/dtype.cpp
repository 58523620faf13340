// DType parsing.
#include "core/base/dtype.hpp"

namespace shardcheck::core {

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f64" || s == "fp64" || s == "float64") return DType::f64;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "u8" || s == "uint8" || s == "byte") return DType::u8;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::f16;
  if (s == "i8" || s == "int8") return DType::i8;
  if (s == "i16" || s == "int16") return DType::i16;
  if (s == "bool") return DType::boolean;
  return std::nullopt;
}

}  // namespace shardcheck::core
