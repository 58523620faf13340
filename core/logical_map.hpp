// Which logical parameter elements a device buffer holds, position by position. Strategy
// code attaches it to buffers it allocates (Runtime::annotate); the simulator uses it to
// check that a reduction across ranks combines the same logical elements on every member
// (layout_mismatch). Other backends ignore it.
//   auto map = std::make_shared<LogicalMap>();
//   map->segments.push_back({/*offset*/ 0, /*count*/ 96, /*param*/ 3, /*first*/ 32});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardcheck::core {

struct LogicalMap {
  struct Segment {
    int64_t offset = 0;  // in elements of the buffer
    int64_t count = 0;
    int param = 0;       // logical parameter id
    int64_t first = 0;   // logical element index of the segment's first element
  };
  std::vector<Segment> segments;       // ascending, non-overlapping; elements outside: unlabelled
  std::vector<std::string> param_names;  // indexed by logical parameter id
};

}  // namespace shardcheck::core
