// 1F1B and interleaved 1F1B, after Megatron-LM's schedules.
#include "core/train/pipeline.hpp"

#include <algorithm>

#include "core/base/status.hpp"

namespace shardcheck::core {

namespace {

std::vector<PipelineAction> one_f_one_b(int pp, int rank, int mb) {
  using K = PipelineAction::Kind;
  std::vector<PipelineAction> a;
  const int warmup = std::min(pp - rank - 1, mb);
  for (int i = 0; i < warmup; ++i) a.push_back({K::forward, 0, i});
  for (int i = 0; i < mb - warmup; ++i) {
    a.push_back({K::forward, 0, warmup + i});
    a.push_back({K::backward, 0, i});
  }
  for (int i = mb - warmup; i < mb; ++i) a.push_back({K::backward, 0, i});
  return a;
}

// Megatron's interleaving: virtual microbatch k runs chunk (k / pp) % vpp forward (reversed
// for backward) on microbatch (k / (pp * vpp)) * pp + k % pp.
std::vector<PipelineAction> interleaved(int pp, int vpp, int rank, int mb) {
  using K = PipelineAction::Kind;
  const int total = mb * vpp;
  int warmup = (pp - rank - 1) * 2 + (vpp - 1) * pp;
  if (mb == pp) warmup = total;
  warmup = std::min(warmup, total);
  auto chunk = [&](int k, bool forward) {
    const int c = (k % (pp * vpp)) / pp;
    return forward ? c : vpp - 1 - c;
  };
  auto micro = [&](int k) { return (k / (pp * vpp)) * pp + k % pp; };
  std::vector<PipelineAction> a;
  for (int k = 0; k < warmup; ++k) a.push_back({K::forward, chunk(k, true), micro(k)});
  for (int i = 0; i < total - warmup; ++i) {
    const int f = warmup + i;
    a.push_back({K::forward, chunk(f, true), micro(f)});
    a.push_back({K::backward, chunk(i, false), micro(i)});
  }
  for (int k = total - warmup; k < total; ++k) a.push_back({K::backward, chunk(k, false), micro(k)});
  return a;
}

}  // namespace

std::vector<PipelineAction> pipeline_schedule(int pp, int vpp, int pp_rank, int microbatches) {
  if (pp < 1 || vpp < 1 || pp_rank < 0 || pp_rank >= pp || microbatches < 1)
    throw InternalError("bad pipeline shape");
  if (vpp == 1) return one_f_one_b(pp, pp_rank, microbatches);
  if (microbatches % pp != 0) throw InternalError("interleaved pipelining needs microbatches % pp == 0");
  return interleaved(pp, vpp, pp_rank, microbatches);
}

std::string to_string(const std::vector<PipelineAction>& actions) {
  std::string s;
  for (const auto& a : actions) {
    if (!s.empty()) s += " ";
    s += (a.kind == PipelineAction::Kind::forward ? "F" : "B") + std::to_string(a.chunk) + "." +
         std::to_string(a.microbatch);
  }
  return s;
}

}  // namespace shardcheck::core
