// The allocator a run models, and how it hands out freed blocks: one spelling for scenario
// files, the simulator and the GPU backend.
//   Allocator a = parse_allocator("stream_ordered").value();   // to_string(a) == "stream_ordered"
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace shardcheck::core {

// caching: PyTorch's caching allocator (per-stream pools, free at host time, record_stream).
// stream_ordered: cudaMallocAsync (a free is an operation on the allocating stream).
enum class Allocator : uint8_t { caching, stream_ordered };
std::string_view to_string(Allocator a);
std::optional<Allocator> parse_allocator(std::string_view s);

// best_fit: the smallest legal free block (PyTorch's choice). earliest: the most recently
// freed legal block (the simulator then poisons freed memory, so reuse bugs corrupt values).
enum class PoolReuse : uint8_t { best_fit, earliest };
std::string_view to_string(PoolReuse r);
std::optional<PoolReuse> parse_reuse(std::string_view s);

}  // namespace shardcheck::core
