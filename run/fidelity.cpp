#include "run/fidelity.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

#include "sim/explore.hpp"

namespace shardcheck::run {

namespace {

using sim::IssuedCollective;

// What a collective is on the wire: two sides' collectives align only when all of it agrees.
auto wire(const IssuedCollective& c) { return std::tie(c.kind, c.members, c.dtype, c.in_numel, c.out_numel); }

std::string members_text(const std::vector<int>& m) {
  std::string s = "[";
  for (size_t i = 0; i < m.size(); ++i) s += (i ? "," : "") + std::to_string(m[i]);
  return s + "]";
}

// Streams matched one to one, each side's in the order they first carry an aligned pair.
struct StreamMatch {
  std::map<std::string, std::string> to_modeled, to_captured;
  bool agree(const std::string& captured, const std::string& modeled) {
    auto a = to_modeled.find(captured);
    auto b = to_captured.find(modeled);
    if (a == to_modeled.end() && b == to_captured.end()) {
      to_modeled.emplace(captured, modeled);
      to_captured.emplace(modeled, captured);
      return true;
    }
    return a != to_modeled.end() && a->second == modeled;
  }
};

std::string field_differences(const IssuedCollective& c, const IssuedCollective& m, StreamMatch& streams) {
  std::string what;
  auto add = [&](const std::string& s) { what += (what.empty() ? "" : "; ") + s; };
  if (c.reduce != m.reduce) {
    add("reduce op " + std::string(core::to_string(c.reduce)) + " vs " +
        std::string(core::to_string(m.reduce)));
  }
  if (c.kind == core::CollectiveKind::broadcast && c.root != m.root) {
    add("root " + std::to_string(c.root) + " vs " + std::to_string(m.root));
  }
  if (!streams.agree(c.stream, m.stream)) {
    const auto paired = streams.to_modeled.find(c.stream);
    add("stream '" + c.stream + "' vs '" + m.stream + "' (" +
        (paired != streams.to_modeled.end()
             ? "'" + c.stream + "' carried the model's '" + paired->second + "' before"
             : "'" + m.stream + "' carried the capture's '" + streams.to_captured.at(m.stream) + "' before") +
        ")");
  }
  return what;
}

RankFidelity compare_rank(int rank, const CollectiveSequence& c, const CollectiveSequence& m) {
  RankFidelity r;
  r.rank = rank;
  r.captured = static_cast<int64_t>(c.size());
  r.modeled = static_cast<int64_t>(m.size());
  const size_t n = c.size(), k = m.size();
  // lcs[i][j]: the longest common subsequence of c[i..] and m[j..].
  std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(k + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = k; j-- > 0;) {
      lcs[i][j] = wire(c[i]) == wire(m[j]) ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  StreamMatch streams;
  size_t i = 0, j = 0;
  using K = SequenceDifference::Kind;
  while (i < n || j < k) {
    if (i < n && j < k && wire(c[i]) == wire(m[j]) && lcs[i][j] == lcs[i + 1][j + 1] + 1) {
      if (std::string what = field_differences(c[i], m[j], streams); !what.empty()) {
        r.differences.push_back({K::differs, static_cast<int64_t>(i), static_cast<int64_t>(j), what});
      }
      ++i, ++j;
    } else if (j < k && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) {
      r.differences.push_back({K::modeled_only, -1, static_cast<int64_t>(j), "", static_cast<int64_t>(i), 0});
      ++j;
    } else {
      r.differences.push_back(
          {K::captured_only, static_cast<int64_t>(i), -1, "", 0, static_cast<int64_t>(j)});
      ++i;
    }
  }
  return r;
}

// A name with its numbers left out, so that the same collective of every unit, step and
// bucket counts as one line of the summary: "block.3:grad" -> "block.N:grad".
std::string without_numbers(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      out += 'N';
    } else {
      out += s[i++];
    }
  }
  return out;
}

// A captured collective is named by its Python line, a modeled one by its tag without numbers.
std::string summary_key(const IssuedCollective& c) {
  const std::string kind(core::to_string(c.kind));
  if (c.source.known()) return kind + " at " + c.source.file + ":" + std::to_string(c.source.line);
  return kind + " '" + without_numbers(c.tag) + "'";
}

}  // namespace

