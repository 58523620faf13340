// Which logical parameter elements a device buffer holds, position by position. Strategy
// code attaches it to buffers it allocates (Runtime::annotate); the simulator uses it to
// check that a reduction across ranks combines the same logical elements on every member
// (layout_mismatch). Other backends ignore it.
//   auto map = std::make_shared<LogicalMap>();
//   map->segments.push_back({/*offset*/ 0, /*count*/ 96, /*param*/ 3, /*first*/ 32});
//   map->param_names = names;  // one shared vector for all of a strategy's maps
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardcheck::core {

struct LogicalMap {
  struct Segment {
    int64_t offset = 0;  // in elements of the buffer
    int64_t count = 0;
    int param = 0;      // logical parameter id
    int64_t first = 0;  // logical element index of the segment's first element
  };
  std::vector<Segment> segments;  // ascending, non-overlapping; elements outside: unlabelled
  // Indexed by logical parameter id; null or short: unnamed. Shared, not copied: a strategy
  // annotates every buffer it allocates and the simulator keeps each lifetime's map, so a copy
  // per map made a run quadratic in the number of layers.
  std::shared_ptr<const std::vector<std::string>> param_names;

  // The name of logical parameter p, or "param p" where it has none.
  std::string param_name(int p) const {
    if (param_names && p < static_cast<int>(param_names->size())) return (*param_names)[p];
    return "param " + std::to_string(p);
  }
};

}  // namespace shardcheck::core
