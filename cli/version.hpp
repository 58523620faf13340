// The version and commit `shardcheck --version` prints, written at build time by
// cmake/version.cmake (the commit as `git describe --always --dirty`, or "unknown" outside git).
#pragma once

namespace shardcheck::cli {

extern const char* const kVersion;  // "0.1.0"
extern const char* const kCommit;   // "3c61ef0a1b2c", "3c61ef0a1b2c-dirty", or "unknown"

}  // namespace shardcheck::cli
