// Signal handling for the commands: everything the handler touches is a lock-free atomic, and
// it calls only write(2) and _exit(2), both async-signal-safe.
#include "run/interrupt.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

namespace shardcheck::run {

namespace {

// An interrupt (SIGINT, Ctrl-C) exits 130, as shells report it; any other stop (SIGTERM)
// leaves an incomplete report and exits 3, like an internal error.
int exit_code_for(int sig) { return sig == SIGINT ? 130 : 3; }

static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
                  std::atomic<long long>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};
std::atomic<bool> g_writing_report{false};
std::atomic<int> g_deferred_signal{0};  // a second signal that came while a report was written
// Who sent the first signal, and when (CLOCK_MONOTONIC, ns): GNU timeout signals its child and
// then its whole process group, so one expiry arrives twice from one sender within
// microseconds. A repeat of the first signal from its sender inside kSameInterruptNs is that
// same interrupt, not a second one asking to quit at once.
std::atomic<int> g_first_sender{0};
std::atomic<long long> g_first_ns{0};
constexpr long long kSameInterruptNs = 500'000'000;
struct sigaction g_previous_int, g_previous_term;

void say(const char* text, size_t bytes) {
  if (::write(STDERR_FILENO, text, bytes) < 0) return;  // nothing else a handler could do
}

long long monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return static_cast<long long>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

extern "C" void on_signal(int sig, siginfo_t* info, void*) {
  const int sender = info != nullptr ? static_cast<int>(info->si_pid) : -1;
  if (!g_interrupted.load()) {
    g_signal.store(sig);
    g_first_sender.store(sender);
    g_first_ns.store(monotonic_ns());
    g_interrupted.store(true);
    static const char kFirst[] =
        "\nshardcheck: interrupted; stopping at the next safe point to write what was found "
        "(interrupt again to quit at once)\n";
    say(kFirst, sizeof kFirst - 1);
    return;
  }
  if (sig == g_signal.load() && sender == g_first_sender.load() &&
      monotonic_ns() - g_first_ns.load() < kSameInterruptNs) {
    return;  // the same interrupt delivered twice (a process group and its member)
  }
  if (g_writing_report.load()) {
    g_deferred_signal.store(sig);
    return;
  }
  static const char kSecond[] = "\nshardcheck: interrupted again; quitting without a report\n";
  say(kSecond, sizeof kSecond - 1);
  ::_exit(exit_code_for(sig));
}

}  // namespace

InterruptScope::InterruptScope() {
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sigemptyset(&sa.sa_mask);  // one handler at a time: neither signal interrupts the other's
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;  // no EINTR from a write or a read; the sender's pid
  ::sigaction(SIGINT, &sa, &g_previous_int);
  ::sigaction(SIGTERM, &sa, &g_previous_term);
  // A signal ignored when we started (nohup, a background job) stays ignored, as everywhere.
  if (g_previous_int.sa_handler == SIG_IGN) ::sigaction(SIGINT, &g_previous_int, nullptr);
  if (g_previous_term.sa_handler == SIG_IGN) ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

InterruptScope::~InterruptScope() {
  // After an interrupt the handlers stay: a repeat of it (timeout's second delivery) arriving
  // as the command returns must not kill the process with the default action and turn a
  // written report's exit code into 128 + the signal.
  if (g_interrupted.load()) return;
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

ReportWriteGuard::ReportWriteGuard() { g_writing_report.store(true); }

ReportWriteGuard::~ReportWriteGuard() {
  g_writing_report.store(false);
  if (const int sig = g_deferred_signal.load(); sig != 0) {
    static const char kDeferred[] =
        "shardcheck: interrupted again; quitting now that the report is written\n";
    say(kDeferred, sizeof kDeferred - 1);
    ::_exit(exit_code_for(sig));
  }
}

const std::atomic<bool>& interrupt_flag() { return g_interrupted; }

bool interrupted() { return g_interrupted.load(std::memory_order_relaxed); }

int interrupt_exit_code() { return exit_code_for(g_signal.load()); }

std::string interrupt_reason() {
  const int sig = g_signal.load();
  if (sig == SIGINT) return "interrupted by SIGINT";
  if (sig == SIGTERM) return "interrupted by SIGTERM";
  return "interrupted by signal " + std::to_string(sig);
}

}  // namespace shardcheck::run
