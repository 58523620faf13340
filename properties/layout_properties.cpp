// The layout and redistribute properties: docs/semantics.md §2's global layout partitions a group's
// logical elements among ranks, and redistribute moves values without changing them (or
// reading gaps). The round trips run on the simulator, whose detectors see every byte.
#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>

#include "core/layout/redistribute.hpp"
#include "core/strategies/param_groups.hpp"
#include "properties/checks.hpp"
#include "sim/world.hpp"

namespace shardcheck::properties {

namespace {

const core::Placement kR = core::Placement::replicate(), kF = core::Placement::flat(),
                      kPS = core::Placement::partial(core::ReduceOp::sum),
                      kPA = core::Placement::partial(core::ReduceOp::avg);

std::string tensor_name(const core::GlobalLayout& l, int t) {
  return "tensor " + std::to_string(t) + " (" + core::to_string(l.tensor(t).shape) + " at " +
         std::to_string(l.tensor(t).offset) + ")";
}

// The static facts of one layout: sizes, alignment, no overlap, unused = complement.
Verdict layout_shape(const core::GlobalLayout& l, int ranks) {
  int64_t chunk = 1, used = 0;
  for (const core::TensorSlot& t : l.tensors()) chunk = std::lcm(chunk, t.row), used += t.numel;
  if (l.chunk() != chunk)
    return Verdict::fail("chunk is " + std::to_string(l.chunk()) + ", the lcm of the rows is " +
                         std::to_string(chunk));
  if (l.size() % (chunk * ranks) != 0)
    return Verdict::fail("size " + std::to_string(l.size()) + " is not a multiple of chunk * D");
  std::vector<core::ElementRange> spans;
  for (int t = 0; t < l.num_tensors(); ++t) {
    const core::TensorSlot& s = l.tensor(t);
    if (s.offset < 0 || s.offset + s.numel > l.size())
      return Verdict::fail(tensor_name(l, t) + " lies outside the buffer");
    if (s.offset % s.row != 0)
      return Verdict::fail(tensor_name(l, t) + " is not aligned to its row of " + std::to_string(s.row));
    spans.push_back({s.offset, s.offset + s.numel});
  }
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end)
      return Verdict::fail("two tensors overlap at element " + std::to_string(spans[i].begin));
  }
  int64_t unused = 0;
  for (const core::ElementRange& u : l.unused()) {
    unused += u.size();
    for (const core::ElementRange& s : spans) {
      if (u.begin < s.end && s.begin < u.end)
        return Verdict::fail("an unused range overlaps a tensor at element " +
                             std::to_string(std::max(u.begin, s.begin)));
    }
  }
  if (unused + used != l.size())
    return Verdict::fail("tensors and unused ranges do not add up to the buffer size");
  return Verdict::pass();
}

// Under `placements` every rank owns whole rows and, within each replica (ranks sharing their
// coordinates on the non-Flat axes), every row of every tensor is owned exactly once.
Verdict ownership(const core::GlobalLayout& l, const core::Placements& placements,
                  const std::vector<int>& sizes) {
  int64_t flat = 1, world = 1;
  for (size_t i = 0; i < sizes.size(); ++i) flat *= placements[i].is_flat() ? sizes[i] : 1, world *= sizes[i];
  std::map<int, std::vector<std::vector<int>>> owners;  // replica -> tensor -> row -> owners
  for (int rank = 0; rank < world; ++rank) {
    std::vector<int> coords(sizes.size());
    int rest = rank, replica = 0;
    for (size_t i = sizes.size(); i-- > 0;) coords[i] = rest % sizes[i], rest /= sizes[i];
    for (size_t i = 0; i < sizes.size(); ++i)
      replica = replica * sizes[i] + (placements[i].is_flat() ? 0 : coords[i]);
    const core::LocalRange r = core::local_range(l, placements, sizes, coords);
    if (r.numel != l.size() / flat)
      return Verdict::fail("rank " + std::to_string(rank) + " holds " + std::to_string(r.numel) +
                           " elements, not size / " + std::to_string(flat));
    auto& rows = owners[replica];
    if (rows.empty()) {
      for (const core::TensorSlot& t : l.tensors()) rows.emplace_back(static_cast<size_t>(t.shape[0]), 0);
    }
    for (int t = 0; t < l.num_tensors(); ++t) {
      const core::TensorSlot& s = l.tensor(t);
      for (int64_t b : {r.offset, r.offset + r.numel}) {
        if (b > s.offset && b < s.offset + s.numel && (b - s.offset) % s.row != 0) {
          return Verdict::fail("the shard boundary at element " + std::to_string(b) + " splits a row of " +
                               tensor_name(l, t));
        }
      }
    }
    for (const core::OwnedRows& o : core::owned_rows(l, r)) {
      const core::TensorSlot& s = l.tensor(o.tensor);
      if (s.offset + o.first_row * s.row != r.offset + o.local_offset || o.first_row + o.rows > s.shape[0]) {
        return Verdict::fail("rank " + std::to_string(rank) + "'s rows of " + tensor_name(l, o.tensor) +
                             " are misplaced");
      }
      for (int64_t row = o.first_row; row < o.first_row + o.rows; ++row) rows[o.tensor][row]++;
    }
  }
  for (const auto& [replica, rows] : owners) {
    for (int t = 0; t < l.num_tensors(); ++t) {
      for (size_t row = 0; row < rows[t].size(); ++row) {
        if (rows[t][row] != 1) {
          return Verdict::fail("row " + std::to_string(row) + " of " + tensor_name(l, t) + " is owned by " +
                               std::to_string(rows[t][row]) + " ranks under " + core::to_string(placements));
        }
      }
    }
  }
  return Verdict::pass();
}

