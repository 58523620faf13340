// Ranks arranged on named axes, e.g. (pp, dp) or (pp, dp_outer, dp_inner); a rank's process
// group along an axis is every rank that shares its coordinates on all other axes.
//   Mesh m = Mesh::create({{"pp", 2}, {"dp", 4}}).value();
//   m.group(5, m.axis("dp"))  ==  {4, 5, 6, 7}     // rank 5 is (pp=1, dp=1)
// `vpp` is accepted as a virtual axis: it counts model chunks per rank, not ranks.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.hpp"

namespace shardcheck::core {

struct Axis {
  std::string name;
  int size = 1;
};

class Mesh {
 public:
  static constexpr int kMaxWorldSize = 4096;

  // Axis names must be among pp, vpp, dp, dp_outer, dp_inner, each at most once, sizes >= 1.
  static Expected<Mesh> create(std::vector<Axis> axes);
  // A one-axis data-parallel mesh, the common case in tests.
  static Mesh data_parallel(int dp);

  int world_size() const { return world_size_; }
  int num_axes() const { return static_cast<int>(axes_.size()); }
  const std::vector<Axis>& axes() const { return axes_; }
  int size(int axis) const { return axes_.at(axis).size; }
  const std::string& name(int axis) const { return axes_.at(axis).name; }
  // Model chunks per rank (the vpp axis), 1 when absent.
  int virtual_stages() const { return virtual_stages_; }

  std::optional<int> find_axis(std::string_view name) const;
  int axis(std::string_view name) const;  // throws InternalError when absent
  // Size of a named axis, 1 when the mesh lacks it (a mesh without pp has one stage).
  int size_or_one(std::string_view name) const;

  std::vector<int> coords(int rank) const;
  int rank_of(std::span<const int> coords) const;
  // Members of `rank`'s process group along `axis`, in coordinate (group-rank) order.
  std::vector<int> group(int rank, int axis) const;
  // Members of the group spanning several axes (e.g. every dp axis), in row-major order of
  // those axes' coordinates.
  std::vector<int> group(int rank, std::span<const int> axes) const;

  std::string describe() const;  // "(pp=2, dp=4)"
  friend bool operator==(const Mesh& a, const Mesh& b);

 private:
  std::vector<Axis> axes_;  // rank axes only, row-major (last axis fastest)
  int world_size_ = 1;
  int virtual_stages_ = 1;
};

}  // namespace shardcheck::core
