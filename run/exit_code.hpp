// The process exit codes every command returns, decided in run/ and passed through by cli/:
// 0 every expectation met, 1 an expectation not met, 2 bad input, 3 internal error.
#pragma once

namespace shardcheck::run {

enum ExitCode : int { kOk = 0, kExpectationFailed = 1, kBadInput = 2, kInternalError = 3 };

}  // namespace shardcheck::run
