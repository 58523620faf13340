// Several scenarios at once, in order; see scenario_loop.hpp.
#include "run/scenario_loop.hpp"

#include <algorithm>

#include "run/ordered_pool.hpp"

namespace shardcheck::run {

void run_scenarios(const std::vector<LoadedScenario>& all, const ScenarioLoop& loop,
                   const std::function<void(size_t)>& turn,
                   const std::function<bool(size_t, CheckedRun)>& deliver) {
  const int jobs = sim::resolve_jobs(loop.overrides.jobs);
  const int side_by_side =
      loop.across_processes ? 1 : static_cast<int>(std::min<size_t>(static_cast<size_t>(jobs), all.size()));
  auto work = [&](size_t i) {
    ScheduleOverrides o = loop.overrides;
    o.jobs = std::max(1, jobs / side_by_side);
    o.sharing = side_by_side;
    o.across_processes = loop.across_processes;
    if (loop.progress) o.progress = loop.progress();
    std::optional<ResultOptions> result = loop.result;
    if (result && loop.compare_training) result->compare = all[i].training() != nullptr;
    return run_checked(all[i], o, loop.check_determinism, result);
  };
  ordered_pool<CheckedRun>(all.size(), side_by_side, work, turn, deliver);
}

}  // namespace shardcheck::run
