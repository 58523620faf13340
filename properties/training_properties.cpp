// The training properties: one simulated run (or two) of a generated case, judged by what the
// property states — bitwise weights against the reference or DistOpt, collective sequences
// per group, the detectors' and oracles' findings, live bytes at rest, reported norms, and
// reproducibility. Any internal error of a run is an error verdict, never a failure.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/model/model.hpp"
#include "properties/checks.hpp"
#include "properties/harness.hpp"
#include "properties/memory.hpp"

namespace shardcheck::properties {

namespace {

using Weights = std::vector<std::vector<std::vector<float>>>;  // per step, logical, element

std::string findings_text(const std::vector<core::Finding>& fs) {
  std::string s;
  for (size_t i = 0; i < fs.size() && i < 3; ++i)
    s += std::string(i ? "; " : "") + "[" + std::string(core::to_string(fs[i].kind)) + "] " + fs[i].summary;
  if (fs.size() > 3) s += "; and " + std::to_string(fs.size() - 3) + " more";
  return s;
}

std::string stopped(const TrainingCase& c, const TrainingOutcome& o) {
  return "the run stopped after " + std::to_string(o.steps_completed) + " of " +
         std::to_string(c.config.steps) + " steps" +
         (o.findings.empty() ? "" : " (" + findings_text(o.findings) + ")");
}

std::string element_name(const TrainingCase& c, int logical, int64_t e) {
  const core::ModelLayout m = core::ModelLayout::create(c.config.model, c.pp, c.vpp).value();
  const core::Shape& s = m.logical_shape(logical);
  if (s.size() == 2)
    return m.logical_name(logical) + "[" + std::to_string(e / s[1]) + ", " + std::to_string(e % s[1]) + "]";
  return m.logical_name(logical) + "[" + std::to_string(e) + "]";
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// The first (step, element) whose bits differ between two runs' weights, described; "" when
// every step present in both is bitwise equal.
std::string first_difference(const TrainingCase& c, const Weights& ours, const Weights& theirs,
                             const char* who) {
  for (size_t step = 0; step < std::min(ours.size(), theirs.size()); ++step) {
    if (ours[step].empty())
      return "after step " + std::to_string(step) + " the ranks' main weights do not cover every element";
    for (size_t p = 0; p < ours[step].size(); ++p) {
      for (size_t e = 0; e < ours[step][p].size(); ++e) {
        if (std::memcmp(&ours[step][p][e], &theirs[step][p][e], 4) == 0) continue;
        return "after step " + std::to_string(step) + ", " +
               element_name(c, static_cast<int>(p), static_cast<int64_t>(e)) + " is " +
               num(ours[step][p][e]) + ", " + who + " has " + num(theirs[step][p][e]);
      }
    }
  }
  return "";
}

Verdict matches_reference(const TrainingCase& c) {
  const core::ReferenceResult ref = reference_for(c);
  const TrainingOutcome o = run_training_case(c, {&ref, true});
  if (!o.error.empty()) return Verdict::error(o.error);
  Weights want;
  for (const auto& s : ref.steps) want.push_back(s.main);
  if (std::string d = first_difference(c, o.weights, want, "the reference"); !d.empty())
    return Verdict::fail(d);
  if (!o.completed) return Verdict::fail(stopped(c, o));
  return Verdict::pass();
}

Verdict matches_distopt(const TrainingCase& c) {
  const TrainingOutcome o = run_training_case(c, {nullptr, false});
  if (!o.error.empty()) return Verdict::error(o.error);
  const TrainingOutcome base = run_training_case(distopt_twin(c), {nullptr, false});
  if (!base.error.empty()) return Verdict::error("the DistOpt baseline: " + base.error);
  if (!base.completed) return Verdict::fail("the DistOpt baseline: " + stopped(c, base));
  if (std::string d = first_difference(c, o.weights, base.weights, "DistOpt"); !d.empty())
    return Verdict::fail(d);
  if (!o.completed) return Verdict::fail(stopped(c, o));
  return Verdict::pass();
}

Verdict collective_fingerprints(const TrainingCase& c) {
  const TrainingOutcome o = run_training_case(c, {nullptr, false});
  if (!o.error.empty()) return Verdict::error(o.error);
  for (const auto& [group, members] : o.collectives) {
    const auto& [first_rank, base] = *members.begin();
    for (const auto& [rank, seq] : members) {
      // A run that stopped (a hang elsewhere) leaves ranks at different points: only the
      // collectives both issued are evidence then.
      const size_t n = o.completed ? std::max(base.size(), seq.size()) : std::min(base.size(), seq.size());
      for (size_t k = 0; k < n; ++k) {
        const std::string a = k < base.size() ? base[k] : "nothing", b = k < seq.size() ? seq[k] : "nothing";
        if (a == b) continue;
        return Verdict::fail("group " + group + ", collective #" + std::to_string(k) + ": rank " +
                             std::to_string(first_rank) + " issued " + a + ", rank " + std::to_string(rank) +
                             " issued " + b);
      }
    }
  }
  return Verdict::pass();
}

Verdict no_findings(const TrainingCase& c) {
  const core::ReferenceResult ref = reference_for(c);
  const TrainingOutcome o = run_training_case(c, {&ref, true});
  if (!o.error.empty()) return Verdict::error(o.error);
  if (!o.findings.empty()) return Verdict::fail("found " + findings_text(o.findings));
  if (!o.completed) return Verdict::fail(stopped(c, o));
  return Verdict::pass();
}

Verdict resting_memory(const TrainingCase& c) {
  const TrainingOutcome o = run_training_case(c, {nullptr, false});
  if (!o.error.empty()) return Verdict::error(o.error);
  for (int rank = 0; rank < c.world_size(); ++rank) {
    const MemoryPrediction p = resting_bytes(c, rank);
    if (p.logical_bytes > p.bytes) return Verdict::error("the formula with padding is below the one without");
    for (size_t step = 0; step < o.resting_bytes[rank].size(); ++step) {
      if (o.resting_bytes[rank][step] == p.bytes) continue;
      std::string terms;
      for (const auto& t : p.terms) terms += "\n    " + t;
      return Verdict::fail("rank " + std::to_string(rank) + " holds " +
                           std::to_string(o.resting_bytes[rank][step]) + " bytes at the end of step " +
                           std::to_string(step) + "; the formula gives " + std::to_string(p.bytes) + " (" +
                           std::to_string(p.bytes - p.logical_bytes) + " of them layout padding):" + terms);
    }
  }
  // Every step end reached matched; a run that stopped says nothing about the rest.
  if (!o.completed) return Verdict::discard(stopped(c, o));
  return Verdict::pass();
}

Verdict grad_norm(const TrainingCase& c) {
  const TrainingOutcome o = run_training_case(c, {nullptr, false});
  if (!o.error.empty()) return Verdict::error(o.error);
  for (int step = 0; step < o.steps_completed; ++step) {
    double sumsq = 0;
    for (size_t p = 0; p < o.grads[step].size(); ++p) {
      for (size_t e = 0; e < o.grads[step][p].size(); ++e) {
        if (!o.grad_seen[step][p][e])
          return Verdict::fail("after step " + std::to_string(step) + " no rank holds the gradient of " +
                               element_name(c, static_cast<int>(p), static_cast<int64_t>(e)));
        sumsq += static_cast<double>(o.grads[step][p][e]) * o.grads[step][p][e];
      }
    }
    const double want = std::sqrt(sumsq);
    for (int rank = 0; rank < c.world_size(); ++rank) {
      const double got = o.norms[rank][step];
      // fp64 sums in another order: equal to ~1e-15; a miscounted element is far off. A NaN in
      // the gradients makes both NaN: the norm was taken from them, and the NaN is the other
      // properties' to report.
      if (std::fabs(got - want) <= 1e-9 * std::max(want, 1e-30) || (std::isnan(got) && std::isnan(want)))
        continue;
      return Verdict::fail("step " + std::to_string(step) + ": rank " + std::to_string(rank) +
                           " reported the gradient norm " + num(got) + ", the logical gradient's norm is " +
                           num(want));
    }
  }
  if (!o.completed) return Verdict::discard(stopped(c, o));  // the steps that ended were right
  return Verdict::pass();
}

std::string keys(const std::vector<core::Finding>& fs) {
  std::string s;
  for (const auto& f : fs)
    s += std::string(core::to_string(f.kind)) + "|" + f.key + "|" + std::to_string(f.occurrences) + "\n";
  return s;
}

bool same_bits(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(double)) != 0)
      return false;
  }
  return true;
}

