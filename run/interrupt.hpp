// Stopping a command at a safe point on SIGINT or SIGTERM. The handler only sets an atomic
// flag; the simulator polls it (sim::Options::cancel) between runs and every few thousand
// steps, core's long loops poll it through a core::CancelToken (a kernel over a large buffer,
// the single-rank reference, the training judge), and the commands between scenarios; then
// they write what they found, marked incomplete.
// A second signal exits at once, unless a report is being written, which finishes first. The
// same signal from the same sender within half a second is the first one delivered twice (GNU
// timeout signals the child, then its process group), not a second.
//   InterruptScope scope;                       // in a command, before its loop
//   for (...) { if (interrupted()) break; ... }
//   if (interrupted()) return interrupt_exit_code();
#pragma once

#include <atomic>
#include <string>

namespace shardcheck::run {

// Installs the handlers for its lifetime and restores the previous ones after.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// Holds back a second signal's immediate exit while a report folder is written, so the folder
// never mixes files of this run with files of an earlier one.
class ReportWriteGuard {
 public:
  ReportWriteGuard();
  ~ReportWriteGuard();  // exits now if a second signal came meanwhile
  ReportWriteGuard(const ReportWriteGuard&) = delete;
  ReportWriteGuard& operator=(const ReportWriteGuard&) = delete;
};

// The flag the simulator polls; true once a signal has arrived.
const std::atomic<bool>& interrupt_flag();
bool interrupted();
// 130 for SIGINT (an interrupt, as shells report it); 3 for SIGTERM: the run did not finish.
int interrupt_exit_code();
// "interrupted by SIGINT" or "interrupted by SIGTERM".
std::string interrupt_reason();

}  // namespace shardcheck::run
