// The name reproducer lines give the shardcheck command: "shardcheck" when PATH finds this
// very executable (after `make install`), else the path it was run by, relative to the
// working directory when under it ("./build/cli/shardcheck"), so every printed line runs as
// printed.
//   reports::set_command_name(cli::invocation_name());
#pragma once

#include <string>

namespace shardcheck::cli {

std::string invocation_name();

}  // namespace shardcheck::cli
