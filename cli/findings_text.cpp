// The scenario commands' text: findings with reproducers, verdicts and the determinism line.
#include "cli/findings_text.hpp"

#include <ostream>

#include "core/base/text.hpp"
#include "core/scenario/captured_values.hpp"
#include "reports/report_model.hpp"

namespace shardcheck::cli {

void print_findings(std::ostream& out, const run::LoadedScenario& s,
                    const std::vector<core::Finding>& findings, const std::string& policy_flag) {
  for (const auto& f : findings) {
    out << "[" << core::to_string(f.kind) << "] " << core::printable_lines(f.explanation) << "\n";
    if (f.occurrences > 1)
      out << "  (seen " << f.occurrences << " times: on several ranks, steps or schedules)\n";
    out << core::printable_lines(core::spread_text(f));
    // shell_path writes a name that needs escaping in $'...' quotes: safe to show, and it runs.
    if (s.capture() && core::is_captured_value_kind(f.kind)) {  // from the recorded values, in every schedule
      out << "  reproduce: " << reports::command_name() << " run " << core::shell_path(s.file) << "\n\n";
      continue;
    }
    out << "  reproduce: " << reports::command_name() << " replay " << core::shell_path(s.file) << " --seed "
        << f.seed << policy_flag << "\n\n";
  }
}

void print_verdict(std::ostream& out, const run::LoadedScenario& s, const core::ExpectationResult& r) {
  const std::string name = core::printable(s.name);  // a folder's name: ours to escape
  // A captured program, or a file without `expect:`, states nothing: report what is found.
  if (s.capture() && !s.partial.empty()) {
    out << "PARTIAL " << name << ": "
        << (r.found.empty() ? "no findings in what was captured" : "found " + core::kinds_to_string(r.found))
        << "; the capture is partial, so it is not clean: " << core::printable(s.partial) << "\n";
    return;
  }
  if (s.capture() || !s.expect.given) {
    if (r.met) {
      out << "clean   " << name << ": no findings\n";
    } else {
      out << "FOUND   " << name << ": " << core::kinds_to_string(r.found) << "\n";
    }
    return;
  }
  out << (r.met ? "ok      " : "FAILED  ") << name << ": expected " << core::describe(s.expect) << ", found "
      << core::kinds_to_string(r.found);
  if (!r.missing.empty()) out << "; missing " << core::kinds_to_string(r.missing);
  if (!r.unexpected.empty()) out << "; unexpected " << core::kinds_to_string(r.unexpected);
  out << "\n";
}

void print_verdict(std::ostream& out, const run::LoadedScenario& s, const run::CheckedRun& c) {
  const std::string name = core::printable(s.name);
  // A run that ended in an error has no verdict: never "ok" beside it.
  if (!c.bad_input.empty()) {
    out << "ERROR   " << name << ": bad input, no verdict (the run reached the simulator's limit)\n";
  } else if (!c.error.empty()) {
    out << "ERROR   " << name << ": internal error, no verdict\n";
  } else if (c.stopped && c.outcome.explored.runs_done == 0) {
    // Stopped inside its first schedule (a long kernel, the reference): nothing to judge.
    out << "STOPPED " << name << ": interrupted before a schedule finished, no verdict\n";
  } else {
    print_verdict(out, s, c.outcome.judged);
  }
}

void print_determinism(std::ostream& out, const run::LoadedScenario& s, const run::DeterminismCheck& d) {
  if (d.matched) {
    out << "determinism: " << d.runs << " schedule" << (d.runs == 1 ? "" : "s")
        << " rerun with the same seeds, every trace digest repeated\n";
    return;
  }
  out << "NONDETERMINISTIC  " << core::printable(s.name) << " (" << core::printable(s.file)
      << "): " << core::printable(d.mismatch) << "\n"
      << "  the same seed must give the same run: this is an internal error of shardcheck, not a finding in "
         "the scenario\n";
}

}  // namespace shardcheck::cli
