// What `--backend gpu` decides on the simulator before it touches a GPU (the race sites and
// holds), the verdict of hardware runs, and the entry points, which go to the GPU backend that
// `shardcheck-gpu` installs (run/backends.hpp).
#include "run/gpu_runs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <variant>

#include "core/base/text.hpp"
#include "run/backends.hpp"
#include "run/compare.hpp"
#include "run/exit_code.hpp"
#include "run/scenario_run.hpp"
#include "run/training_run.hpp"

namespace shardcheck::run {

std::vector<RaceSite> race_sites(const std::vector<LoadedScenario>& scenarios) {
  std::vector<RaceSite> sites;
  for (const auto& s : scenarios) {
    const ScenarioOutcome out = run_scenario(s, {});
    for (const auto& f : out.explored.findings) {
      const auto* race = std::get_if<core::RaceDetail>(&f.detail);
      if (f.kind != core::FindingKind::stream_race || !race) continue;
      // Delay the access the program issued first, so that on hardware the other one
      // overtakes it: the order program order does not have.
      const core::AccessSite& a = race->first.op_id <= race->second.op_id ? race->first : race->second;
      RaceSite site{a.rank, a.stream, a.op, s.name, f.seed};
      if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(std::move(site));
    }
  }
  return sites;
}

bool ForcedHold::operator==(const ForcedHold& o) const {
  return first_rank == o.first_rank && second_rank == o.second_rank && first_stream == o.first_stream &&
         second_stream == o.second_stream && first_op == o.first_op && second_op == o.second_op &&
         first_occurrence == o.first_occurrence && second_occurrence == o.second_occurrence;
}

std::vector<ForcedHold> forced_holds(const std::vector<LoadedScenario>& scenarios) {
  std::vector<ForcedHold> holds;
  for (const auto& s : scenarios) {
    const ScenarioOutcome out = run_scenario(s, {});
    for (const auto& f : out.explored.findings) {
      const auto* race = std::get_if<core::RaceDetail>(&f.detail);
      if (f.kind != core::FindingKind::stream_race || !race) continue;
      ScheduleOverrides o;
      o.seed = f.seed;
      const auto opt = options_for(s, o);
      if (!opt) continue;
      const sim::Replay r = sim::replay(s.factory, *opt);
      const std::vector<sim::OpInfo>& ops = r.world->ops();
      // The how-manyth operation of its rank and stream with its name `op` is.
      auto occurrence = [&](uint32_t op) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < op && op < ops.size(); ++i)
          n += ops[i].rank == ops[op].rank && ops[i].stream == ops[op].stream && ops[i].name == ops[op].name;
        return n;
      };
      if (race->first.op_id >= ops.size() || race->second.op_id >= ops.size()) continue;
      ForcedHold h{race->first.rank,
                   race->second.rank,
                   race->first.stream,
                   race->second.stream,
                   race->first.op,
                   race->second.op,
                   occurrence(race->first.op_id),
                   occurrence(race->second.op_id),
                   "",
                   "",
                   s.name,
                   f.seed};
      if (race->first.lifetime != race->second.lifetime && race->first.rank == race->second.rank) {
        h.freed_buffer = race->first.buffer;
        h.reusing_buffer = race->second.buffer;
      }
      // One hold per first access: it waits for the first of its racing accesses to run, which
      // is enough to force the order; holding it for a later one too would only wait longer.
      auto same_first = [&](const ForcedHold& x) {
        return x.scenario == h.scenario && x.first_rank == h.first_rank && x.first_stream == h.first_stream &&
               x.first_op == h.first_op && x.first_occurrence == h.first_occurrence;
      };
      if (std::find_if(holds.begin(), holds.end(), same_first) == holds.end()) holds.push_back(std::move(h));
    }
  }
  return holds;
}

HardwareVerdict hardware_verdict(const core::Expectation& e, const HardwareTally& t, bool forced) {
  using K = core::FindingKind;
  const bool showed = t.differing > 0 || t.faults > 0 || t.other > 0;
  HardwareVerdict v;
  std::string seen = std::to_string(t.differing) + " of " + std::to_string(t.runs) + " runs differ";
  if (t.faults) seen += ", " + std::to_string(t.faults) + " stopped by the program";
  if (t.other) seen += ", " + std::to_string(t.other) + " other finding" + (t.other == 1 ? "" : "s");
  if (!e.given) {
    v.is = HardwareVerdict::Is::no_expectation;
    v.text = "no expectation; " + seen;
    return v;
  }
  const std::string expected = "expected " + core::describe(e) + "; ";
  auto wants = [&](K k) { return std::find(e.findings.begin(), e.findings.end(), k) != e.findings.end(); };
  // Expected findings that values on hardware may not show.
  bool unseen_ok = !e.findings.empty();
  for (K k : e.findings) unseen_ok &= core::info(k).values_may_miss;
  if (e.findings.empty()) {
    v.is = showed ? HardwareVerdict::Is::not_met : HardwareVerdict::Is::met;
    v.text = expected + seen;
  } else if (wants(K::stream_race) && forced) {
    v.text = expected + "forced, " + seen;
    if (t.differing == t.runs && t.runs > 0) {
      v.is = HardwareVerdict::Is::met;
    } else if (t.differing == 0 && t.forced == t.runs && t.runs > 0) {
      v.is = HardwareVerdict::Is::unconfirmed;
      v.text += ": unconfirmed, the racing order ran in every run but changed no value the program keeps";
    } else if (t.differing == 0 && t.forced == 0) {
      v.is = HardwareVerdict::Is::unconfirmed;
      v.text +=
          ": unconfirmed, no hold met its second access after it (the allocator handed out other blocks)";
    } else {
      v.is = HardwareVerdict::Is::not_met;
      v.text += " (a forced race must change values in every run)";
    }
  } else if (!showed && unseen_ok) {
    v.is = HardwareVerdict::Is::unconfirmed;
    v.text = expected + seen + ": unconfirmed, ";
    v.text += wants(K::stream_race) ? "the race's order did not happen in these runs (--force-race forces it)"
              : wants(K::deadlock)
                  ? "a send cycle completes on the device-local communicator (its sends are eager)"
                  : "values cannot show an uninitialized read";
  } else {
    v.is = showed ? HardwareVerdict::Is::met : HardwareVerdict::Is::not_met;
    v.text = expected + seen;
  }
  return v;
}

int run_on_gpu(const std::vector<LoadedScenario>& scenarios, const GpuArgs& a, int runs) {
  if (backends().run_on_gpu) return backends().run_on_gpu(scenarios, a, runs);
  return hand_off("--backend gpu");
}

int compare_on_gpu(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps) {
  if (backends().compare_on_gpu) return backends().compare_on_gpu(s, a, against, steps);
  return hand_off("--backend gpu");
}

}  // namespace shardcheck::run
