// Findings placed in their sources: trace steps by the operation names findings quote,
// training files by the line their loader recorded (the first `mutations:` entry), captured programs by the
// Python lines the simulator put in each finding's detail.
#include "run/finding_location.hpp"

#include <algorithm>

#include "core/base/overloaded.hpp"
#include "core/runtime/runtime.hpp"
#include "core/scenario/trace_scenario.hpp"

namespace shardcheck::run {

namespace {

using reports::FindingPlace;
using reports::SourceSpot;

// An operation a finding names, on a rank, with what it is to the finding.
struct Named {
  int rank = 0;
  std::string op;  // "kernel 'next_forward'", "reduce_scatter 'grad'", "aten::mul at train.py:32"
  std::string note;
  std::string group;  // a collective's group, when known
  std::string tag;    // a collective's tag, when known
};

std::vector<Named> named_ops(const core::Finding& f) {
  std::vector<Named> out;
  std::visit(
      core::Overloaded{
          [&](const core::RaceDetail& d) {
            out.push_back({d.second.rank, d.second.op, "second access", "", ""});
            out.push_back({d.first.rank, d.first.op, "first access", "", ""});
          },
          [&](const core::CollectiveDetail& d) {
            for (const auto& r : d.ranks)
              out.push_back({r.rank, "", "rank " + std::to_string(r.rank) + "'s collective", d.group, r.tag});
          },
          [&](const core::DeadlockDetail& d) {
            for (const auto& n : d.cycle)
              out.push_back({n.rank, n.op, "rank " + std::to_string(n.rank) + " waits here", "", ""});
          },
          [&](const core::ElementDetail& d) {  // an uninitialized read names its reader
            if (!d.note.empty()) out.push_back({d.rank, d.note, "reads the never-written bytes", "", ""});
          },
          [](const auto&) {},
      },
      f.detail);
  return out;
}

// The name the simulator gives a trace step's operation (core::op_name), or "" for steps
// that findings do not name.
std::string op_text(const core::TraceStep& t) {
  using K = core::TraceStep::Kind;
  switch (t.kind) {
    case K::kernel: {
      core::KernelCall k;
      k.name = t.name;
      return core::op_name(k);
    }
    case K::collective: {
      core::CollectiveCall c;
      c.kind = t.op;
      c.tag = t.tag;
      return core::op_name(c);
    }
    case K::send:
    case K::recv: {
      core::P2PCall p;
      p.peer = t.peer;
      p.tag = t.tag;
      return core::op_name(p, t.kind == K::send);
    }
    default:
      return "";
  }
}

// The first step of the program that rank `n.rank` runs and that `n` names.
const core::TraceStep* find_step(const core::TraceScenario& t, const Named& n) {
  for (const auto& step : t.program) {
    if (!t.runs_on(step, n.rank)) continue;
    if (!n.tag.empty()) {
      if (step.kind == core::TraceStep::Kind::collective && step.group == n.group && step.tag == n.tag)
        return &step;
      continue;
    }
    const std::string text = op_text(step);
    if (!text.empty() && n.op.find(text) != std::string::npos) return &step;
  }
  return nullptr;
}

FindingPlace trace_place(const LoadedScenario& s, const core::TraceScenario& t, const core::Finding& f) {
  FindingPlace p{{s.file, 1, ""}, {}, false};
  bool placed = false;
  std::vector<Named> named = named_ops(f);
  // Without detail that names an operation, the first operation its summary names, on any rank.
  if (named.empty()) {
    for (int rank = 0; rank < t.ranks; ++rank) named.push_back({rank, f.summary, "", "", ""});
  }
  for (const Named& n : named) {
    const core::TraceStep* step = find_step(t, n);
    if (!step) continue;
    const SourceSpot spot{s.file, step->loc.line, n.note};
    if (!placed) {
      p.at = spot;
      placed = true;
    } else if (spot.line != p.at.line) {
      p.related.push_back(spot);
    }
  }
  return p;
}

// The program lines a finding's detail names, as data the simulator filled: the two accesses
// of a race (and, for a reuse, the allocation and the free), each rank's collective, each
// stuck operation, the reader of never-written bytes.
std::vector<SourceSpot> program_lines(const core::Finding& f) {
  std::vector<SourceSpot> out;
  auto add = [&](const core::SourceLine& at, std::string note) {
    if (at.known()) out.push_back({at.file, at.line, std::move(note)});
  };
  std::visit(core::Overloaded{
                 [&](const core::RaceDetail& d) {
                   add(d.second.source, "second access");
                   add(d.first.source, "first access");
                   add(d.allocated, "allocates the block's next buffer");
                   add(d.freed, "frees the block");
                 },
                 [&](const core::CollectiveDetail& d) {
                   for (const auto& r : d.ranks)
                     add(r.source, "rank " + std::to_string(r.rank) + "'s collective");
                 },
                 [&](const core::DeadlockDetail& d) {
                   for (const auto& n : d.cycle)
                     add(n.source, "rank " + std::to_string(n.rank) + " waits here");
                 },
                 [&](const core::ElementDetail& d) { add(d.source, "reads the never-written bytes"); },
                 [](const auto&) {},
             },
             f.detail);
  return out;
}

FindingPlace capture_place(const LoadedScenario& s, const core::Finding& f) {
  FindingPlace p{{s.file, 1, ""}, {}, false};
  bool placed = false;
  for (const auto& spot : program_lines(f)) {
    auto same = [&](const SourceSpot& r) { return r.file == spot.file && r.line == spot.line; };
    if (!placed) {
      p.at = spot;
      placed = true;
    } else if (!same(p.at) && std::none_of(p.related.begin(), p.related.end(), same)) {
      p.related.push_back(spot);
    }
  }
  return p;
}

bool expected(const LoadedScenario& s, core::FindingKind k) {
  if (!s.expect.given) return false;
  const auto& a = s.expect.findings;
  const auto& b = s.expect.allow;
  return std::find(a.begin(), a.end(), k) != a.end() || std::find(b.begin(), b.end(), k) != b.end();
}

}  // namespace

std::vector<FindingPlace> locate_findings(const LoadedScenario& s,
                                          const std::vector<core::Finding>& findings) {
  std::vector<FindingPlace> out;
  const int training = s.training() ? s.training()->scenario.place_line : 0;
  const core::TraceScenario* trace = s.trace();
  for (const auto& f : findings) {
    FindingPlace p{{s.file, std::max(training, 1), ""}, {}, false};
    if (trace) p = trace_place(s, *trace, f);
    if (s.capture()) p = capture_place(s, f);
    p.expected = expected(s, f.kind);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace shardcheck::run
