// Reports collective_mismatch and collective_swap. Each call is fingerprinted at issue (kind,
// dtype, sizes, reduce op or root, group); when every member of the k-th call on a group (or
// both halves of the k-th p2p transfer) has issued, fingerprints and tensor tags are compared.
#include <algorithm>

#include <map>

#include "sim/detector.hpp"

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

std::string mismatch_fix(const Instance& inst, const std::vector<int>& ranks, bool p2p,
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

std::string fingerprint(const WorldView& w, const Instance& inst, size_t i, int group) {
  const Instance::Member& m = inst.members[i];
  if (group < 0) return m.fingerprint;  // p2p: made at comparison
  const std::string& where = w.group(group).text;
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
bool same_fingerprint(const Instance& inst, size_t a, size_t b) {
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

// Both members say where their tensors were made, and not the same place: different tensors.
bool origins_differ(const Instance::Member& x, const Instance::Member& y) {
  return core::different_tensors(x.origin, y.origin);
}

// How a swap names a member's tensor: its tag, and where the tensor was made when that is known.
std::string tensor_text(const Instance::Member& m) {
  const std::string origin = core::to_string(m.origin);
  return origin.empty() ? m.tag : m.tag + " of " + origin;
}

class CollectiveDetector final : public Detector {
 public:
  unsigned hooks() const override { return on_collective | on_p2p | on_end; }

  void collective(const WorldView& w, CollectiveEvent& e, Findings& out) override {
    e.diverged = compare(w, e.group, e.instance, e.k, e.explained, out);
  }

  void p2p(const WorldView& w, const P2PEvent& e, Findings& out) override {
    const auto& pair = e.channel.at(e.k);
    Instance inst;  // the collective comparison with two members, sender first
    inst.members.resize(2);
    const auto member = [&](const Channel::Half& h) {
      Instance::Member m;
      m.issued = true;
      m.stream = h.stream;
      m.position = h.position;
      m.fingerprint =
          "p2p " + std::to_string(h.bytes) + " bytes " + std::to_string(e.from) + "->" + std::to_string(e.to);
      m.tag = h.tag;
      m.op = h.op;
      m.in_numel = h.bytes;
      return m;
    };
    inst.members[0] = member(pair.first);
    inst.members[1] = member(pair.second);
    compare(w, -1, inst, e.k, /*explained*/ false, out);
  }

  // Each first divergent collective's explanation names its consequences.
  void end(const WorldView&, const RunEnd&, Findings& out) override {
    for (const auto& [group, root] : cascade_roots_) {
      core::Finding& f = out[root];
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

 private:
  // Compares the members' calls (group -1: a p2p pair); returns whether their fingerprints differ
  // (a collective that never runs). A call already explained by another finding adds none.
  bool compare(const WorldView& w, int group, const Instance& inst, int64_t k, bool explained,
               Findings& out) {
    const bool p2p = group < 0;
    bool fp_differs = false, tag_differs = false;
    for (size_t m = 0; m < inst.members.size(); ++m) {
      fp_differs |= !same_fingerprint(inst, m, 0);
      tag_differs |=
          inst.members[m].tag != inst.members[0].tag || origins_differ(inst.members[m], inst.members[0]);
    }
    if (!fp_differs && !tag_differs) return false;
    std::vector<std::string> fingerprints;
    for (size_t m = 0; m < inst.members.size(); ++m) fingerprints.push_back(fingerprint(w, inst, m, group));
    const bool diverged = fp_differs && !p2p;
    if (explained) return diverged;
    // A later divergent collective of a group that already diverged in this run is a
    // consequence of the first: it is counted and listed there.
    if (!p2p) {
      if (const auto root = cascade_roots_.find(group); root != cascade_roots_.end()) {
        add_consequence(w, out[root->second], inst, k, fp_differs, fingerprints);
        return diverged;
      }
    }
    core::Finding f = finding(w, group, inst, k, fp_differs, fingerprints);
    const std::string key = f.key;
    const core::FindingKind kind = f.kind;
    core::add_finding(out, std::move(f));
    if (!p2p) {
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i].kind == kind && out[i].key == key) cascade_roots_.emplace(group, i);
      }
    }
    return diverged;
  }

  static core::Finding finding(const WorldView& w, int group, const Instance& inst, int64_t k,
                               bool fp_differs, const std::vector<std::string>& fingerprints) {
    const bool p2p = group < 0;
    core::CollectiveDetail d;
    d.group = p2p ? "p2p" : w.group(group).name;
    d.index = k;
    std::string per_rank;
    std::vector<std::string> key_parts;  // sorted: a swap of A and B is one bug, whichever comes first
    for (size_t m = 0; m < inst.members.size(); ++m) {
      const OpInfo& info = w.op(inst.members[m].op);
      const std::string origin = core::to_string(inst.members[m].origin);
      d.ranks.push_back({info.rank, w.stream(info.rank, info.stream).name, fingerprints[m],
                         inst.members[m].tag, w.source_line(inst.members[m].op), origin});
      per_rank += "\n  rank " + std::to_string(info.rank) + ": " + w.op_text(inst.members[m].op) +
                  (origin.empty() ? "" : " on " + origin) + "  [" + fingerprints[m] + "]";
      key_parts.push_back(inst.members[m].tag + "/" + origin + "/" + fingerprints[m]);
    }
    core::Finding f;
    f.kind = fp_differs ? core::FindingKind::collective_mismatch : core::FindingKind::collective_swap;
    const std::string which = p2p ? "p2p transfer #" + std::to_string(k)
                                  : "collective #" + std::to_string(k) + " of group " + q(d.group);
    if (fp_differs) {
      std::vector<int> member_ranks;
      for (const auto& m : inst.members) member_ranks.push_back(w.op(m.op).rank);
      f.summary = which + " differs across ranks (a hang or corrupted data on real hardware)";
      f.explanation = f.summary + ":" + per_rank + "\n" + mismatch_fix(inst, member_ranks, p2p, fingerprints);
    } else {
      // The first member whose tensor differs from the first member's.
      size_t other = 1 % inst.members.size();
      for (size_t m = 1; m < inst.members.size(); ++m) {
        const Instance::Member& a = inst.members[0];
        const Instance::Member& b = inst.members[m];
        if (a.tag != b.tag || origins_differ(a, b)) {
          other = m;
          break;
        }
      }
      f.summary = which + " matches in shape but not in meaning: the ranks exchange different tensors (" +
                  tensor_text(inst.members[0]) + " vs " + tensor_text(inst.members[other]) + ")";
      f.explanation =
          f.summary + ":" + per_rank +
          "\nThe sizes agree, so nothing hangs: values are silently combined across different tensors. "
          "Issue the collectives in one order on every rank.";
    }
    if (w.sources_seen()) {
      f.explanation +=
          "\nIn PyTorch: every rank must call the same torch.distributed collectives on a process group in "
          "the same order, with tensors of the same dtype and number of elements (and the same op and root).";
    }
    std::sort(key_parts.begin(), key_parts.end());
    key_parts.erase(std::unique(key_parts.begin(), key_parts.end()), key_parts.end());
    f.key = std::string(fp_differs ? "mismatch|" : "swap|") + d.group;
    for (const auto& part : key_parts) f.key += "|" + part;
    f.detail = std::move(d);
    f.seed = w.options().seed;
    return f;
  }

  // A later divergent collective of a group whose first divergent one is `root`.
  static void add_consequence(const WorldView& w, core::Finding& root, const Instance& inst, int64_t k,
                              bool fp_differs, const std::vector<std::string>& fingerprints) {
    auto& d = std::get<core::CollectiveDetail>(root.detail);
    ++d.consequences;
    if (d.later.size() >= core::CollectiveDetail::kMaxListed) return;
    // What each rank issued there, ranks with the same operation together; with one operation
    // everywhere, the arguments differ, and the fingerprints tell them apart.
    const auto grouped = [&](bool with_fingerprint) {
      std::vector<std::pair<std::string, std::vector<int>>> ops;
      for (size_t i = 0; i < inst.members.size(); ++i) {
        const Instance::Member& m = inst.members[i];
        const OpInfo& info = w.op(m.op);
        std::string what = w.name(info.name);
        if (with_fingerprint) {
          what += " [" + fingerprints[i] + "]";
        } else if (what.find(m.tag) == std::string::npos) {
          what += " (" + m.tag + ")";
        }
        if (const std::string origin = core::to_string(m.origin); !origin.empty()) what += " on " + origin;
        auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& e) { return e.first == what; });
        if (it == ops.end()) {
          ops.push_back({what, {info.rank}});
        } else {
          it->second.push_back(info.rank);
        }
      }
      return ops;
    };
    auto ops = grouped(false);
    if (ops.size() == 1) ops = grouped(true);
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

  std::map<int, size_t> cascade_roots_;  // group -> its first divergent collective in the findings
};

}  // namespace

std::unique_ptr<Detector> make_collective_detector() { return std::make_unique<CollectiveDetector>(); }

}  // namespace shardcheck::sim
