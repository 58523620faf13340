// Every collective a run issues, rank by rank in issue order, with what identifies it on the
// wire (op, group, dtype, element counts, reduce op, root) and where it ran (stream) and came
// from (its tag, and a captured program's Python line): the sequences `shardcheck compare
// --capture` sets side by side. An observer, attached to a world before its run:
//   CollectiveLog log;  world.add_detector(log);  ... run ...  log.per_rank(world.ranks());
// A collective enters the log once every member has issued it; one that some member never
// issues (a hang) is not in it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/base/reduce_op.hpp"
#include "core/check/findings.hpp"
#include "core/runtime/runtime.hpp"

namespace shardcheck::sim {

class Detector;

struct IssuedCollective {
  int rank = 0;
  uint32_t op = 0;  // the world's operation id: issue order on the rank
  core::CollectiveKind kind = core::CollectiveKind::all_reduce;
  std::string group;         // the group's name
  std::vector<int> members;  // global ranks, group-rank order
  int64_t index = 0;         // the k-th collective of its group
  core::DType dtype = core::DType::f32;
  int64_t in_numel = 0, out_numel = 0;
  core::ReduceOp reduce = core::ReduceOp::sum;
  int root = 0;
  std::string stream;       // the rank's stream name
  std::string tag;          // the program's name for it
  core::SourceLine source;  // a captured program's Python line; unknown otherwise
};

class CollectiveLog {
 public:
  CollectiveLog();
  ~CollectiveLog();
  CollectiveLog(const CollectiveLog&) = delete;
  CollectiveLog& operator=(const CollectiveLog&) = delete;

  Detector& detector();  // what World::add_detector takes
  // Rank r's collectives in the order r issued them.
  std::vector<std::vector<IssuedCollective>> per_rank(int ranks) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardcheck::sim
