// The allocator and reuse names.
#include "core/runtime/allocator.hpp"

namespace shardcheck::core {

std::string_view to_string(Allocator a) { return a == Allocator::caching ? "caching" : "stream_ordered"; }

std::optional<Allocator> parse_allocator(std::string_view s) {
  if (s == "caching") return Allocator::caching;
  if (s == "stream_ordered") return Allocator::stream_ordered;
  return std::nullopt;
}

std::string_view to_string(PoolReuse r) { return r == PoolReuse::best_fit ? "best_fit" : "earliest"; }

std::optional<PoolReuse> parse_reuse(std::string_view s) {
  if (s == "best_fit") return PoolReuse::best_fit;
  if (s == "earliest") return PoolReuse::earliest;
  return std::nullopt;
}

}  // namespace shardcheck::core
