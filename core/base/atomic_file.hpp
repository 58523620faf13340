// Writes a file atomically: the content goes to a temporary file in the same folder, which is
// flushed and renamed over the target, so a reader never sees half a report.
//   Status s = write_file_atomic("out/demo/report.json", json_text);
#pragma once

#include <string>
#include <string_view>

#include "core/base/status.hpp"

namespace shardcheck::core {

Status write_file_atomic(const std::string& path, std::string_view content);
// Creates a folder and its parents (like mkdir -p).
Status make_dirs(const std::string& path);

}  // namespace shardcheck::core
