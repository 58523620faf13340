// Finding kind names and de-duplication.
#include "core/check/findings.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

#include "core/base/rng.hpp"
#include "core/base/text.hpp"

namespace shardcheck::core {

// In FindingKind's order: info(k) indexes it.
const FindingKindInfo kFindingKindTable[kFindingKinds] = {
    {FindingKind::stream_race, "stream_race", "race", FoundBy::detector, true, true, false, false,
     "Two accesses to the same device bytes, at least one a write, with no happens-before between them (also "
     "across a memory block's lifetimes, when the caching allocator hands a freed block on)."},
    {FindingKind::collective_mismatch, "collective_mismatch", "collective", FoundBy::detector, false, false,
     false, false,
     "The k-th collective of a process group differs across ranks (op, dtype, count, reduce op, root): a "
     "hang "
     "or corrupted memory on real hardware."},
    {FindingKind::collective_swap, "collective_swap", "collective", FoundBy::detector, false, false, false,
     false,
     "The ranks' collectives match in shape but not in meaning: the ranks silently exchange the wrong "
     "tensors."},
    {FindingKind::deadlock, "deadlock", "deadlock", FoundBy::detector, false, true, false, false,
     "Nothing can run but work remains: a cycle of waits through ranks and streams."},
    {FindingKind::grad_norm_miscount, "grad_norm_miscount", "training judge", FoundBy::training, false, false,
     true, true,
     "The gradient norm counts some logical elements other than once (e.g. a tied embedding on two pipeline "
     "stages)."},
    {FindingKind::layout_mismatch, "layout_mismatch", "layout", FoundBy::detector, false, false, false, false,
     "A reduction across ranks combines elements of different logical positions."},
    {FindingKind::uninitialized_read, "uninitialized_read", "uninit", FoundBy::detector, true, true, false,
     false, "Never-written bytes (a fresh block, layout gaps or padding) are read into a result."},
    {FindingKind::numerics_divergence, "numerics_divergence", "training judge", FoundBy::reference, true,
     false, true, false, "Weights differ from the single-rank reference (bitwise in exact mode)."},
    {FindingKind::replica_divergence, "replica_divergence", "training judge", FoundBy::training, true, false,
     true, true, "Replicated buffers differ across the ranks that should hold copies."},
    {FindingKind::double_reduction, "double_reduction", "values", FoundBy::values, true, false, false, true,
     "A sum over a group of a tensor already the same on every member (a gradient reduced twice): the "
     "result is the group size times the value."},
    {FindingKind::missing_reduction, "missing_reduction", "values", FoundBy::values, true, false, false, true,
     "An optimizer step consumes a gradient that no reduction over the ranks replicating its parameter "
     "made (a partial sum): the replicas drift apart."},
    {FindingKind::divisor_mismatch, "divisor_mismatch", "values", FoundBy::values, true, false, false, true,
     "An average divides a sum over a group by another group's size (the expert-parallel divisor): the "
     "gradient is scaled by the ratio of the two."},
};

const FindingKindInfo& info(FindingKind k) { return kFindingKindTable[static_cast<int>(k)]; }

std::string_view to_string(FindingKind k) { return info(k).name; }

std::optional<FindingKind> parse_finding_kind(std::string_view s) {
  for (const auto& row : kFindingKindTable) {
    if (row.name == s) return row.kind;
  }
  return std::nullopt;
}

std::string finding_kind_names() {
  std::string_view names[kFindingKinds];
  for (int i = 0; i < kFindingKinds; ++i) names[i] = kFindingKindTable[i].name;
  return one_of(names);
}

namespace {

// Sorted, distinct `into` joined with sorted, distinct `from`. A finding counted again brings
// an instance or two: those are inserted in place, so counting it n times stays near linear.
template <class T>
void join(std::vector<T>& into, const std::vector<T>& from) {
  if (from.size() <= 4) {
    for (const T& x : from) {
      const auto at = std::lower_bound(into.begin(), into.end(), x);
      if (at == into.end() || *at != x) into.insert(at, x);
    }
    return;
  }
  std::vector<T> out;
  out.reserve(into.size() + from.size());
  std::set_union(into.begin(), into.end(), from.begin(), from.end(), std::back_inserter(out));
  into = std::move(out);
}

void join(Spread& into, const Spread& from) {
  join(into.instances, from.instances);
  join(into.ranks, from.ranks);
  join(into.streams, from.streams);
  join(into.symptoms, from.symptoms);
}

std::string source_text(const SourceLine& s) { return s.file + ":" + std::to_string(s.line); }

void count_again(Finding& into, const Finding& f) {
  into.occurrences += f.occurrences;
  join(into.spread, f.spread);
}

std::string index_key(const Finding& f) { return std::string(to_string(f.kind)) + '\n' + f.key; }

}  // namespace

void join_spread(Spread& into, const Spread& from) { join(into, from); }

void add_finding(std::vector<Finding>& list, Finding f) {
  for (Finding& g : list) {
    if (g.kind == f.kind && g.key == f.key) return count_again(g, f);
  }
  list.push_back(std::move(f));
}

void FindingList::add(Finding f) {
  const auto [at, fresh] = index_.try_emplace(index_key(f), items_.size());
  if (!fresh) return count_again(items_[at->second], f);
  items_.push_back(std::move(f));
}

void add_findings(std::vector<Finding>& list, std::vector<Finding> more) {
  if (more.empty()) return;
  FindingList all;
  for (Finding& f : list) all.add(std::move(f));  // keys are distinct in `list`: nothing merges here
  for (Finding& f : more) all.add(std::move(f));
  list = std::move(all).take();
}

Spread spread_of(const std::string& instance_key, int rank, std::vector<std::string> streams) {
  Spread s;
  s.instances = {fnv1a(instance_key)};
  s.ranks = {rank};
  std::sort(streams.begin(), streams.end());
  streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
  s.streams = std::move(streams);
  return s;
}

namespace {

// The races other findings can fold under, indexed by what each fold matches on, the first race
// of the list for each: one pass, where a search of the list per finding was quadratic.
struct FoldIndex {
  // A race on one tensor that writes it first, by the line and tensor of its read: the race an
  // uninitialized read at that line of that tensor is a symptom of.
  std::map<std::tuple<std::string, int, std::string>, size_t> read_races;
  // A reuse race, by the operation, line and buffer of its first access and the line that freed
  // the block: the race a stream-ordered free of the same block hands over.
  std::map<std::tuple<std::string, std::string, int, std::string, std::string, int>, size_t> reuse_races;