Verdict same_seed_same_trace(const TrainingCase& c) {
  const core::ReferenceResult ref = reference_for(c);
  const TrainingOutcome a = run_training_case(c, {&ref, true});
  const TrainingOutcome b = run_training_case(c, {&ref, true});
  if (!a.error.empty()) return Verdict::error(a.error);
  if (!b.error.empty()) return Verdict::error(b.error);
  if (a.trace_digest != b.trace_digest)
    return Verdict::fail("trace digests differ: " + std::to_string(a.trace_digest) + " vs " +
                         std::to_string(b.trace_digest));
  if (keys(a.findings) != keys(b.findings))
    return Verdict::fail("findings differ: " + findings_text(a.findings) + " vs " +
                         findings_text(b.findings));
  if (a.steps_completed != b.steps_completed)
    return Verdict::fail("one run completed more steps than the other");
  if (std::string d = first_difference(c, a.weights, b.weights, "the second run"); !d.empty())
    return Verdict::fail(d);
  if (!same_bits(a.norms, b.norms)) return Verdict::fail("reported norms differ between the runs");
  return Verdict::pass();
}

}  // namespace

Verdict check_matches_reference(const TrainingCase& c) { return matches_reference(c); }
Verdict check_matches_distopt(const TrainingCase& c) { return matches_distopt(c); }
Verdict check_collective_fingerprints(const TrainingCase& c) { return collective_fingerprints(c); }
Verdict check_no_findings(const TrainingCase& c) { return no_findings(c); }
Verdict check_resting_memory(const TrainingCase& c) { return resting_memory(c); }
Verdict check_grad_norm(const TrainingCase& c) { return grad_norm(c); }
Verdict check_same_seed_same_trace(const TrainingCase& c) { return same_seed_same_trace(c); }

}  // namespace shardcheck::properties
