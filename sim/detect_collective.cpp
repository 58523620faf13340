// Reports collective_mismatch and collective_swap. Each call is fingerprinted at issue (kind,
// dtype, sizes, reduce op or root, group); when every member of the k-th call on a group (or
// both halves of the k-th p2p transfer) has issued, fingerprints and tensor tags are compared.
#include <algorithm>

#include "sim/world_state.hpp"

namespace shardcheck::sim {

namespace {
std::string q(const std::string& s) { return "'" + s + "'"; }
}  // namespace

std::string World::fingerprint(const core::CollectiveCall& c, const std::vector<int>& members,
                               const std::string& group) {
  std::string f = std::string(core::to_string(c.kind)) + " " + std::string(core::to_string(c.input.dtype)) +
                  " " + std::to_string(c.input.numel) + "->" + std::to_string(c.output.numel);
  if (c.kind == core::CollectiveKind::all_reduce || c.kind == core::CollectiveKind::reduce_scatter) {
    f += " " + std::string(core::to_string(c.reduce));
  }
  if (c.kind == core::CollectiveKind::barrier) {
    f = "barrier on " + group + " [";
    for (size_t i = 0; i < members.size(); ++i) f += (i ? "," : "") + std::to_string(members[i]);
    return f + "]";
  }
  if (c.kind == core::CollectiveKind::reduce) f += " " + std::string(core::to_string(c.reduce));
  if (c.kind == core::CollectiveKind::broadcast || c.kind == core::CollectiveKind::reduce)
    f += " root " + std::to_string(c.root);
  f += " on " + group + " [";
  for (size_t i = 0; i < members.size(); ++i) f += (i ? "," : "") + std::to_string(members[i]);
  return f + "]";
}

void World::compare_instance(int group, const Instance& inst, int64_t k) {
  if (!options_.detectors) return;
  // A reduction of differently laid-out buffers is reported as what it is; a size
  // difference that comes with it is part of the same bug.
  const bool layout_bug = group >= 0 && check_layouts(group, inst, k);
  const bool p2p = group < 0;
  bool fp_differs = false, tag_differs = false;
  for (const auto& m : inst.members) {
    fp_differs |= m.fingerprint != inst.members[0].fingerprint;
    tag_differs |= m.tag != inst.members[0].tag;
  }
  if (!fp_differs && !tag_differs) return;
  if (fp_differs && !p2p) {
    groups_[group].at(k).mismatch = true;
    mismatch_seen_ = true;
  }
  if (layout_bug) return;
  core::CollectiveDetail d;
  d.group = p2p ? "p2p" : groups_[group].name;
  d.index = k;
  std::string per_rank;
  std::vector<std::string> key_parts;  // sorted: a swap of A and B is one bug, whichever comes first
  for (size_t m = 0; m < inst.members.size(); ++m) {
    const OpInfo& info = op_info_[inst.members[m].op];
    d.ranks.push_back({info.rank, ranks_[info.rank]->streams[info.stream].name, inst.members[m].fingerprint,
                       inst.members[m].tag});
    per_rank += "\n  rank " + std::to_string(info.rank) + ": " + op_text(inst.members[m].op) + "  [" +
                inst.members[m].fingerprint + "]";
    key_parts.push_back(inst.members[m].tag + "/" + inst.members[m].fingerprint);
  }
  core::Finding f;
  f.kind = fp_differs ? core::FindingKind::collective_mismatch : core::FindingKind::collective_swap;
  const std::string which = p2p ? "p2p transfer #" + std::to_string(k)
                                : "collective #" + std::to_string(k) + " of group " + q(d.group);
  if (fp_differs) {
    f.summary = which + " differs across ranks (a hang or corrupted data on real hardware)";
    f.explanation =
        f.summary + ":" + per_rank +
        "\nEvery rank must issue the same collectives on a group in the same order. Issue them in an order "
        "that is identical on every rank (e.g. the optimizer's parameter order, never a set's iteration "
        "order).";
  } else {
    f.summary = which + " matches in shape but not in meaning: the ranks exchange different tensors (" +
                inst.members[0].tag + " vs " + inst.members[1 % inst.members.size()].tag + ")";
    f.explanation =
        f.summary + ":" + per_rank +
        "\nThe sizes agree, so nothing hangs: values are silently combined across different tensors. "
        "Issue the collectives in one order on every rank.";
  }
  if (sources_seen_) {
    f.explanation +=
        "\nIn PyTorch: every rank must call the same torch.distributed collectives on a process group in "
        "the same order, with tensors of the same dtype and number of elements (and the same op and root).";
  }
  std::sort(key_parts.begin(), key_parts.end());
  key_parts.erase(std::unique(key_parts.begin(), key_parts.end()), key_parts.end());
  f.key = std::string(fp_differs ? "mismatch|" : "swap|") + d.group;
  for (const auto& k : key_parts) f.key += "|" + k;
  f.detail = std::move(d);
  f.seed = options_.seed;
  core::add_finding(findings_, std::move(f));
}

void World::compare_p2p(int from, int to, Channel& ch, int64_t k) {
  if (!options_.detectors) return;
  const auto& pair = ch.at(k);
  Instance inst;  // reuse the collective comparison: two members, sender first
  inst.members.resize(2);
  inst.members[0] = {true,
                     pair.first.stream,
                     pair.first.position,
                     "p2p " + std::to_string(pair.first.bytes) + " bytes " + std::to_string(from) + "->" +
                         std::to_string(to),
                     pair.first.tag,
                     pair.first.op,
                     {}};
  inst.members[1] = {true,
                     pair.second.stream,
                     pair.second.position,
                     "p2p " + std::to_string(pair.second.bytes) + " bytes " + std::to_string(from) + "->" +
                         std::to_string(to),
                     pair.second.tag,
                     pair.second.op,
                     {}};
  compare_instance(-1, inst, k);
}

}  // namespace shardcheck::sim