core::Expected<std::vector<CollectiveSequence>> collective_sequences(const LoadedScenario& s) {
  auto options = options_for(s, {});
  if (!options) return options.error();
  sim::World world(*options);
  sim::CollectiveLog log;
  world.add_detector(log.detector());
  const sim::RunResult r = sim::run_once(world, [&s](sim::World& w) {
    sim::RunSetup setup = s.factory(w);
    setup.after = {};  // its oracles judge values: not needed here
    return setup;
  });
  if (!r.error.empty()) return core::fail(s.file, ": the run stopped: ", r.error);
  if (r.cancelled) return core::fail(s.file, ": the run was interrupted");
  return log.per_rank(world.ranks());
}

bool FidelityResult::equal() const {
  if (!problem.empty()) return false;
  return std::all_of(ranks.begin(), ranks.end(), [](const RankFidelity& r) { return r.differences.empty(); });
}

FidelityResult compare_sequences(const std::vector<CollectiveSequence>& captured,
                                 const std::vector<CollectiveSequence>& modeled) {
  FidelityResult r;
  if (captured.size() != modeled.size()) {
    r.problem = "the capture has " + std::to_string(captured.size()) + " ranks and the scenario " +
                std::to_string(modeled.size());
    return r;
  }
  for (size_t rank = 0; rank < captured.size(); ++rank) {
    r.ranks.push_back(compare_rank(static_cast<int>(rank), captured[rank], modeled[rank]));
  }
  return r;
}

std::string describe(const IssuedCollective& c) {
  std::string s = std::string(core::to_string(c.kind)) + " " + members_text(c.members) + " " +
                  std::string(core::to_string(c.dtype)) + " " + std::to_string(c.in_numel) + "->" +
                  std::to_string(c.out_numel);
  if (c.kind != core::CollectiveKind::all_gather && c.kind != core::CollectiveKind::barrier &&
      c.kind != core::CollectiveKind::broadcast && c.kind != core::CollectiveKind::all_to_all) {
    s += " " + std::string(core::to_string(c.reduce));
  }
  if (c.kind == core::CollectiveKind::broadcast) s += " root " + std::to_string(c.root);
  s += " on '" + c.stream + "' ('" + c.tag + "')";
  if (c.source.known()) s += " at " + c.source.file + ":" + std::to_string(c.source.line);
  return s;
}

std::vector<std::string> summarize(const FidelityResult& r, const std::vector<CollectiveSequence>& captured,
                                   const std::vector<CollectiveSequence>& modeled) {
  // (how it differs, what) -> count over every rank, in first-seen order.
  std::vector<std::pair<std::string, int64_t>> lines;
  std::map<std::string, size_t> index;
  auto count = [&](const std::string& line) {
    auto [it, fresh] = index.emplace(line, lines.size());
    if (fresh) lines.push_back({line, 0});
    ++lines[it->second].second;
  };
  for (const RankFidelity& rf : r.ranks) {
    const auto& c = captured[static_cast<size_t>(rf.rank)];
    const auto& m = modeled[static_cast<size_t>(rf.rank)];
    for (const SequenceDifference& d : rf.differences) {
      using K = SequenceDifference::Kind;
      if (d.kind == K::captured_only)
        count("captured only: " + summary_key(c[static_cast<size_t>(d.captured)]));
      if (d.kind == K::modeled_only) count("modeled only: " + summary_key(m[static_cast<size_t>(d.modeled)]));
      if (d.kind == K::differs) {
        count("aligned, differing in " + without_numbers(d.what) + ": " +
              summary_key(c[static_cast<size_t>(d.captured)]) + " / " +
              summary_key(m[static_cast<size_t>(d.modeled)]));
      }
    }
  }
  std::vector<std::string> out;
  for (const auto& [line, n] : lines) out.push_back(std::to_string(n) + " x " + line);
  return out;
}

}  // namespace shardcheck::run
