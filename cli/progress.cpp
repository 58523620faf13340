// The jobs option and the live progress line on stderr (see progress.hpp).
#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "run/processes.hpp"

namespace shardcheck::cli {

void add_jobs_option(CLI::App* cmd, int& jobs) {
  cmd->add_option("-j,--jobs", jobs,
                  "Threads running schedules at once (default: every core); the output is the same for any "
                  "number")
      ->transform(in_range(1, 4096));
}

namespace {
bool quiet = false;  // a process that does not print draws no progress line either
}  // namespace

LaunchRole join_launch() {
  LaunchRole r;
  if (run::alone_in_launch()) {
    r.leave = true;
    return r;
  }
  const run::Processes& p = run::processes();
  if (p.count < 2) return r;
  r.shared = true;
  r.prints = p.index == 0;
  // The others compute what process 0 prints; their copy of it goes nowhere.
  if (!r.prints && !std::freopen("/dev/null", "w", stdout)) std::cout.setstate(std::ios::badbit);
  quiet = !r.prints;
  return r;
}

ProgressLine::ProgressLine(int64_t total)
    : tty_(!quiet && ::isatty(STDERR_FILENO) == 1), total_(total), start_(std::chrono::steady_clock::now()) {}

ProgressLine::~ProgressLine() { clear(); }

std::function<void(int, int)> ProgressLine::scenario() {
  if (!tty_) return nullptr;
  struct Seen {
    int done = 0;
    int findings = 0;
  };
  auto seen = std::make_shared<Seen>();
  // Calls for one scenario come one at a time (sim::ExploreOptions::progress), so `seen`
  // needs no lock of its own.
  return [this, seen](int done, int findings) {
    const int64_t d = done - seen->done, f = findings - seen->findings;
    seen->done = done;
    seen->findings = findings;
    update(d, f);
  };
}

void ProgressLine::update(int64_t done_delta, int64_t findings_delta) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += done_delta;
  findings_ += findings_delta;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(200)) return;  // at most five times a second
  last_draw_ = now;
  draw_locked();
}

void ProgressLine::draw_locked() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done_) / seconds : 0;
  char eta[32] = "";
  if (rate > 0 && total_ > done_) {
    const double left = static_cast<double>(total_ - done_) / rate;
    if (left < 100) {
      std::snprintf(eta, sizeof eta, ", ETA %.0f s", left);
    } else {
      std::snprintf(eta, sizeof eta, ", ETA %.0f min", left / 60);
    }
  }
  std::fprintf(stderr, "\r\033[K%s%lld/%lld schedules, %lld finding%s, %.1f/s%s", label_.c_str(),
               static_cast<long long>(done_), static_cast<long long>(total_),
               static_cast<long long>(findings_), findings_ == 1 ? "" : "s", rate, eta);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::label(std::string text) {
  if (!tty_) return;
  std::lock_guard<std::mutex> lock(mu_);
  label_ = std::move(text);
  last_draw_ = std::chrono::steady_clock::now();
  draw_locked();
}

void ProgressLine::clear() {
  print([] {});
}

void ProgressLine::print(const std::function<void()>& print) {
  if (!tty_) {
    print();
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    drawn_ = false;
  }
  print();
}

}  // namespace shardcheck::cli
