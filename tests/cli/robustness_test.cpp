// The checker never crashes or lies: --check-determinism reruns every schedule and compares
// trace digests; SIGINT and SIGTERM stop a command at a safe point with a report marked
// incomplete (exit 128 + the signal); an internal error does the same with exit 3. The faults
// a correct build never has come from the SHARDCHECK_TEST_FAULT hook (run/scenario_run.hpp).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/support/run_command.hpp"

using shardcheck::testing::run_command;
using shardcheck::testing::run_shardcheck;

namespace {

std::string trace_scenario(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/" + name;
}
std::string catalog_scenario(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/catalog/" + name;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = "/tmp/shardcheck-" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Files a report folder must not keep: temporaries of an atomic write.
int temporaries(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().find(".tmp.") != std::string::npos ? 1 : 0;
  return n;
}

// A `shardcheck` child with its stdout on a pipe, so a test can wait for a line and signal it.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(SHARDCHECK_BINARY));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(SHARDCHECK_BINARY, argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0) {  // a failed REQUIRE left it running
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
  }

  // Reads stdout until a line starting with `prefix` has arrived; false at EOF or after 20 s.
  bool wait_for_line(const std::string& prefix) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      for (size_t start = 0, end; (end = text_.find('\n', start)) != std::string::npos; start = end + 1) {
        if (text_.compare(start, prefix.size(), prefix) == 0) return true;
      }
      if (!read_some(100)) return false;
    }
    return false;
  }

  void signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }

  // Waits (at most 20 s) for the exit, draining stdout meanwhile; -1 when it did not exit.
  int wait_exit() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      read_some(20);
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        while (read_some(0)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    return -1;
  }

  const std::string& out() const { return text_; }

 private:
  // Appends what stdout has within `timeout_ms`; false at EOF or when nothing came.
  bool read_some(int timeout_ms) {
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return timeout_ms > 0;  // nothing yet is not the end
    char buf[4096];
    const ssize_t n = ::read(out_, buf, sizeof buf);
    if (n <= 0) return false;
    text_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string text_;
};

