// Oracle captures and judgements.
#include "core/check/training_judge.hpp"

#include "core/base/byte_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace shardcheck::core {

namespace {

std::string element_name(const ModelLayout& m, int logical, int64_t e) {
  const Shape& s = m.logical_shape(logical);
  if (s.size() == 2)
    return m.logical_name(logical) + "[" + std::to_string(e / s[1]) + ", " + std::to_string(e % s[1]) + "]";
  return m.logical_name(logical) + "[" + std::to_string(e) + "]";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

bool same_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// A dense numbering of (logical, element) keys: one slot per element of every logical
// tensor, widened to whatever range a reported piece covers (a broken strategy may report
// elements outside its tensor), numbered in key order, so walking the slots from 0 visits the
// keys as a std::map of them would. The oracles touch every element of every rank at every
// step; an index computation instead of a tree lookup is most of their cost.
class ElementIndex {
 public:
  // `each(fn)` calls fn(logical, first, count) for every range the caller will look up; it is
  // called twice.
  template <class EachRange>
  ElementIndex(const ModelLayout& m, const EachRange& each) {
    int lo = 0, hi = m.num_logical();
    each([&](int l, int64_t, int64_t count) {
      if (count <= 0) return;
      lo = std::min(lo, l);
      hi = std::max(hi, l + 1);
    });
    logical_lo_ = lo;
    first_.assign(static_cast<size_t>(hi - lo), std::numeric_limits<int64_t>::max());
    end_.assign(first_.size(), std::numeric_limits<int64_t>::min());
    const auto widen = [&](int l, int64_t first, int64_t count) {
      if (count <= 0) return;
      const size_t i = static_cast<size_t>(l - logical_lo_);
      first_[i] = std::min(first_[i], first);
      end_[i] = std::max(end_[i], first + count);
    };
    for (int l = 0; l < m.num_logical(); ++l) widen(l, 0, numel(m.logical_shape(l)));
    each(widen);
    base_.resize(first_.size());
    for (size_t i = 0; i < first_.size(); ++i) {
      base_[i] = size_;
      if (end_[i] > first_[i]) size_ += end_[i] - first_[i];
    }
  }
  // Only for keys inside a range that was covered.
  size_t slot(int logical, int64_t e) const {
    const size_t i = static_cast<size_t>(logical - logical_lo_);
    return static_cast<size_t>(base_[i] + (e - first_[i]));
  }
  size_t size() const { return static_cast<size_t>(size_); }

 private:
  int logical_lo_ = 0;
  std::vector<int64_t> first_, end_, base_;  // per logical, from logical_lo_
  int64_t size_ = 0;
};

// How often the norm counted the elements of one parameter.
struct TimesCounted {
  int fewest = 0, most = 0;
  int64_t under = 0;  // elements counted zero times
  int64_t numel = 0;
  bool right() const { return fewest == 1 && most == 1; }
  // The count to show for the parameter: a wrong one where there is one.
  int shown() const { return fewest != 1 ? fewest : most; }
};

// For each parameter with elements, how many times the norm counted its elements.
std::map<int, TimesCounted> times_counted(const ModelLayout& m, const ElementIndex& index,
                                          const std::vector<int>& counted) {
  std::map<int, TimesCounted> out;  // logical -> counts
  for (int l = 0; l < m.num_logical(); ++l) {
    const int64_t n = numel(m.logical_shape(l));
    if (n <= 0) continue;
    const size_t first = index.slot(l, 0);
    TimesCounted t{counted[first], counted[first], 0, n};
    for (size_t k = first; k < first + static_cast<size_t>(n); ++k) {
      t.fewest = std::min(t.fewest, counted[k]);
      t.most = std::max(t.most, counted[k]);
      t.under += counted[k] == 0;
    }
    out.emplace(l, t);
  }
  return out;
}

// One line of a miscount finding: the parameter and how often it was counted, and where some
// of its elements were left out, how many.
std::string miscount_line(const std::string& name, const TimesCounted& t) {
  std::string line = "  " + name + ": counted " +
                     (t.fewest == t.most ? std::to_string(t.fewest)
                                         : std::to_string(t.fewest) + " to " + std::to_string(t.most)) +
                     " times";
  if (t.under > 0) {
    line += " (under-counted: " + std::to_string(t.under) + " of " + std::to_string(t.numel) +
            " elements left out of the norm)";
  }
  return line;
}

// A grad_norm_miscount finding: by the parameters counted other than once where there are
// any (`list` has a line for each), else by the value `rank` reported.
Finding miscount_finding(int step, int rank, NormDetail d, const std::string& list, bool under) {
  Finding f;
  f.kind = FindingKind::grad_norm_miscount;
  if (d.params.empty()) {
    f.summary = "step " + std::to_string(step) + ": rank " + std::to_string(rank) + "'s gradient norm is " +
                num(d.reported) + " but the norm of the unique logical gradient elements is " +
                num(d.expected) + "; every element is counted once, so the norm was summed from other values";
    f.explanation =
        f.summary +
        ".\nThe norm must be taken from the gradients the optimizer steps with: after their reduction has "
        "finished, from the reduced values, scaled as they are.";
  } else {
    f.summary = "step " + std::to_string(step) + ": the gradient norm is " + num(d.reported) +
                " but the norm of the unique logical gradient elements is " + num(d.expected) + "; " +
                std::to_string(d.params.size()) + " parameter(s) counted other than once";
    f.explanation = f.summary + ":" + list +
                    "\nEach logical element belongs in the norm once: divide out replication and leave out "
                    "shared copies (the "
                    "tied output weight on the last pipeline stage), as Megatron's param_is_not_shared does" +
                    (under ? ", and count every element some rank owns." : ".");
  }
  f.key = "norm";
  d.step = step;
  d.rank = rank;
  f.detail = std::move(d);
  return f;
}

struct LogicalNorm {
  double norm = 0;
  bool complete = false;  // every logical element has a gradient on some rank
  bool on_grid = false;   // every one is an exact-mode grid value, so every sum of squares is exact
};

// Exact mode's final gradients are whole multiples of 2^-k below 2*dp*mb*limit of them: the
// bound under which exact_grid makes every fp64 sum of their squares exact, in any order. A
// race or a broken reduction can put other values there, and then sums round.
bool on_grid(float g, const std::optional<ExactGrid>& grid, int dp, int microbatches) {
  if (!grid) return false;
  const double units = std::ldexp(static_cast<double>(g), grid->k);
  return units == std::nearbyint(units) && std::fabs(units) <= 2.0 * dp * microbatches * grid->limit;
}

// The norm of the logical gradient: every element of every logical parameter once, the
// first rank's copy of each, summed in (logical, element) order, independent of which
// elements the engine says it counted. Incomplete (and then of the elements found) when some
// element has no gradient on any rank. A template only to take the judge's private type.
template <class Snapshot>
LogicalNorm logical_norm(const TrainingSetup& setup, const ElementIndex& index,
                         const std::vector<const Snapshot*>& snaps) {
  const ModelLayout& m = *setup.model;
  std::vector<float> grad(index.size());
  std::vector<char> has_grad(index.size(), 0);
  for (const Snapshot* s : snaps) {
    for (const auto& v : s->grads) {
      for (int64_t i = 0; i < v.piece.count; ++i) {
        const size_t k = index.slot(v.piece.logical, v.piece.first + i);
        if (has_grad[k]) continue;
        grad[k] = v.data[static_cast<size_t>(i)];
        has_grad[k] = 1;
      }
    }
  }
  double sumsq = 0;
  bool complete = true, grid = setup.grid.has_value();
  for (int l = 0; l < m.num_logical(); ++l) {
    const int64_t n = numel(m.logical_shape(l));
    if (n <= 0) continue;
    for (size_t k = index.slot(l, 0); k < index.slot(l, 0) + static_cast<size_t>(n); ++k) {
      complete = complete && has_grad[k];
      if (!has_grad[k]) continue;
      sumsq += static_cast<double>(grad[k]) * grad[k];
      grid = grid && on_grid(grad[k], setup.grid, setup.dp, setup.config.microbatches);
    }
  }
  return {std::sqrt(sumsq), complete, grid};
}

}  // namespace

Task<std::vector<DownloadingJudge::Values>> DownloadingJudge::capture(Runtime& rt,
                                                                      const std::vector<Piece>& pieces) {
  std::vector<Values> out;
  const StreamId s = rt.stream("compute");
  for (const Piece& p : pieces) {
    std::vector<std::byte> bytes(static_cast<size_t>(p.count * dtype_bytes(p.dtype)));
    co_await rt.download(TensorRef{p.buffer, p.offset, p.count, p.dtype}, s, bytes);
    Values v{p, std::vector<float>(static_cast<size_t>(p.count))};
    for (int64_t i = 0; i < p.count; ++i)
      v.data[static_cast<size_t>(i)] = static_cast<float>(load_element(bytes.data(), p.dtype, i));
    out.push_back(std::move(v));
  }
  co_return out;
}

Task<> TrainingJudge::on_initialized(Runtime& rt, const RankView& view) {
  Snapshot s;
  s.main = co_await capture(rt, view.main);
  s.model = co_await capture(rt, view.model);
  s.present = true;
  std::lock_guard<std::mutex> lock(mu_);
  snaps_[{-1, rt.rank()}] = std::move(s);
}

Task<> TrainingJudge::on_step_end(Runtime& rt, int step, const RankView& view, double norm,
                                  const NormPlan& plan) {
  Snapshot s;
  s.main = co_await capture(rt, view.main);
  s.model = co_await capture(rt, view.model);
  s.grads = co_await capture(rt, view.grads);
  s.norm = norm;
  s.plan = plan;
  s.present = true;
  std::lock_guard<std::mutex> lock(mu_);
  snaps_[{step, rt.rank()}] = std::move(s);
}

std::vector<std::byte> TrainingJudge::export_rank(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  ByteWriter w;
  w.put<int32_t>(rank);
  auto put_values = [&](const std::vector<Values>& list) {
    w.put<uint64_t>(list.size());
    for (const Values& v : list) {
      w.put(v.piece);
      w.put_vector(v.data);
    }
  };
  for (const auto& [key, snap] : snaps_) {
    if (key.second != rank) continue;
    w.put<uint8_t>(1);
    w.put<int32_t>(key.first);
    put_values(snap.main);
    put_values(snap.model);
    put_values(snap.grads);
    w.put(snap.norm);
    w.put_vector(snap.plan.counted);
    w.put<uint8_t>(snap.present);
  }
  w.put<uint8_t>(0);
  return w.bytes();
}

void TrainingJudge::import_rank(std::span<const std::byte> bytes) {
  ByteReader r(bytes);
  const int rank = r.get<int32_t>();
  auto get_values = [&] {
    std::vector<Values> list(static_cast<size_t>(r.get<uint64_t>()));
    for (Values& v : list) {
      v.piece = r.get<Piece>();
      v.data = r.get_vector<float>();
    }
    return list;
  };
  std::lock_guard<std::mutex> lock(mu_);
  while (r.get<uint8_t>()) {
    const int step = r.get<int32_t>();
    Snapshot s;
    s.main = get_values();
    s.model = get_values();
    s.grads = get_values();
    s.norm = r.get<double>();
    s.plan.counted = r.get_vector<NormPlan::Entry>();
    s.present = r.get<uint8_t>() != 0;
    snaps_[{step, rank}] = std::move(s);
  }
}

int TrainingJudge::steps_completed() const {
  int done = 0;
  for (int step = 0; step < setup_.config.steps; ++step) {
    for (int r = 0; r < setup_.mesh->world_size(); ++r) {
      if (!snaps_.count({step, r})) return done;
    }
    done = step + 1;
  }
  return done;
}

std::vector<std::vector<float>> TrainingJudge::logical_main(int step) const {
  const ModelLayout& m = *setup_.model;
  std::vector<std::vector<float>> out(m.num_logical());
  std::vector<std::vector<bool>> seen(m.num_logical());
  for (int l = 0; l < m.num_logical(); ++l) {
    out[l].assign(static_cast<size_t>(numel(m.logical_shape(l))), 0.0f);
    seen[l].assign(out[l].size(), false);
  }
  for (int r = 0; r < setup_.mesh->world_size(); ++r) {
    auto it = snaps_.find({step, r});
    if (it == snaps_.end()) return {};
    for (const Values& v : it->second.main) {
      for (int64_t i = 0; i < v.piece.count; ++i) {
        out[v.piece.logical][v.piece.first + i] = v.data[i];
        seen[v.piece.logical][v.piece.first + i] = true;
      }
    }
  }
  for (const auto& s : seen) {
    for (bool b : s) {
      if (!b) return {};
    }
  }
  return out;
}

// Replicas: every copy of a logical element, wherever it lives, must be bitwise equal.
void TrainingJudge::check_replicas(int step, const char* role, std::vector<Finding>& out) const {
  cancel.poll();
  const ModelLayout& m = *setup_.model;
  std::vector<const std::vector<Values>*> lists;  // per rank present at this step, in rank order
  std::vector<int> ranks;
  for (int r = 0; r < setup_.mesh->world_size(); ++r) {
    auto it = snaps_.find({step, r});
    if (it == snaps_.end()) continue;
    lists.push_back(std::string(role) == "main" ? &it->second.main : &it->second.model);
    ranks.push_back(r);
  }
  const ElementIndex index(m, [&](const auto& fn) {
    for (const auto* list : lists) {
      for (const Values& v : *list) fn(v.piece.logical, v.piece.first, v.piece.count);
    }
  });
  // The first copy seen of each element, in rank order: its value and rank (-1: none yet).
  std::vector<float> first_value(index.size());
  std::vector<int> first_rank(index.size(), -1);
  for (size_t li = 0; li < lists.size(); ++li) {
    const int r = ranks[li];
    for (const Values& v : *lists[li]) {
      for (int64_t i = 0; i < v.piece.count; ++i) {
        const size_t k = index.slot(v.piece.logical, v.piece.first + i);
        if (first_rank[k] < 0) {
          first_value[k] = v.data[i];
          first_rank[k] = r;
          continue;
        }
        if (same_bits(first_value[k], v.data[i])) continue;
        ElementDetail d{step,
                        m.logical_name(v.piece.logical),
                        v.piece.first + i,
                        first_rank[k],
                        r,
                        first_value[k],
                        v.data[i],
                        role,
                        {}};
        Finding fd;
        fd.kind = FindingKind::replica_divergence;
        const std::string when = step < 0 ? "at initialization" : "after step " + std::to_string(step);
        fd.summary = std::string(role) + " weight " + element_name(m, v.piece.logical, v.piece.first + i) +
                     " differs between ranks " + std::to_string(first_rank[k]) + " and " + std::to_string(r) +
                     " " + when + " (" + num(first_value[k]) + " vs " + num(v.data[i]) + ")";
        fd.explanation =
            fd.summary +
            ".\nEvery copy of a replicated value must be identical: ranks that disagree train different "
            "models. Check that parameters are broadcast (or identically initialized) before training "
            "and that every replica receives the same reduced gradient.";
        fd.key = "replica|" + std::string(role);
        fd.detail = d;
        out.push_back(std::move(fd));
        return;
      }
    }
  }
}

// The optimizer moves a weight by at most lr * U per step, U the largest Adam update
// |mhat| / sqrt(vhat) (for b1^2 < b2: (1-b1)/sqrt(1-b2) / (1 - b1/sqrt(b2)); for SGD, the
// clipped gradient bound 1). Two runs whose reductions differ only in rounding can move apart
// by at most twice that per step, plus one bf16 rounding of the weight they compute with.
double TrainingJudge::tolerance(int step, float expected) const {
  const OptimizerConfig& o = setup_.config.optimizer;
  double u = 1.0;
  if (o.kind == OptimizerConfig::Kind::adam && o.beta1 * o.beta1 < o.beta2) {
    u = std::max(1.0, (1 - o.beta1) / std::sqrt(1 - o.beta2) / (1 - o.beta1 / std::sqrt(o.beta2)));
  }
  const double bf16 =
      setup_.config.precision.param == DType::bf16 ? std::ldexp(std::fabs(expected), -8) : 0.0;
  return 2.0 * (step + 1) * o.lr * (u + o.weight_decay * std::fabs(expected)) + bf16;
}

void TrainingJudge::check_numerics(std::vector<Finding>& out) const {
  if (!reference_) return;
  const ModelLayout& m = *setup_.model;
  const bool exact = setup_.config.precision.exact && bitwise_;
  for (int step = 0; step < steps_completed(); ++step) {
    for (int r = 0; r < setup_.mesh->world_size(); ++r) {
      cancel.poll();
      const Snapshot& s = snaps_.at({step, r});
      for (const Values& v : s.main) {
        const std::vector<float>& ref = reference_->steps[step].main[v.piece.logical];
        for (int64_t i = 0; i < v.piece.count; ++i) {
          const float want = ref[v.piece.first + i], got = v.data[i];
          const bool ok = exact ? same_bits(want, got)
                                : std::fabs(static_cast<double>(want) - got) <= tolerance(step, want);
          if (ok) continue;
          ElementDetail d{step,
                          m.logical_name(v.piece.logical),
                          v.piece.first + i,
                          r,
                          -1,
                          want,
                          got,
                          exact ? "bitwise (exact mode)" : "tolerance " + num(tolerance(step, want)),
                          {}};
          Finding f;
          f.kind = FindingKind::numerics_divergence;
          f.summary = "after step " + std::to_string(step) + ", rank " + std::to_string(r) +
                      "'s main weight " + element_name(m, v.piece.logical, v.piece.first + i) + " is " +
                      num(got) + "; the single-rank reference has " + num(want);
          f.explanation =
              f.summary +
              (exact ? " (exact mode: every strategy must match bit for bit)" : " (beyond " + d.note + ")") +
              ".\nThe strategy computed a different update than the reference: a gradient contribution was "
              "dropped, counted twice, scaled wrongly, or the model computed with stale weights.";
          f.key = "numerics";
          f.detail = d;
          out.push_back(std::move(f));
          return;  // the first divergence is the one to look at
        }
      }
    }
  }
}

// Exact mode, on gradients that are grid values: every sum of their squares is exact in fp64,
// in any order, so the norm must be equal. Otherwise the sums differ only in fp64 rounding of
// another order, far below what one miscounted element changes.
bool TrainingJudge::norm_matches(double reported, double logical, bool on_grid) const {
  // A NaN in the gradients makes both NaN: the norm was taken from those gradients, and the NaN
  // itself is the numerics finding's to report.
  if (std::isnan(reported) && std::isnan(logical)) return true;
  if (setup_.config.precision.exact && bitwise_ && on_grid) return reported == logical;
  return std::fabs(reported - logical) <= 1e-9 * std::max(std::fabs(logical), 1e-30);
}

// Judges both what the engine says it counted (each logical element once) and the value it
// computed (the norm of the logical gradient the ranks hold): a plan that is right but a norm
// taken from other values, or a plan that claims an element the sum left out, is caught by
// the value.
void TrainingJudge::check_norms(std::vector<Finding>& out) const {
  const ModelLayout& m = *setup_.model;
  for (int step = 0; step < steps_completed(); ++step) {
    cancel.poll();
    std::vector<const Snapshot*> snaps;
    for (int r = 0; r < setup_.mesh->world_size(); ++r) snaps.push_back(&snaps_.at({step, r}));
    const ElementIndex index(m, [&](const auto& fn) {
      for (const Snapshot* s : snaps) {
        for (const auto& e : s->plan.counted) fn(e.logical, e.first, e.count);
        for (const Values& v : s->grads) fn(v.piece.logical, v.piece.first, v.piece.count);
      }
    });
    std::vector<int> counted(index.size(), 0);
    for (const Snapshot* s : snaps) {
      for (const auto& e : s->plan.counted) {
        for (int64_t i = 0; i < e.count; ++i) counted[index.slot(e.logical, e.first + i)]++;
      }
    }
    NormDetail d;
    std::string list;
    bool under = false;
    for (const auto& [l, t] : times_counted(m, index, counted)) {
      if (t.right()) continue;
      under = under || t.under > 0;
      d.params.push_back({m.logical_name(l), t.shown()});
      list += "\n" + miscount_line(m.logical_name(l), t);
    }
    const LogicalNorm logical = logical_norm(setup_, index, snaps);
    int rank = -1;  // the first rank whose norm is not the logical gradient's
    for (size_t r = 0; logical.complete && r < snaps.size() && rank < 0; ++r) {
      if (!norm_matches(snaps[r]->norm, logical.norm, logical.on_grid)) rank = static_cast<int>(r);
    }
    if (d.params.empty() && rank < 0) continue;
    if (rank < 0) rank = static_cast<int>(snaps.size()) - 1;
    d.reported = snaps[static_cast<size_t>(rank)]->norm;
    d.expected = logical.norm;
    out.push_back(miscount_finding(step, rank, std::move(d), list, under));
    return;
  }
}

std::vector<Finding> TrainingJudge::judge() const {
  std::vector<Finding> out;
  check_replicas(-1, "main", out);
  check_replicas(-1, "model", out);
  for (int step = 0; step < steps_completed() && out.empty(); ++step) {
    check_replicas(step, "main", out);
    check_replicas(step, "model", out);
  }
  check_numerics(out);
  check_norms(out);
  return out;
}

}  // namespace shardcheck::core
