// Chrome trace (the JSON "Trace Event Format" that Perfetto and chrome://tracing open) of a
// run: a process per rank, a thread per stream, a slice per operation, each finding as an
// instant event, and a flow arrow between the two accesses of every race.
// Never throws on a name: bytes that are not UTF-8 become U+FFFD.
//   std::string json = reports::chrome_trace(log, findings);
#pragma once

#include <string>
#include <vector>

#include "core/base/trace_log.hpp"
#include "core/check/findings.hpp"

namespace shardcheck::reports {

std::string chrome_trace(const core::TraceLog& log, const std::vector<core::Finding>& findings);

}  // namespace shardcheck::reports