// A copy of a shipped trace scenario with more schedules (files allow up to 100000): a scenario
// long enough for a signal to arrive while it runs.
std::string scenario_with_runs(const std::string& name, int runs) {
  std::string text = read_text(trace_scenario(name));
  const size_t at = text.find("runs: ");
  REQUIRE(at != std::string::npos);
  const size_t end = text.find_first_of(",}", at);
  text.replace(at, end - at, "runs: " + std::to_string(runs));
  const std::string path = "/tmp/shardcheck-long-" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE(
    "run --check-determinism reruns every schedule of catalog and trace scenarios and finds them repeat",
    "[cli][determinism]") {
  const std::string dir = fresh_dir("determinism");
  auto r = run_shardcheck(
      "run " + catalog_scenario("pp-embedding-allreduce-raw-shards.yaml") + " " +
      catalog_scenario("grad-divisor-on-running-sum-fixed.yaml") + " " + trace_scenario("reuse-race.yaml") +
      " " + trace_scenario("cross-group-deadlock.yaml") + " --check-determinism --report " + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(
      r.out,
      Catch::Contains("determinism: 20 schedules rerun with the same seeds, every trace digest repeated"));
  REQUIRE_THAT(
      r.out, Catch::Contains(
                 "determinism: all 29 trace digests of 4 scenarios matched on a rerun with the same seeds"));
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == true);
  REQUIRE(j["stopped"].is_null());
  for (const auto& s : j["scenarios"]) {
    INFO(s["name"]);
    REQUIRE(s["complete"] == true);
    REQUIRE(s["determinism"]["matched"] == true);
    REQUIRE(s["determinism"]["runs"] == s["schedules"]);
    REQUIRE(s["determinism"]["mismatch"] == "");
  }
  std::filesystem::remove_all(dir);
  // explore takes the flag too, and reruns the schedules it explored: here up to the first finding.
  auto plain = run_shardcheck("explore " + trace_scenario("reuse-race.yaml") + " --check-determinism");
  REQUIRE(plain.exit_code == 0);
  REQUIRE_THAT(plain.out, Catch::Contains("determinism: 1 schedule rerun with the same seeds"));
}

TEST_CASE(
    "a rerun that does not repeat is the checker's own failure: exit 3 naming the run, seed and both digests",
    "[cli][determinism]") {
  const std::string dir = fresh_dir("nondeterminism");
  auto r = run_command("SHARDCHECK_TEST_FAULT=nondeterminism " + std::string(SHARDCHECK_BINARY) + " run " +
                       trace_scenario("reuse-race.yaml") + " --check-determinism --report " + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 3);
  REQUIRE_THAT(r.out, Catch::Contains("NONDETERMINISTIC  reuse-race (" + trace_scenario("reuse-race.yaml") +
                                      "): run 1 (seed 1): trace digest "));
  REQUIRE_THAT(r.out, Catch::Contains("on the rerun"));
  REQUIRE_THAT(r.out, Catch::Contains("internal error of shardcheck, not a finding in the scenario"));
  const auto j = read_json(dir + "/report.json");
  const auto& s = j["scenarios"][0];
  REQUIRE(s["determinism"]["matched"] == false);
  REQUIRE_THAT(s["determinism"]["mismatch"].get<std::string>(),
               Catch::StartsWith("run 1 (seed 1): trace digest "));
  REQUIRE(s["met"] == false);
  REQUIRE_THAT(read_text(dir + "/report.md"), Catch::Contains("**Nondeterministic:**"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("SIGINT stops a long explore at the next schedule: report marked incomplete, exit 130",
          "[cli][interrupt]") {
  const std::string dir = fresh_dir("sigint");
  // 100 000 runs, the most --runs takes, are seconds of exploring.
  Child c({"explore", trace_scenario("reuse-fix-record-stream.yaml"), "--runs", "100000", "--all", "--report",
           dir});
  REQUIRE(c.wait_for_line("exploring up to 100000 schedules"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // well into the schedules
  c.signal(SIGINT);
  REQUIRE(c.wait_exit() == 130);
  INFO(c.out());
  REQUIRE_THAT(c.out(), Catch::Contains("interrupted by SIGINT"));
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["stopped"] == "interrupted");
  REQUIRE_THAT(j["incomplete_reason"].get<std::string>(), Catch::StartsWith("interrupted by SIGINT"));
  REQUIRE(j["scenarios"].size() == 1);
  REQUIRE(j["scenarios"][0]["complete"] == false);
  REQUIRE(j["scenarios"][0]["schedules"] < 100000);
  REQUIRE_THAT(read_text(dir + "/report.md"),
               Catch::Contains("> **Incomplete report:** interrupted by SIGINT"));
  REQUIRE_THAT(read_text(dir + "/report.html"), Catch::Contains("id=\"incomplete\""));
  REQUIRE(temporaries(dir) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("SIGINT during run keeps the scenarios that finished and marks the one it stopped",
          "[cli][interrupt]") {
  const std::string dir = fresh_dir("sigint-run");
  const std::string longer = scenario_with_runs("reuse-fix-alloc-on-rs.yaml", 100000);
  const std::string junit = dir + "-junit.xml", sarif = dir + "-sarif.json";
  Child c({"run", trace_scenario("reuse-race.yaml"), longer, trace_scenario("p2p-safe.yaml"), "--report", dir,
           "--junit", junit, "--sarif", sarif});
  REQUIRE(c.wait_for_line("ok      reuse-race"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the second has begun: it takes seconds
  c.signal(SIGINT);
  REQUIRE(c.wait_exit() == 130);
  std::remove(longer.c_str());
  INFO(c.out());
  REQUIRE_THAT(c.out(), Catch::Contains("stopped early by an interrupt"));
  REQUIRE_THAT(c.out(), Catch::Contains("interrupted by SIGINT: 2 of 3 scenarios ran"));
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["stopped"] == "interrupted");
  REQUIRE(j["scenarios"].size() == 2);
  REQUIRE(j["scenarios"][0]["complete"] == true);
  REQUIRE(j["scenarios"][0]["findings"][0]["kind"] == "stream_race");
  REQUIRE(j["scenarios"][1]["complete"] == false);
  REQUIRE(temporaries(dir) == 0);
  // The CI outputs hold what ran, and the file never reached as skipped.
  std::ifstream in(junit);
  const std::string xml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(xml);
  REQUIRE_THAT(xml, Catch::Contains("tests=\"3\" failures=\"0\" errors=\"0\" skipped=\"1\""));
  REQUIRE_THAT(xml, Catch::Contains("<skipped message=\"not run: interrupted by SIGINT\"/>"));
  REQUIRE_THAT(xml, Catch::Contains("<property name=\"complete\" value=\"false\"/>"));
  const auto s = read_json(sarif);
  REQUIRE(s["runs"][0]["results"].size() == 1);
  REQUIRE(s["runs"][0]["invocations"][0]["executionSuccessful"] == false);
  std::remove(junit.c_str());
  std::remove(sarif.c_str());
  std::filesystem::remove_all(dir);
}

TEST_CASE("SIGTERM stops the demo between scenarios: report marked incomplete, exit 3", "[cli][interrupt]") {
  const std::string dir = fresh_dir("sigterm");
  Child c({"demo", "--out", dir});
  REQUIRE(c.wait_for_line("[1/"));
  c.signal(SIGTERM);
  REQUIRE(c.wait_exit() == 3);
  INFO(c.out());
  REQUIRE_THAT(c.out(), Catch::Contains("interrupted by SIGTERM"));
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["stopped"] == "interrupted");
  REQUIRE_THAT(j["incomplete_reason"].get<std::string>(), Catch::StartsWith("interrupted by SIGTERM"));
  REQUIRE(j["scenarios"].size() >= 1);
  REQUIRE(j["scenarios"].size() < 30);
  REQUIRE(temporaries(dir) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("one signal delivered twice at once (as GNU timeout does) is one interrupt: the report is written",
          "[cli][interrupt]") {
  // timeout(1) signals its child, then the child's process group: two SIGTERMs from one sender
  // within microseconds. Taken as two, the second quit without a report.
  const std::string dir = fresh_dir("sigterm-twice");
  Child c({"explore", trace_scenario("reuse-fix-record-stream.yaml"), "--runs", "100000", "--all", "--report",
           dir});
  REQUIRE(c.wait_for_line("exploring up to 100000 schedules"));
  c.signal(SIGTERM);
  // Apart by enough for the first handler to have returned (back to back, the kernel would
  // often merge the two into one pending signal and hide the bug).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c.signal(SIGTERM);
  REQUIRE(c.wait_exit() == 3);
  INFO(c.out());
  REQUIRE_THAT(c.out(), Catch::Contains("interrupted by SIGTERM"));
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["stopped"] == "interrupted");
  REQUIRE(temporaries(dir) == 0);
  std::filesystem::remove_all(dir);
}

// One kernel that writes a 1 GiB buffer 64 times: a minute of work in a single simulated
// operation, so a run that only polled between operations would run on long after a signal.
std::string long_kernel_scenario() {
  std::string writes;
  for (int i = 0; i < 64; ++i) writes += i == 0 ? "big" : ", big";
  const std::string path = "/tmp/shardcheck-long-kernel-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << "kind: trace\nname: long-kernel\nranks: 1\nstreams: [compute]\n"
                         "schedule: {runs: 1}\nprogram:\n"
                         "  - alloc: {buffer: big, bytes: 1073741824}\n"
                         "  - kernel: {name: fill, stream: compute, writes: ["
                      << writes << "]}\nexpect: {findings: []}\n";
  return path;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST_CASE("SIGINT inside one long kernel stops it midway: report marked incomplete, exit 130",
          "[cli][interrupt]") {
  const std::string dir = fresh_dir("sigint-kernel");
  const std::string file = long_kernel_scenario();
  Child c({"explore", file, "--report", dir});
  REQUIRE(c.wait_for_line("exploring up to 1 schedule"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // inside the kernel
  const auto signalled = std::chrono::steady_clock::now();
  c.signal(SIGINT);
  const int code = c.wait_exit();
  const double stopped_after = seconds_since(signalled);
  std::remove(file.c_str());
  INFO(c.out());
  REQUIRE(code == 130);
  // The kernel alone takes about a minute (64 GiB written byte by byte); the poll inside it
  // stops it within milliseconds. 10 s leaves room for a loaded machine.
  REQUIRE(stopped_after < 10.0);
  REQUIRE_THAT(c.out(), Catch::Contains("interrupted by SIGINT"));
  REQUIRE_THAT(c.out(),
               Catch::Contains("STOPPED long-kernel: interrupted before a schedule finished, no verdict"));
  REQUIRE_THAT(c.out(), !Catch::Contains("ok      long-kernel"));
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["stopped"] == "interrupted");
  REQUIRE(j["scenarios"][0]["complete"] == false);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an interrupt before any schedule finished is no verdict anywhere: a pass would be a lie",
          "[cli][interrupt]") {
  const std::string dir = fresh_dir("no-verdict"), junit = dir + ".xml";
  const std::string file = long_kernel_scenario();
  Child c({"run", file, "--report", dir, "--junit", junit});
  REQUIRE(c.wait_for_line("== long-kernel"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // inside the first schedule's kernel
  c.signal(SIGTERM);
  const int code = c.wait_exit();
  std::remove(file.c_str());
  INFO(c.out());
  REQUIRE(code == 3);  // SIGTERM's exit (docs/cli.md)
  REQUIRE_THAT(c.out(), Catch::Contains("STOPPED long-kernel"));
  REQUIRE_THAT(c.out(), Catch::Contains("1 stopped before a schedule finished: no verdict"));
  REQUIRE_THAT(c.out(), !Catch::Contains("1 met expectations"));
  const std::string md = read_text(dir + "/report.md");
  REQUIRE_THAT(md, Catch::Contains("| stopped, no verdict |"));
  REQUIRE_THAT(md, Catch::Contains("0 met expectations, 0 failed, 1 stopped before a schedule finished"));
  REQUIRE_THAT(md, !Catch::Contains("| ok |"));
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["scenarios"][0]["met"] == false);
  REQUIRE(j["scenarios"][0]["judged"] == false);
  REQUIRE(j["totals"]["met"] == 0);
  REQUIRE(j["totals"]["no_verdict"] == 1);
  const std::string xml = read_text(junit);
  REQUIRE_THAT(xml, Catch::Contains("skipped=\"1\""));
  REQUIRE_THAT(xml, Catch::Contains("<skipped message=\"stopped before a schedule finished: no verdict\"/>"));
  std::filesystem::remove_all(dir);
  std::remove(junit.c_str());
}

TEST_CASE("SIGTERM while compare computes a long single-rank reference stops it promptly, exit 3",
          "[cli][interrupt]") {
  const std::string dir = fresh_dir("sigterm-reference");
  // 1000 steps of 2 x 256 microbatches each in the reference, which comes before the training
  // run: minutes.
  std::string text = read_text(catalog_scenario("grad-divisor-on-running-sum-fixed.yaml"));
  text.replace(text.find("microbatches: 4"), 15, "microbatches: 256");
  const std::string file = "/tmp/shardcheck-long-reference-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(file) << text;
  Child c({"compare", file, "--against", "single_rank", "--steps", "1000", "--report", dir});
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // inside the reference
  const auto signalled = std::chrono::steady_clock::now();
  c.signal(SIGTERM);
  const int code = c.wait_exit();
  const double stopped_after = seconds_since(signalled);
  std::remove(file.c_str());
  INFO(c.out());
  REQUIRE(code == 3);
  REQUIRE(stopped_after < 10.0);
  REQUIRE_THAT(c.out(), Catch::Contains("compare: interrupted by SIGTERM before the comparison finished"));
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["stopped"] == "interrupted");
  std::filesystem::remove_all(dir);
}

TEST_CASE("under GNU timeout the expiry stops the run at a safe point with its report", "[cli][interrupt]") {
  const std::string dir = fresh_dir("timeout");
  const auto r =
      run_command("timeout --preserve-status 1 " + std::string(SHARDCHECK_BINARY) + " explore " +
                  trace_scenario("reuse-fix-record-stream.yaml") + " --runs 100000 --all --report " + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 3);
  const auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["stopped"] == "interrupted");
  std::filesystem::remove_all(dir);
}

TEST_CASE("an internal error stops the command with what was found, marked incomplete, exit 3",
          "[cli][internal]") {
  const std::string dir = fresh_dir("internal");
  const std::string fault = "SHARDCHECK_TEST_FAULT=internal_error " + std::string(SHARDCHECK_BINARY);
  auto r = run_command(fault + " run " + trace_scenario("reuse-race.yaml") + " " +
                       trace_scenario("p2p-safe.yaml") + " --report " + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 3);
  REQUIRE_THAT(r.out, Catch::Contains(
                          "internal error: a test fault (SHARDCHECK_TEST_FAULT=internal_error) in the second "
                          "schedule (seed 2)"));
  REQUIRE_THAT(r.out, Catch::Contains("stopped after 1 of 2 scenarios by an internal error in reuse-race"));
  auto j = read_json(dir + "/report.json");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["stopped"] == "internal_error");
  REQUIRE(j["scenarios"].size() == 1);
  const auto& s = j["scenarios"][0];
  REQUIRE(s["complete"] == false);
  REQUIRE(s["schedules"] == 2);
  REQUIRE(s["findings"][0]["kind"] == "stream_race");  // seed 1 found it before seed 2 failed
  REQUIRE_THAT(s["error"].get<std::string>(), Catch::Contains("SHARDCHECK_TEST_FAULT"));
  std::filesystem::remove_all(dir);

  auto e =
      run_command(fault + " explore " + trace_scenario("reuse-fix-record-stream.yaml") + " --report " + dir);
  INFO(e.out << e.err);
  REQUIRE(e.exit_code == 3);
  j = read_json(dir + "/report.json");
  REQUIRE(j["stopped"] == "internal_error");
  REQUIRE_THAT(read_text(dir + "/report.md"),
               Catch::Contains("> **Incomplete report:** internal error in reuse-fix-record-stream"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the determinism check is for the simulator: with --backend gpu it is bad input",
          "[cli][determinism]") {
  auto r = run_shardcheck("run " + trace_scenario("reuse-race.yaml") + " --backend gpu --check-determinism");
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("--check-determinism"));
}

// ---- Names from inputs, outputs over inputs, and what a report costs ---------------------------
// A capture folder from someone else's tarball names itself: every sink escapes the name, no
// output replaces an input, and a report costs what it shows.

namespace {

std::string capture_fixture(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/fixtures/" + name;
}

// A copy of a capture fixture in a fresh folder under `parent`, named `name`.
std::string copy_capture(const std::string& fixture, const std::string& parent, const std::string& name) {
  std::filesystem::create_directories(parent);
  const std::string dir = parent + "/" + name;
  std::filesystem::copy(capture_fixture(fixture), dir, std::filesystem::copy_options::recursive);
  return dir;
}

// `s` in single quotes for /bin/sh (the tests' names hold no single quote).
std::string sq(const std::string& s) {
  REQUIRE(s.find('\'') == std::string::npos);
  return "'" + s + "'";
}

// A one-rank capture written from its records (the header and end record added).
std::string write_capture(const std::string& dir, const std::vector<std::string>& records,
                          const std::string& end_extra = "") {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir + "/rank-0.jsonl");
  out << R"({"shardcheck_capture": 1, "rank": 0, "world_size": 1, "torch": "2.1", "device": "x", "argv": ["p.py"]})"
      << "\n";
  for (const auto& r : records) out << r << "\n";
  out << R"({"k": "end", "records": )" << records.size() << end_extra << "}\n";
  return dir;
}

void require_no_raw_controls(const std::string& text) {
  for (const char* bad : {"\x1b", "\x07", "\xE2\x80\xAE", "\xE2\x80\x8B", "\xEF\xBF\xBE"})
    REQUIRE(text.find(bad) == std::string::npos);
}

}  // namespace

TEST_CASE(
    "a capture folder named with ESC, OSC, a newline, bidi and zero-width characters cannot clear the "
    "screen, retitle the window, forge a clean line, reorder text or inject headings and HTML into reports",
    "[cli][hostile-names]") {
  const std::string parent = fresh_dir("evil-names"), report = parent + "-report";
  const std::string name =
      "cap\x1b[2J\x1b]0;owned\x07\nclean   all: no findings\n# Heading <script>x<img src=x onerror=y> "
      "`tick\xE2\x80\xAE"
      "\xE2\x80\x8B";
  const std::string dir = copy_capture("side-stream-race", parent, name);
  const auto r = run_shardcheck("run " + sq(dir) + " --runs 2 --report " + report + " --junit " + parent +
                                "/j.xml --sarif " + parent + "/s.json");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  require_no_raw_controls(r.out);
  REQUIRE(r.out.find("\nclean   all: no findings") == std::string::npos);
  REQUIRE_THAT(r.out,
               Catch::Contains("== cap\\x1b[2J\\x1b]0;owned\\x07\\nclean   all: no findings\\n# Heading"));
  REQUIRE_THAT(r.out, Catch::Contains("\\u202e\\u200b"));
  REQUIRE_THAT(r.out, Catch::Contains("FOUND   cap\\x1b[2J"));
  REQUIRE_THAT(r.out, Catch::Contains("reproduce: "));
  REQUIRE_THAT(r.out, Catch::Contains("$'"));  // the reproducer's folder in ANSI-C quotes
  const std::string md = read_text(report + "/report.md");
  require_no_raw_controls(md);
  REQUIRE(md.find("\n# Heading") == std::string::npos);
  REQUIRE_THAT(md, Catch::Contains("## cap\\\\x1b\\[2J"));  // the heading: escaped, on one line
  REQUIRE_THAT(md, Catch::Contains("\\<script\\>"));
  // Raw "<script>" only where Markdown shows text literally: in a code span or a fenced block.
  std::istringstream lines(md);
  bool fenced = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("```", 0) == 0) fenced = !fenced;
    if (line.find("<script>") != std::string::npos && !fenced) REQUIRE(line.find("`` ") != std::string::npos);
  }
  const std::string html = read_text(report + "/report.html");
  require_no_raw_controls(html);
  REQUIRE(html.find("<script>x") == std::string::npos);
  require_no_raw_controls(read_text(parent + "/j.xml"));
  std::filesystem::remove_all(parent);
  std::filesystem::remove_all(report);
}

TEST_CASE("the reproducer of a capture folder named -rf runs as printed instead of being read as options",
          "[cli][hostile-names]") {
  const std::string parent = fresh_dir("dash-name");
  copy_capture("side-stream-race", parent, "-rf");
  const auto r =
      run_command("cd " + parent + " && " + std::string(SHARDCHECK_BINARY) + " run --runs 2 -- -rf");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  const size_t at = r.out.find("reproduce: ");
  REQUIRE(at != std::string::npos);
  const std::string line = r.out.substr(at + 11, r.out.find('\n', at) - at - 11);
  REQUIRE_THAT(line, Catch::Contains(" replay ./-rf --seed "));
  const auto again = run_command("cd " + parent + " && bash -c " + sq(line));
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 1);
  REQUIRE_THAT(again.out, Catch::Contains("[stream_race]"));
  std::filesystem::remove_all(parent);
}

TEST_CASE(
    "an output (--junit, --sarif, --trace, --report) pointed at an input is refused before the run: the "
    "input "
    "would be replaced",
    "[cli][clobber]") {
  const std::string parent = fresh_dir("clobber");
  const std::string cap = copy_capture("side-stream-race", parent, "cap");
  const std::string rank = cap + "/rank-0.jsonl", before = read_text(rank);
  const std::string yaml = parent + "/s.yaml";
  std::filesystem::copy_file(trace_scenario("reuse-race.yaml"), yaml);
  std::filesystem::create_symlink(yaml, parent + "/link.yaml");
  const std::string yaml_text = read_text(yaml);
  auto refused = [&](const std::string& args, const std::string& says) {
    const auto r = run_shardcheck(args);
    INFO(args << " -> " << r.exit_code << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 2);
    REQUIRE_THAT(r.err, Catch::Contains(says));
    REQUIRE(r.out.empty());
  };
  refused("run " + cap + " --junit " + rank, "it is inside " + cap + ", the capture folder being read");
  refused("run " + cap + " --sarif " + cap + "/new.sarif", "the capture folder being read");
  refused("run " + yaml + " --junit " + yaml, "it is " + yaml + ", an input of this command");
  refused("explore " + yaml + " --sarif " + parent + "/link.yaml", "an input of this command");
  refused("replay " + yaml + " --seed 1 --trace " + parent + "/../" +
              std::filesystem::path(parent).filename().string() + "/s.yaml",
          "an input of this command");
  refused("run " + cap + " --report " + cap, "the capture folder being read");
  refused("run " + yaml + " --report " + parent, "it holds " + yaml + ", an input of this command");
  REQUIRE(read_text(rank) == before);
  REQUIRE(read_text(yaml) == yaml_text);
  std::filesystem::remove_all(parent);
}

TEST_CASE("a name holding U+FFFE or a C0 control leaves JUnit well-formed XML: CI would reject the file",
          "[cli][hostile-names]") {
  const std::string parent = fresh_dir("junit-fffe");
  const std::string dir = copy_capture("side-stream-race", parent, "cap\xEF\xBF\xBE\x01x");
  const auto r = run_shardcheck("run " + sq(dir) + " --runs 1 --junit " + parent + "/j.xml");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  const std::string xml = read_text(parent + "/j.xml");
  REQUIRE(xml.find("\xEF\xBF\xBE") == std::string::npos);
  REQUIRE(xml.find('\x01') == std::string::npos);
  REQUIRE_THAT(xml, Catch::Contains("cap\\ufffe\\x01x"));
  std::filesystem::remove_all(parent);
}

TEST_CASE("one event id near the limit in a tiny capture costs what its one event needs, not gigabytes",
          "[cli][memory]") {
  const std::string dir = fresh_dir("sparse-event");
  std::vector<std::string> records = {R"({"k": "stream", "id": 0, "name": "default"})",
                                      R"({"k": "stream", "id": 1, "name": "side"})",
                                      R"({"k": "site", "id": 0, "file": "p.py", "line": 1, "func": "main"})"};
  for (int i = 0; i < 200; ++i) {
    records.push_back(R"({"k": "event_record", "event": 15999999, "stream": 0, "at": 0})");
    records.push_back(R"({"k": "event_wait", "event": 15999999, "stream": 1, "at": 0})");
  }
  write_capture(dir, records);
  // State sized by the largest id took 1.5 GB (and a minute); dense ids fit a 600 MiB cap easily.
  const auto r = run_command(shardcheck::testing::memory_cap(600) + std::string(SHARDCHECK_BINARY) + " run " +
                             dir + " --runs 4 -j 1");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("clean   shardcheck-sparse-event-"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a captured program whose run ends in an internal error is counted as an error, never as clean",
          "[cli][internal]") {
  const auto r = run_command("SHARDCHECK_TEST_FAULT=internal_error " + std::string(SHARDCHECK_BINARY) +
                             " run " + capture_fixture("megatron-6137-fixed") + " --runs 3");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 3);
  REQUIRE_THAT(r.out, Catch::Contains("ERROR   megatron-6137-fixed: internal error, no verdict"));
  REQUIRE_THAT(r.out, Catch::Contains("1 ended in an error: no verdict"));
  REQUIRE_THAT(r.out, !Catch::Contains("clean"));
}

TEST_CASE("a capture folder name of 250 bytes still gets its report: trace file names are cut and hashed",
          "[cli][hostile-names]") {
  const std::string parent = fresh_dir("long-name"), report = parent + "-report";
  copy_capture("side-stream-race", parent, std::string(250, 'n'));
  copy_capture("side-stream-race", parent, std::string(249, 'n') + "m");
  const auto r = run_shardcheck("run " + parent + "/" + std::string(250, 'n') + " " + parent + "/" +
                                std::string(249, 'n') + "m --runs 1 --report " + report);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  int traces = 0;
  for (const auto& e : std::filesystem::directory_iterator(report)) {
    const std::string n = e.path().filename().string();
    REQUIRE(n.size() < 128);
    traces += n.rfind("trace-", 0) == 0 ? 1 : 0;
  }
  REQUIRE(traces == 2);  // the two long names, cut alike, stay apart by their hashes
  std::filesystem::remove_all(parent);
  std::filesystem::remove_all(report);
}

TEST_CASE(
    "a syntax error is placed at the line it names, not at <torch>:0, and says the program did not start",
    "[cli][capture]") {
  const std::string dir = fresh_dir("syntax-error");
  write_capture(dir,
                {R"({"k": "stream", "id": 0, "name": "default"})",
                 R"({"k": "site", "id": 0, "file": "<torch>", "line": 0, "func": ""})"},
                R"x(, "partial": "raised SyntaxError: invalid syntax (train.py, line 3)", "at": 0)x");
  const auto r = run_shardcheck("run " + dir);
  INFO(r.out << r.err);
  REQUIRE_THAT(r.out, Catch::Contains("raised SyntaxError: invalid syntax (train.py, line 3) at train.py:3: "
                                      "the program did not start"));
  REQUIRE_THAT(r.out, !Catch::Contains("<torch>:0"));
  std::filesystem::remove_all(dir);
}
