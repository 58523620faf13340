// Chrome trace (the JSON "Trace Event Format" that Perfetto and chrome://tracing open) of a
// run: a process per rank, a thread per stream, a slice per operation (its buffers, bytes,
// lifetime, group and collective index in args), the host programs' marks, a memory counter
// track per stream pool, each finding as an instant event on the operation it concerns, and a
// flow arrow between the two accesses of every race. A trace cut to a window says so: an
// instant at each cut edge and "cut" in otherData.
// Never throws on a name: bytes that are not UTF-8 become U+FFFD.
//   std::string json = reports::chrome_trace(log, findings);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/base/trace_log.hpp"
#include "core/check/findings.hpp"

namespace shardcheck::reports {

std::string chrome_trace(const core::TraceLog& log, const std::vector<core::Finding>& findings);

// Where a finding sits in a timeline: the slice of the operation it concerns (for a race, its
// second access; for a collective, its first member's call; for a training step's finding,
// the end of that step on its rank). nullopt when the log holds no such place.
struct TracePlace {
  int rank = 0;
  int tid = 0;
  int64_t ts_us = 0;
};
std::optional<TracePlace> finding_place(const core::TraceLog& log, const core::Finding& f);

}  // namespace shardcheck::reports
