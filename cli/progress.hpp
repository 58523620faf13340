// `-j N` / `--jobs N` on the commands that run many schedules, and the live progress line:
// on a terminal (stderr a tty), schedules done of the total, findings so far, the rate and an
// estimate of the time left, redrawn at most five times a second and erased at the end.
// Nothing is drawn when stderr is not a terminal, so piped output is the same as without it.
//   ProgressLine line(total_schedules);
//   o.progress = line.scenario();   // one per scenario; safe to call from any thread
//   line.print([&] { std::cout << ...; });   // stdout lines while it may show
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace shardcheck::cli {

// `-j,--jobs N`: threads running schedules at once; default 0, every core.
void add_jobs_option(CLI::App* cmd, int& jobs);

// This process's part in an MPI launch (run/processes.hpp), for the commands that share their
// seeds: `shared` when several processes share the command; `prints` for the one that prints
// and writes reports (process 0), whose stdout alone is kept; `leave` for a process with
// nothing to do (launched as one of several, built without MPI, not process 0).
struct LaunchRole {
  bool shared = false;
  bool prints = true;
  bool leave = false;
};
LaunchRole join_launch();

class ProgressLine {
 public:
  explicit ProgressLine(int64_t total);
  ~ProgressLine();  // erases the line
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // A callback for one scenario's progress (schedules done and findings so far in it, both
  // only growing); null when nothing is drawn.
  std::function<void(int schedules_done, int findings)> scenario();
  // Erases the line now (it comes back at the next update).
  void clear();
  // Erases the line and runs `print` (writing to stdout) before any thread can redraw it.
  void print(const std::function<void()>& print);
  // Text shown before the counts (the scenario running), drawn now.
  void label(std::string text);
  bool shown() const { return tty_; }

 private:
  void update(int64_t done_delta, int64_t findings_delta);
  void draw_locked();

  const bool tty_;
  const int64_t total_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  int64_t done_ = 0;
  int64_t findings_ = 0;
  std::string label_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace shardcheck::cli