Verdict layout_partitions(const LayoutCase& c) {
  std::vector<core::ParamKey> keys;
  for (int id : c.ids) keys.push_back({id, core::DType::f32, true});
  const auto groups = core::partition_parameters(keys);
  const std::vector<core::Shape> shapes = c.unique_shapes();
  if (groups.size() != 1 || groups.front().size() != shapes.size()) {
    return Verdict::fail("the tied entries do not form one group of " + std::to_string(shapes.size()) +
                         " unique parameters");
  }
  auto l = core::GlobalLayout::create(shapes, c.ranks);
  if (!l) return Verdict::fail("no layout: " + l.error().message());
  if (Verdict v = layout_shape(*l, c.ranks); !v.passed()) return v;
  if (c.outer == 1) return ownership(*l, {kF}, {c.ranks});
  const std::vector<int> sizes{c.outer, c.ranks / c.outer};
  if (Verdict v = ownership(*l, {kR, kF}, sizes); !v.passed()) return v;
  return ownership(*l, {kF, kF}, sizes);
}

// ---- redistribute on the simulator

float contribution(int rank, int t, int64_t e) {
  return static_cast<float>((t * 31 + e * 7 + rank * 13) % 9 + 1);
}
float replica_value(int t, int64_t e) { return static_cast<float>((t * 5 + e * 3) % 11 + 1); }

struct Paths {
  std::vector<core::Placements> reduce_a, reduce_b, identity, average;  // each from its first entry
};

Paths paths(bool two_d) {
  if (!two_d) return {{{kPS}, {kF}, {kR}}, {{kPS}, {kR}}, {{kR}, {kF}, {kR}}, {{kR}, {kPA}, {kR}}};
  return {{{kPS, kPS}, {kPS, kF}, {kR, kF}, {kR, kR}},
          {{kPS, kPS}, {kR, kPS}, {kR, kR}},
          {{kR, kR}, {kR, kF}, {kF, kF}, {kR, kF}, {kR, kR}},
          {{kR, kR}, {kR, kPA}, {kR, kR}}};
}

// Allocates a buffer in the path's first placement, writes every tensor (and nothing else:
// gaps and padding stay never-written), redistributes along the path and consumes every
// tensor of the result with a non-elementwise kernel, which reports any gap value that
// reached a tensor as an uninitialized_read.
core::Task<core::DBuffer> walk(core::Runtime& rt, core::BufferMesh bm,
                               std::shared_ptr<const core::GlobalLayout> l,
                               std::vector<core::Placements> path, bool per_rank) {
  const core::StreamId s = rt.stream("compute");
  core::DBuffer d{bm, path.front(), l, core::DType::f32, -1, s};
  d.storage = co_await rt.alloc(d.local_bytes(), s, "start");
  for (int t = 0; t < l->num_tensors(); ++t) {
    std::vector<float> v(static_cast<size_t>(l->tensor(t).numel));
    for (size_t e = 0; e < v.size(); ++e)
      v[e] = per_rank ? contribution(rt.rank(), t, e) : replica_value(t, e);
    co_await rt.upload(core::TensorRef::f32(d.storage, l->tensor(t).offset, l->tensor(t).numel), s,
                       {reinterpret_cast<const std::byte*>(v.data()), v.size() * 4});
  }
  for (size_t i = 1; i < path.size(); ++i) {
    // Replicate -> Partial(avg) is a relabel, which works in place.
    const bool relabel = std::find(path[i].begin(), path[i].end(), kPA) != path[i].end();
    core::RedistributeOptions o{s, "step" + std::to_string(i), relabel};
    d = co_await core::redistribute(rt, d, path[i], o);
  }
  const core::TensorRef acc{co_await rt.alloc(8, s, "sumsq"), 0, 1, core::DType::f64};
  co_await rt.launch(core::kernels::fill(s, acc, 0.0));
  for (int t = 0; t < l->num_tensors(); ++t) {
    co_await rt.launch(core::kernels::sum_squares(
        s, core::TensorRef::f32(d.storage, l->tensor(t).offset, l->tensor(t).numel), acc, true));
  }
  co_return d;
}

