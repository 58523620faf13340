// Mesh: rank <-> coordinates (row-major, last axis fastest) and per-axis process groups.
#include "core/layout/mesh.hpp"

#include <algorithm>

namespace shardcheck::core {

namespace {
constexpr std::string_view kAxisNames[] = {"pp", "vpp", "dp", "dp_outer", "dp_inner"};
}

Expected<Mesh> Mesh::create(std::vector<Axis> axes) {
  Mesh m;
  long world = 1;
  for (const Axis& a : axes) {
    if (std::find(std::begin(kAxisNames), std::end(kAxisNames), a.name) == std::end(kAxisNames)) {
      return fail("unknown mesh axis '", a.name, "' (expected pp, vpp, dp, dp_outer or dp_inner)");
    }
    if (a.size < 1) return fail("mesh axis '", a.name, "' has size ", a.size, "; sizes must be >= 1");
    for (const Axis& seen : m.axes_) {
      if (seen.name == a.name) return fail("mesh axis '", a.name, "' appears twice");
    }
    if (a.name == "vpp") {
      if (m.virtual_stages_ != 1) return fail("mesh axis 'vpp' appears twice");
      m.virtual_stages_ = a.size;
      continue;
    }
    world *= a.size;
    if (world > kMaxWorldSize) return fail("mesh has more than ", kMaxWorldSize, " ranks");
    m.axes_.push_back(a);
  }
  const bool has_dp = m.find_axis("dp").has_value();
  const bool has_2d = m.find_axis("dp_outer").has_value() || m.find_axis("dp_inner").has_value();
  if (has_dp && has_2d) return fail("a mesh has either 'dp' or 'dp_outer'/'dp_inner', not both");
  if (m.find_axis("dp_outer").has_value() != m.find_axis("dp_inner").has_value()) {
    return fail("'dp_outer' and 'dp_inner' come together");
  }
  // Virtual stages interleave a rank's layers with the other pipeline ranks' layers; with one
  // pipeline rank there is nobody to interleave with (and nothing to send).
  if (m.virtual_stages_ > 1 && m.size_or_one("pp") < 2)
    return fail("'vpp' needs a 'pp' axis of 2 or more ranks");
  m.world_size_ = static_cast<int>(world);
  return m;
}

Mesh Mesh::data_parallel(int dp) { return create({{"dp", dp}}).value(); }

std::optional<int> Mesh::find_axis(std::string_view name) const {
  for (int i = 0; i < num_axes(); ++i) {
    if (axes_[i].name == name) return i;
  }
  return std::nullopt;
}

int Mesh::axis(std::string_view name) const {
  auto a = find_axis(name);
  if (!a) throw InternalError("mesh " + describe() + " has no axis '" + std::string(name) + "'");
  return *a;
}

int Mesh::size_or_one(std::string_view name) const {
  if (name == "vpp") return virtual_stages_;
  auto a = find_axis(name);
  return a ? axes_[*a].size : 1;
}

std::vector<int> Mesh::coords(int rank) const {
  if (rank < 0 || rank >= world_size_) throw InternalError("rank outside the mesh");
  std::vector<int> c(axes_.size());
  for (int i = num_axes() - 1; i >= 0; --i) {
    c[i] = rank % axes_[i].size;
    rank /= axes_[i].size;
  }
  return c;
}

int Mesh::rank_of(std::span<const int> coords) const {
  int rank = 0;
  for (int i = 0; i < num_axes(); ++i) rank = rank * axes_[i].size + coords[i];
  return rank;
}

std::vector<int> Mesh::group(int rank, int axis) const {
  const int one[] = {axis};
  return group(rank, one);
}

std::vector<int> Mesh::group(int rank, std::span<const int> axes) const {
  std::vector<int> c = coords(rank);
  std::vector<int> members;
  int count = 1;
  for (int a : axes) count *= axes_.at(a).size;
  members.reserve(count);
  for (int i = 0; i < count; ++i) {
    int rest = i;
    for (int k = static_cast<int>(axes.size()) - 1; k >= 0; --k) {
      c[axes[k]] = rest % axes_[axes[k]].size;
      rest /= axes_[axes[k]].size;
    }
    members.push_back(rank_of(c));
  }
  return members;
}

std::string Mesh::describe() const {
  std::string s = "(";
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (i) s += ", ";
    s += axes_[i].name + "=" + std::to_string(axes_[i].size);
  }
  if (virtual_stages_ > 1) s += ", vpp=" + std::to_string(virtual_stages_);
  return s + ")";
}

bool operator==(const Mesh& a, const Mesh& b) {
  if (a.virtual_stages_ != b.virtual_stages_ || a.axes_.size() != b.axes_.size()) return false;
  for (size_t i = 0; i < a.axes_.size(); ++i) {
    if (a.axes_[i].name != b.axes_[i].name || a.axes_[i].size != b.axes_[i].size) return false;
  }
  return true;
}

}  // namespace shardcheck::core
