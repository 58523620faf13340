// The shadow's record of definedness, after MemorySanitizer: bytes are defined once written
// in their current lifetime; elementwise kernels, collectives and p2p carry undefined bytes to
// their outputs, and the reads that consume them (kernels that are not elementwise, downloads)
// go to the detectors that ask for on_undefined_read (detect_uninit.cpp).
#include <algorithm>

#include "sim/detector.hpp"

namespace shardcheck::sim {

Shadow::Ranges World::undefined_rel(int rank, const core::TensorRef& t, uint32_t* origin) {
  Shadow::Ranges out;
  if (!options_.detectors || t.numel == 0) return out;
  const uint64_t a = address(rank, t);
  ranks_[rank]->shadow.undefined(a, a + static_cast<uint64_t>(t.bytes()), ranks_[rank]->buffers[t.buffer],
                                 out, origin);
  for (auto& [x, y] : out) {
    x -= a;
    y -= a;
  }
  return out;
}

void World::set_undefined_rel(int rank, const core::TensorRef& t, const Shadow::Ranges& rel,
                              uint32_t origin) {
  if (!options_.detectors || rel.empty()) return;
  const uint64_t a = address(rank, t);
  for (const auto& [x, y] : rel) ranks_[rank]->shadow.set_defined(a + x, a + y, false, origin);
}

Shadow::Ranges World::undefined_side(int rank, uint32_t op, std::span<const core::TensorRef> parts,
                                     uint32_t& origin) {
  Shadow::Ranges out;
  uint64_t at = 0;
  for (const core::TensorRef& t : parts) {
    uint32_t found = 0;
    const Shadow::Ranges undef = undefined_rel(rank, t, &found);
    if (!undef.empty() && origin == 0) origin = carried_origin(rank, t, found, op);
    for (const auto& [x, y] : undef) out.emplace_back(at + x, at + y);
    at += static_cast<uint64_t>(t.bytes());
  }
  return out;
}

void World::set_undefined_side(int rank, std::span<const core::TensorRef> parts, const Shadow::Ranges& rel,
                               uint32_t origin) {
  if (parts.size() == 1) return set_undefined_rel(rank, parts[0], rel, origin);
  uint64_t at = 0;
  for (const core::TensorRef& t : parts) {
    const uint64_t end = at + static_cast<uint64_t>(t.bytes());
    Shadow::Ranges mine;
    for (const auto& [x, y] : rel) {
      if (x < end && y > at) mine.emplace_back(std::max(x, at) - at, std::min(y, end) - at);
    }
    set_undefined_rel(rank, t, mine, origin);
    at = end;
  }
}

uint32_t World::carried_origin(int rank, const core::TensorRef& t, uint32_t found, uint32_t op) {
  if (found != 0) return found;
  const uint32_t lifetime = ranks_[rank]->buffers[t.buffer];
  auto [it, fresh] = origin_of_.try_emplace(lifetime, static_cast<uint32_t>(undef_origins_.size() + 1));
  if (fresh) undef_origins_.push_back({lifetime, op});
  return it->second;
}

void World::check_defined(int rank, uint32_t op, const core::TensorRef& t) {
  uint32_t origin = 0;
  const Shadow::Ranges undef = undefined_rel(rank, t, &origin);
  if (undef.empty()) return;
  const UndefinedRead read{rank, op, t, undef, origin};
  notify(Detector::on_undefined_read,
         [&](Detector& d, const WorldView& view) { d.undefined_read(view, read, findings_); });
}

World::ElementRanges World::check_kernel_inputs(int rank, uint32_t op, const core::KernelCall& k,
                                                uint32_t& origin) {
  const bool elementwise = core::is_elementwise(k.params);
  // Elementwise kernels propagate undefined elements; all others consume their inputs.
  if (options_.detectors && !elementwise) {
    for (const auto& in : k.reads) check_defined(rank, op, in);
  }
  // Element i of an output is defined only when element i of every input is.
  ElementRanges elems;
  if (options_.detectors && elementwise) {
    for (const auto& in : k.reads) {
      const int64_t es = core::dtype_bytes(in.dtype);
      uint32_t found = 0;
      const Shadow::Ranges undef = undefined_rel(rank, in, &found);
      if (!undef.empty() && origin == 0) origin = carried_origin(rank, in, found, op);
      for (const auto& [x, y] : undef) {
        elems.emplace_back(static_cast<int64_t>(x) / es, (static_cast<int64_t>(y) + es - 1) / es);
      }
    }
  }
  return elems;
}

void World::set_kernel_outputs_undefined(int rank, const core::KernelCall& k, const ElementRanges& elems,
                                         uint32_t origin) {
  for (const auto& out : k.writes) {
    if (elems.empty()) break;
    const int64_t es = core::dtype_bytes(out.dtype);
    Shadow::Ranges rel;
    for (const auto& [x, y] : elems) {
      rel.emplace_back(static_cast<uint64_t>(x * es), static_cast<uint64_t>(std::min(y, out.numel) * es));
    }
    set_undefined_rel(rank, out, rel, origin);
  }
}

Shadow::Ranges World::collective_undefined_rel(const core::CollectiveCall& c,
                                               const std::vector<Shadow::Ranges>& undef, size_t m) {
  const uint64_t in_bytes = static_cast<uint64_t>(c.input.bytes()),
                 out_bytes = static_cast<uint64_t>(c.output.bytes());
  const size_t n = undef.size();
  Shadow::Ranges rel;
  for (size_t src = 0; src < n; ++src) {
    for (const auto& [x, y] : undef[src]) {
      switch (c.kind) {
        case core::CollectiveKind::all_gather:
          rel.emplace_back(src * in_bytes + x, src * in_bytes + y);
          break;
        case core::CollectiveKind::reduce_scatter: {
          const uint64_t lo = std::max<uint64_t>(x, m * out_bytes),
                         hi = std::min<uint64_t>(y, (m + 1) * out_bytes);
          if (lo < hi) rel.emplace_back(lo - m * out_bytes, hi - m * out_bytes);
          break;
        }
        case core::CollectiveKind::all_reduce:
          rel.emplace_back(x, y);
          break;
        case core::CollectiveKind::broadcast:
          if (static_cast<int>(src) == c.root) rel.emplace_back(x, y);
          break;
        case core::CollectiveKind::reduce:  // only the root's output is written
          if (static_cast<int>(m) == c.root) rel.emplace_back(x, y);
          break;
        case core::CollectiveKind::all_to_all: {  // block m of src's input -> block src of m's
          const uint64_t block = in_bytes / n;
          const uint64_t lo = std::max<uint64_t>(x, m * block), hi = std::min<uint64_t>(y, (m + 1) * block);
          if (lo < hi) rel.emplace_back(lo - m * block + src * block, hi - m * block + src * block);
          break;
        }
        case core::CollectiveKind::barrier:
          break;
      }
    }
  }
  return rel;
}

}  // namespace shardcheck::sim