  explicit FoldIndex(const std::vector<Finding>& list) {
    for (size_t i = 0; i < list.size(); ++i) {
      const auto* d = std::get_if<RaceDetail>(&list[i].detail);
      if (list[i].kind != FindingKind::stream_race || list[i].spread.empty() || !d) continue;
      const AccessSite &w = d->first, &r = d->second;
      if (!d->reuse && w.write && w.buffer == r.buffer)
        read_races.try_emplace({r.source.file, r.source.line, r.buffer}, i);
      if (d->reuse)
        reuse_races.try_emplace({w.op, w.source.file, w.source.line, w.buffer, d->freed.file, d->freed.line},
                                i);
    }
  }
};

}  // namespace

void fold_symptoms(std::vector<Finding>& list) {
  const FoldIndex index(list);
  std::vector<bool> drop(list.size(), false);
  for (size_t i = 0; i < list.size(); ++i) {
    const auto* u = list[i].kind == FindingKind::uninitialized_read
                        ? std::get_if<ElementDetail>(&list[i].detail)
                        : nullptr;
    const auto* f =
        list[i].kind == FindingKind::stream_race ? std::get_if<RaceDetail>(&list[i].detail) : nullptr;
    if (f && (f->reuse || f->second.op.rfind("free '", 0) != 0 || !f->second.source.known())) f = nullptr;
    if (u && u->source.known()) {
      // An uninitialized read explained by a race: in the schedules where the read ran first.
      const auto at = index.read_races.find({u->source.file, u->source.line, u->tensor});
      if (at == index.read_races.end()) continue;
      Finding& race = list[at->second];
      join(race.spread.symptoms, {std::string(to_string(list[i].kind)) + ": " + list[i].summary +
                                  " (in the schedules where the read ran before " +
                                  std::get<RaceDetail>(race.detail).first.op + ")"});
      drop[i] = true;
    } else if (f) {
      // A stream-ordered free (cudaFreeAsync) racing with a stream that still uses the tensor,
      // and the reuse race of the block it handed over: one root, reported as the reuse.
      const AccessSite& w = f->first;
      const auto at = index.reuse_races.find(
          {w.op, w.source.file, w.source.line, w.buffer, f->second.source.file, f->second.source.line});
      if (at == index.reuse_races.end()) continue;
      join(list[at->second].spread.symptoms, {"stream_race: " + list[i].summary + " (the free itself)"});
      drop[i] = true;
    }
  }
  size_t k = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (drop[i]) continue;
    if (k != i) list[k] = std::move(list[i]);
    ++k;
  }
  list.resize(k);
}

std::string spread_text(const Finding& f) {
  const Spread& s = f.spread;
  if (s.empty()) return "";
  std::string out;
  const auto* race = std::get_if<RaceDetail>(&f.detail);
  std::string where = "this code site";
  if (race && race->first.source.known() && race->second.source.known())
    where = source_text(race->first.source) + " and " + source_text(race->second.source);
  if (const auto* e = std::get_if<ElementDetail>(&f.detail); e && e->source.known())
    where = source_text(e->source);
  if (const auto* n = std::get_if<NormDetail>(&f.detail); n && n->source.known())
    where = source_text(n->source);
  out += "  one finding for " + where + ": " + std::to_string(s.instances.size()) +
         (s.instances.size() == 1 ? " instance" : " instances") + " (tensors, streams, accesses) on rank";
  if (s.ranks.size() > 1) out += "s";
  for (size_t i = 0; i < s.ranks.size() && i < 8; ++i) out += (i ? ", " : " ") + std::to_string(s.ranks[i]);
  if (s.ranks.size() > 8) out += " and " + std::to_string(s.ranks.size() - 8) + " more";
  if (!s.streams.empty()) {
    // Streams made at one line ("stream from f.py:5", "... #2", ...) are one entry with a count.
    std::vector<std::pair<std::string, int>> made;
    for (const std::string& name : s.streams) {
      std::string base = name;
      const size_t hash = name.rfind(" #");
      if (hash != std::string::npos && hash + 2 < name.size() &&
          name.find_first_not_of("0123456789", hash + 2) == std::string::npos)
        base = name.substr(0, hash);
      auto it = std::find_if(made.begin(), made.end(), [&](const auto& m) { return m.first == base; });
      if (it == made.end()) {
        made.emplace_back(base, 1);
      } else {
        ++it->second;
      }
    }
    out += s.streams.size() == 1 ? ", stream" : ", streams";
    for (size_t i = 0; i < made.size() && i < 4; ++i) {
      out += (i ? ", '" : " '") + made[i].first + "'";
      if (made[i].second > 1) out += " (" + std::to_string(made[i].second) + " of them)";
    }
    if (made.size() > 4) out += " and " + std::to_string(made.size() - 4) + " more";
  }
  out += "\n";
  for (const std::string& symptom : s.symptoms) out += "  also seen as " + symptom + "\n";
  return out;
}

}  // namespace shardcheck::core
