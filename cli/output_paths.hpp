// The outputs a command names, checked before it runs: a refusal costs nothing, where after
// the run it would cost the run. Standard output is checked too, before (a device that
// refuses writes, such as /dev/full) and after (a write that failed on the way).
//   if (!outputs_ok({{"--junit", a.junit}, {"--sarif", a.sarif}}, {"--report", a.report}, a.files))
//     return kBadInput;
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace shardcheck::cli {

// A flag and the path it names; an empty path is an output not asked for.
using NamedPath = std::pair<const char*, std::string>;

// Each file output through core::check_output_path, the report folder through
// reports::check_report_folder, and every output against the command's `inputs` (scenario
// files and capture folders), by file system identity: an output that is an input (by any
// name: a symlink, a hard link, ../x), lies inside an input folder, or is a report folder that
// is or holds an input, would destroy what the command reads, and is refused. Prints
// "shardcheck: --junit X: why" for each refused, and returns whether all may be written.
bool outputs_ok(std::initializer_list<NamedPath> files, const NamedPath& report_folder = {"", ""},
                const std::vector<std::string>& inputs = {});

// Before the command: whether standard output takes writes (false, said on stderr, when it is
// a device that refuses them).
bool stdout_writable();
// After the command: flushes standard output; false, said on stderr, when a write to it failed.
bool stdout_flushed();

}  // namespace shardcheck::cli
