// The outputs a command names, checked before it runs: a refusal costs nothing, where after
// the run it would cost the run. Standard output is checked too, before (a device that
// refuses writes, such as /dev/full) and after (a write that failed on the way).
//   if (!outputs_ok({{"--junit", a.junit}, {"--sarif", a.sarif}}, {"--report", a.report}))
//     return kBadInput;
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

namespace shardcheck::cli {

// A flag and the path it names; an empty path is an output not asked for.
using NamedPath = std::pair<const char*, std::string>;

// Each file output through core::check_output_path, the report folder through
// reports::check_report_folder; prints "shardcheck: --junit X: why" for each refused, and
// returns whether all may be written.
bool outputs_ok(std::initializer_list<NamedPath> files, const NamedPath& report_folder = {"", ""});

// Before the command: whether standard output takes writes (false, said on stderr, when it is
// a device that refuses them).
bool stdout_writable();
// After the command: flushes standard output; false, said on stderr, when a write to it failed.
bool stdout_flushed();

}  // namespace shardcheck::cli
