// Runs a trace scenario's program on any Runtime: the rank's host program, step by step,
// with buffers, events and groups named as in the file. The simulator runs it to find
// races; the GPU backend runs the same program on hardware.
//   world.run([&](Runtime& rt) { return run_trace_program(rt, scenario); });
#pragma once

#include "core/base/task.hpp"
#include "core/runtime/runtime.hpp"
#include "core/scenario/trace_scenario.hpp"

namespace shardcheck::core {

Task<> run_trace_program(Runtime& rt, const TraceScenario& scenario);

}  // namespace shardcheck::core
