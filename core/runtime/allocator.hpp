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

// How a caching allocator sizes segments and splits blocks.
// simple: one pool; segments in 256 KiB steps; a block splits when 512 bytes would remain
//   (the simulator's scenarios and the GPU backend).
// torch: PyTorch's CUDACachingAllocator: requests of up to 1 MiB from a small pool of 2 MiB
//   segments, split when 512 bytes would remain; larger ones from a large pool of 20 MiB
//   segments (requests of 10 MiB or more get their own, in 2 MiB steps), split only when more
//   than 1 MiB would remain. Blocks coalesce within a segment, never across the pools.
enum class PoolGeometry : uint8_t { simple, torch };

}  // namespace shardcheck::core
