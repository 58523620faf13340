// Element types of device buffers, and bf16 <-> fp32 conversion with round-to-nearest-even,
// written out so that every backend (CPU reference, simulator, CUDA) rounds the same way.
//   uint16_t h = to_bf16(1.0f / 3.0f);   float back = from_bf16(h);
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shardcheck::core {

// f16, i8, i16 and boolean name the element types of captured programs (docs/capture-format.md),
// which run without values: their collectives are compared and their bytes tracked, and the CPU
// reference keeps them as plain integers (f16 as its bit pattern's magnitude is not modelled).
enum class DType : uint8_t { f32, bf16, f64, i32, i64, u8, f16, i8, i16, boolean };

constexpr int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    case DType::f16:
      return 2;
    case DType::i8:
      return 1;
    case DType::i16:
      return 2;
    case DType::boolean:
      return 1;
  }
  return 1;
}

constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::f16:
      return "f16";
    case DType::i8:
      return "i8";
    case DType::i16:
      return "i16";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s);  // "f32", "fp32", "bf16", ...

constexpr bool is_float(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f64 || t == DType::f16;
}

// fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
constexpr uint16_t to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

constexpr float from_bf16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Rounds an fp32 value to the nearest bf16 value, kept in fp32.
constexpr float round_bf16(float f) { return from_bf16(to_bf16(f)); }

}  // namespace shardcheck::core
