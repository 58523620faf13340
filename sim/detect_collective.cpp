// Reports collective_mismatch and collective_swap. Each call is fingerprinted at issue (kind,
// dtype, sizes, reduce op or root, group); when every member of the k-th call on a group (or
// both halves of the k-th p2p transfer) has issued, fingerprints and tensor tags are compared.
#include <algorithm>

#include "sim/world_state.hpp"

namespace shardcheck::sim {

namespace {
std::string q(const std::string& s) { return "'" + s + "'"; }

// "rank 0 passes f32, ranks 1 and 2 bf16": each value with the ranks that pass it, in the
// order the values first appear.
std::string who_passes(const std::vector<std::pair<int, std::string>>& rank_value) {
  std::vector<std::pair<std::string, std::vector<int>>> by_value;
  for (const auto& rv : rank_value) {
    auto it =
        std::find_if(by_value.begin(), by_value.end(), [&](const auto& e) { return e.first == rv.second; });
    if (it == by_value.end()) {
      by_value.push_back({rv.second, {rv.first}});
    } else {
      it->second.push_back(rv.first);
    }
  }
  std::string out;
  for (size_t i = 0; i < by_value.size(); ++i) {
    const auto& [value, ranks] = by_value[i];
    std::string who = ranks.size() == 1 ? "rank " : "ranks ";
    constexpr size_t kShown = 6;
    for (size_t j = 0; j < ranks.size() && j < kShown; ++j) {
      if (j > 0) who += j + 1 == ranks.size() ? " and " : ", ";
      who += std::to_string(ranks[j]);
    }
    if (ranks.size() > kShown) who += " and " + std::to_string(ranks.size() - kShown) + " more";
    out += (i ? ", " : "") + who + (i ? "" : ranks.size() == 1 ? " passes" : " pass") + " " + value;
  }
  return out;
}

}  // namespace

// What to change so that the k-th collective agrees on every member, from what differs. Ranks
// that issue different operations or different tensors there issue their collectives in
// different orders; the same operation on the same tensor with a different dtype, count,
// reduce op or root is a wrong argument, and the fix names it.
std::string World::mismatch_fix(const Instance& inst, const std::vector<int>& ranks, bool p2p,
                                const std::vector<std::string>& fingerprints) {
  const auto& ms = inst.members;
  auto differs = [&](auto get) {
    return std::any_of(ms.begin(), ms.end(), [&](const auto& m) { return get(m) != get(ms[0]); });
  };
  auto values = [&](auto get) {
    std::vector<std::pair<int, std::string>> v;
    for (size_t i = 0; i < ms.size(); ++i) v.push_back({ranks[i], get(ms[i])});
    return who_passes(v);
  };
  if (p2p) {  // in_numel holds the bytes of each half
    return "A send and its recv must move the same number of bytes (rank " + std::to_string(ranks[0]) +
           " sends " + std::to_string(ms[0].in_numel) + ", rank " + std::to_string(ranks[1]) + " receives " +
           std::to_string(ms[1].in_numel) +
           "): pass the same size on both sides, or pair the transfers in the same order on both ranks.";
  }
  const bool kind = differs([](const auto& m) { return m.kind; });
  const bool tag = differs([](const auto& m) { return m.tag; });
  if (kind || tag) {
    return "Every rank must issue the same collectives on a group in the same order. Issue them in an order "
           "that is identical on every rank (e.g. the optimizer's parameter order, never a set's iteration "
           "order).";
  }
  std::vector<std::string> fixes;
  if (differs([](const auto& m) { return m.dtype; })) {
    fixes.push_back("make every member pass the same dtype (" +
                    values([](const auto& m) { return std::string(core::to_string(m.dtype)); }) + ")");
  }
  if (differs([](const auto& m) { return std::pair{m.in_numel, m.out_numel}; })) {
    fixes.push_back("make every member pass the same element counts (" + values([](const auto& m) {
                      return std::to_string(m.in_numel) + " in, " + std::to_string(m.out_numel) + " out";
                    }) +
                    ")");
  }
  const bool reduction =
      ms[0].kind == core::CollectiveKind::all_reduce || ms[0].kind == core::CollectiveKind::reduce_scatter;
  if (reduction && differs([](const auto& m) { return m.reduce; })) {
    fixes.push_back("make every member pass the same reduce op (" +
                    values([](const auto& m) { return std::string(core::to_string(m.reduce)); }) + ")");
  }
  if (ms[0].kind == core::CollectiveKind::broadcast && differs([](const auto& m) { return m.root; })) {
    fixes.push_back("make every member name the same root (" +
                    values([](const auto& m) { return "root " + std::to_string(m.root); }) + ")");
  }
  if (fixes.empty()) {  // the members part of the fingerprint
    std::vector<std::pair<int, std::string>> v;
    for (size_t i = 0; i < ms.size(); ++i) {
      const std::string& fp = fingerprints[i];
      v.push_back({ranks[i], fp.substr(fp.rfind(" on ") + 4)});
    }
    fixes.push_back("call it on one group with the same members on every rank (" + who_passes(v) + ")");
  }
  std::string out = "Every member passes the same operation on the same tensor, but not the same arguments: ";
  for (size_t i = 0; i < fixes.size(); ++i) out += (i ? "; " : "") + fixes[i];
  return out + ".";
}

std::string World::fingerprint(const Instance& inst, size_t i, int group) const {
  const Instance::Member& m = inst.members[i];
  if (group < 0) return m.fingerprint;  // p2p: made at comparison
  const std::string& where = groups_[static_cast<size_t>(group)].text;
  if (m.kind == core::CollectiveKind::barrier) return "barrier on " + where;
  std::string f = std::string(core::to_string(m.kind)) + " " + std::string(core::to_string(m.dtype)) + " " +
                  std::to_string(m.in_numel) + "->" + std::to_string(m.out_numel);
  if (m.kind == core::CollectiveKind::all_reduce || m.kind == core::CollectiveKind::reduce_scatter) {
    f += " " + std::string(core::to_string(m.reduce));
  }
  if (m.kind == core::CollectiveKind::reduce) f += " " + std::string(core::to_string(m.reduce));
  if (m.kind == core::CollectiveKind::broadcast || m.kind == core::CollectiveKind::reduce)
    f += " root " + std::to_string(m.root);
  return f + " on " + where;
}

// Equal exactly when fingerprint() is: every member of an instance names the same group, and the
// text is made of these fields alone (a reduce op only for reductions, a root only where it has one).
bool World::same_fingerprint(const Instance& inst, size_t a, size_t b) {
  const Instance::Member& x = inst.members[a];
  const Instance::Member& y = inst.members[b];
  if (!x.fingerprint.empty() || !y.fingerprint.empty()) return x.fingerprint == y.fingerprint;  // p2p
  if (x.kind != y.kind) return false;
  if (x.kind == core::CollectiveKind::barrier) return true;
  if (x.dtype != y.dtype || x.in_numel != y.in_numel || x.out_numel != y.out_numel) return false;
  const bool reduces = x.kind == core::CollectiveKind::all_reduce ||
                       x.kind == core::CollectiveKind::reduce_scatter ||
                       x.kind == core::CollectiveKind::reduce;
  if (reduces && x.reduce != y.reduce) return false;
  const bool rooted = x.kind == core::CollectiveKind::broadcast || x.kind == core::CollectiveKind::reduce;
  return !rooted || x.root == y.root;
}

std::string World::group_text(const std::string& group, const std::vector<int>& members) {
  std::string f = group + " [";
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
  for (size_t m = 0; m < inst.members.size(); ++m) {
    fp_differs |= !same_fingerprint(inst, m, 0);
    tag_differs |= inst.members[m].tag != inst.members[0].tag;
  }
  if (!fp_differs && !tag_differs) return;
  std::vector<std::string> fingerprints;
  for (size_t m = 0; m < inst.members.size(); ++m) fingerprints.push_back(fingerprint(inst, m, group));
  if (fp_differs && !p2p) {
    groups_[group].at(k).mismatch = true;
    mismatch_seen_ = true;
  }
  if (layout_bug) return;
  // A later divergent collective of a group that already diverged in this run is a
  // consequence of the first: it is counted and listed there.
  if (!p2p) {
    if (const auto root = cascade_roots_.find(group); root != cascade_roots_.end()) {
      add_consequence(root->second, inst, k, fp_differs, fingerprints);
      return;
    }
  }
  core::CollectiveDetail d;
  d.group = p2p ? "p2p" : groups_[group].name;
  d.index = k;
  std::string per_rank;
  std::vector<std::string> key_parts;  // sorted: a swap of A and B is one bug, whichever comes first
  for (size_t m = 0; m < inst.members.size(); ++m) {
    const OpInfo& info = op_info_[inst.members[m].op];
    d.ranks.push_back({info.rank, ranks_[info.rank]->streams[info.stream].name, fingerprints[m],
                       inst.members[m].tag, source_line(inst.members[m].op)});
    per_rank += "\n  rank " + std::to_string(info.rank) + ": " + op_text(inst.members[m].op) + "  [" +
                fingerprints[m] + "]";
    key_parts.push_back(inst.members[m].tag + "/" + fingerprints[m]);
  }
  core::Finding f;
  f.kind = fp_differs ? core::FindingKind::collective_mismatch : core::FindingKind::collective_swap;
  const std::string which = p2p ? "p2p transfer #" + std::to_string(k)
                                : "collective #" + std::to_string(k) + " of group " + q(d.group);
  if (fp_differs) {
    std::vector<int> member_ranks;
    for (const auto& m : inst.members) member_ranks.push_back(op_info_[m.op].rank);
    f.summary = which + " differs across ranks (a hang or corrupted data on real hardware)";
    f.explanation = f.summary + ":" + per_rank + "\n" + mismatch_fix(inst, member_ranks, p2p, fingerprints);
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
  const std::string key = f.key;
  const core::FindingKind kind = f.kind;
  core::add_finding(findings_, std::move(f));
  if (!p2p) {
    for (size_t i = 0; i < findings_.size(); ++i) {
      if (findings_[i].kind == kind && findings_[i].key == key) cascade_roots_.emplace(group, i);
    }
  }
}

void World::add_consequence(size_t root, const Instance& inst, int64_t k, bool fp_differs,
                            const std::vector<std::string>& fingerprints) {
  auto& d = std::get<core::CollectiveDetail>(findings_[root].detail);
  ++d.consequences;
  if (d.later.size() >= core::CollectiveDetail::kMaxListed) return;
  // What each rank issued there, ranks with the same operation together.
  std::vector<std::pair<std::string, std::vector<int>>> ops;
  for (const auto& m : inst.members) {
    const OpInfo& info = op_info_[m.op];
    std::string what = names_[info.name];
    if (what.find(m.tag) == std::string::npos) what += " (" + m.tag + ")";
    auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& e) { return e.first == what; });
    if (it == ops.end()) {
      ops.push_back({what, {info.rank}});
    } else {
      it->second.push_back(info.rank);
    }
  }
  if (ops.size() == 1) {  // one operation everywhere: the arguments differ
    ops.clear();
    for (size_t i = 0; i < inst.members.size(); ++i) {
      const OpInfo& info = op_info_[inst.members[i].op];
      const std::string what = names_[info.name] + " [" + fingerprints[i] + "]";
      auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& e) { return e.first == what; });
      if (it == ops.end()) {
        ops.push_back({what, {info.rank}});
      } else {
        it->second.push_back(info.rank);
      }
    }
  }
  core::CollectiveDetail::Later l;
  l.index = k;
  l.kind = fp_differs ? core::FindingKind::collective_mismatch : core::FindingKind::collective_swap;
  for (size_t i = 0; i < ops.size(); ++i) {
    l.what += (i ? "; " : "") + ops[i].first + " on rank" + (ops[i].second.size() > 1 ? "s " : " ");
    for (size_t j = 0; j < ops[i].second.size(); ++j)
      l.what += (j ? "," : "") + std::to_string(ops[i].second[j]);
  }
  d.later.push_back(std::move(l));
}

void World::finish_cascades() {
  for (const auto& [group, root] : cascade_roots_) {
    core::Finding& f = findings_[root];
    const auto& d = std::get<core::CollectiveDetail>(f.detail);
    if (d.consequences == 0) continue;
    constexpr size_t kInText = 4;
    std::string line = "Then " + std::to_string(d.consequences) + " later collective" +
                       (d.consequences == 1 ? " of group " + q(d.group) + " diverges"
                                            : "s of group " + q(d.group) + " diverge") +
                       " as a consequence (fix this one first):";
    for (size_t i = 0; i < d.later.size() && i < kInText; ++i)
      line += "\n  #" + std::to_string(d.later[i].index) + ": " + d.later[i].what;
    if (d.consequences > static_cast<int64_t>(kInText))
      line += "\n  ... and " + std::to_string(d.consequences - static_cast<int64_t>(kInText)) + " more";
    f.explanation += "\n" + line;
  }
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
  inst.members[0].in_numel = pair.first.bytes;
  inst.members[1].in_numel = pair.second.bytes;
  compare_instance(-1, inst, k);
}

}  // namespace shardcheck::sim
