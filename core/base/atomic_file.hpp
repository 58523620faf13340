// Writes a file atomically: the content goes to a temporary file in the same folder, which is
// flushed and renamed over the target, so a reader never sees half a report. A symlink is
// followed (the link stays, its target gets the content); a path that is a character device
// or FIFO (/dev/null, /dev/stdout, a pipe) is streamed into as such, never replaced; a write
// error there (/dev/full) is an error naming the user's path.
//   Status s = write_file_atomic("out/demo/report.json", json_text);
#pragma once

#include <string>
#include <string_view>

#include "core/base/status.hpp"

namespace shardcheck::core {

// Refuses, before a command runs, an output path that will not take its file: a folder, a
// block device, a device that refuses writes (/dev/full), a new file in a folder that does not
// exist or cannot be written.
[[nodiscard]] Status check_output_path(const std::string& path);
// Whether the character device open as `fd` takes writes, asked with an empty write, which
// sends it nothing; the error names `shown`.
[[nodiscard]] Status check_device_takes_writes(int fd, const std::string& shown);
Status write_file_atomic(const std::string& path, std::string_view content);
// Creates a folder and its parents (like mkdir -p).
Status make_dirs(const std::string& path);

}  // namespace shardcheck::core
