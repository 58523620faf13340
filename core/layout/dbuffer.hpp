// DBuffer: one rank's handle on a distributed buffer — the mesh axes it spans, one placement
// per axis, the group's global layout, its local storage and the stream it was allocated on.
//   BufferMesh m = BufferMesh::over(mesh, {mesh.axis("dp")}, rank, groups);
//   DBuffer g{m, {Placement::flat()}, layout, DType::f32, storage, rs_stream};
//   g.local()                -> LocalRange of this rank
//   g.tensor_rows(3)         -> TensorRef of the rows of tensor 3 this rank owns (if any)
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/base/tensor_ref.hpp"
#include "core/layout/layout.hpp"
#include "core/layout/mesh.hpp"
#include "core/layout/placement.hpp"

namespace shardcheck::core {

// The data-parallel sub-mesh a group's buffers are spread over, seen from one rank, with the
// rank's process group (communicator) along each of those axes.
struct BufferMesh {
  std::shared_ptr<const Mesh> mesh;
  std::vector<int> axes;        // indices into mesh->axes(), outermost first
  std::vector<GroupId> groups;  // this rank's group per axis (from Runtime::group)
  int rank = 0;                 // global rank

  int num_axes() const { return static_cast<int>(axes.size()); }
  int size(int i) const { return mesh->size(axes.at(i)); }
  std::vector<int> sizes() const;
  std::vector<int> coords() const;  // this rank's coordinate on each axis
  int total() const;                // D: product of the axis sizes
};

struct DBuffer {
  BufferMesh mesh;
  Placements placements;
  std::shared_ptr<const GlobalLayout> layout;
  DType dtype = DType::f32;
  BufferId storage = -1;
  StreamId stream = -1;  // allocation stream

  LocalRange local() const;
  int64_t local_numel() const { return local().numel; }
  int64_t local_bytes() const { return local_numel() * dtype_bytes(dtype); }
  TensorRef local_ref() const { return {storage, 0, local_numel(), dtype}; }
  // The rows of tensor `t` held here, as a range of the local storage; nullopt when none.
  std::optional<TensorRef> tensor_rows(int t) const;
  std::vector<OwnedRows> owned() const { return owned_rows(*layout, local()); }
};

}  // namespace shardcheck::core