// The tensor elements of a rank's replicated result, or the first that differs from `want`.
std::string compare_tensors(sim::World& w, int rank, const core::DBuffer& d,
                            const std::function<float(int, int64_t)>& want, const char* path) {
  const std::span<const std::byte> bytes = w.read(rank, d.storage);
  for (int t = 0; t < d.layout->num_tensors(); ++t) {
    const core::TensorSlot& s = d.layout->tensor(t);
    for (int64_t e = 0; e < s.numel; ++e) {
      float got;
      std::memcpy(&got, bytes.data() + (s.offset + e) * 4, 4);
      if (got != want(t, e)) {
        return std::string(path) + ": rank " + std::to_string(rank) + ", " + tensor_name(*d.layout, t) +
               " element " + std::to_string(e) + " is " + std::to_string(got) + ", expected " +
               std::to_string(want(t, e));
      }
    }
  }
  return "";
}

Verdict redistribute_round_trip(const LayoutCase& c) {
  auto l = std::make_shared<const core::GlobalLayout>(
      core::GlobalLayout::create(c.unique_shapes(), c.ranks).value());
  const bool two_d = c.outer > 1;
  auto mesh = std::make_shared<const core::Mesh>(
      two_d ? core::Mesh::create({{"dp_outer", c.outer}, {"dp_inner", c.ranks / c.outer}}).value()
            : core::Mesh::data_parallel(c.ranks));
  const Paths p = paths(two_d);
  sim::Options o;
  o.ranks = c.ranks;
  sim::World w(o);
  std::vector<std::array<core::DBuffer, 4>> out(c.ranks);
  const sim::RunResult r = w.run([&](core::Runtime& rt) -> core::Task<> {
    core::BufferMesh bm{mesh, {}, {}, rt.rank()};
    for (int a = 0; a < mesh->num_axes(); ++a) {
      bm.axes.push_back(a);
      bm.groups.push_back(rt.group(mesh->name(a), mesh->group(rt.rank(), a)));
    }
    auto& mine = out[rt.rank()];
    mine[0] = co_await walk(rt, bm, l, p.reduce_a, true);
    mine[1] = co_await walk(rt, bm, l, p.reduce_b, true);
    mine[2] = co_await walk(rt, bm, l, p.identity, false);
    mine[3] = co_await walk(rt, bm, l, p.average, false);
    co_await rt.sync_device();
  });
  if (!r.error.empty()) return Verdict::error(r.error);
  if (!r.findings.empty())
    return Verdict::fail("[" + std::string(core::to_string(r.findings.front().kind)) + "] " +
                         r.findings.front().summary);
  if (!r.completed) return Verdict::fail("the round trips did not complete");
  auto sum = [&](int t, int64_t e) {
    float v = 0;
    for (int rank = 0; rank < c.ranks; ++rank) v += contribution(rank, t, e);
    return v;
  };
  const char* names[4] = {"reduce-scatter then all-gather", "all-reduce", "slice then all-gather",
                          "relabel as average then all-reduce"};
  for (int rank = 0; rank < c.ranks; ++rank) {
    for (int k = 0; k < 4; ++k) {
      const std::string d = compare_tensors(
          w, rank, out[rank][k], k < 2 ? std::function<float(int, int64_t)>(sum) : replica_value, names[k]);
      if (!d.empty()) return Verdict::fail(d);
    }
  }
  return Verdict::pass();
}

}  // namespace

Verdict check_layout_partitions(const LayoutCase& c) { return layout_partitions(c); }
Verdict check_redistribute_round_trip(const LayoutCase& c) { return redistribute_round_trip(c); }

}  // namespace shardcheck::properties
