// DBuffer local ranges and per-tensor views.
#include "core/layout/dbuffer.hpp"

namespace shardcheck::core {

std::vector<int> BufferMesh::sizes() const {
  std::vector<int> s;
  for (int a : axes) s.push_back(mesh->size(a));
  return s;
}

std::vector<int> BufferMesh::coords() const {
  const std::vector<int> all = mesh->coords(rank);
  std::vector<int> c;
  for (int a : axes) c.push_back(all[a]);
  return c;
}

int BufferMesh::total() const {
  int d = 1;
  for (int a : axes) d *= mesh->size(a);
  return d;
}

LocalRange DBuffer::local() const { return local_range(*layout, placements, mesh.sizes(), mesh.coords()); }

std::optional<TensorRef> DBuffer::tensor_rows(int t) const {
  const LocalRange r = local();
  const TensorSlot& slot = layout->tensor(t);
  const int64_t b = std::max(r.offset, slot.offset);
  const int64_t e = std::min(r.offset + r.numel, slot.offset + slot.numel);
  if (b >= e) return std::nullopt;
  return TensorRef{storage, b - r.offset, e - b, dtype};
}

}  // namespace shardcheck::core
