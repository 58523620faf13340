// Writes a report folder: report.md, report.html, report.json and a Chrome trace per finding
// that has a timeline. The whole folder is written beside the old one and swapped in with one
// rename, so a reader sees one run's files and nothing an earlier report left; two runs into
// one folder take turns under an exclusive lock on it.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/base/atomic_file.hpp"
#include "reports/chrome_trace.hpp"
#include "reports/report.hpp"

namespace shardcheck::reports {

namespace fs = std::filesystem;

namespace {
// File names stay portable and inside the folder whatever a scenario is called.
std::string file_safe(const std::string& name) {
  std::string out;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() || out[0] == '.' ? "_" + out : out;
}

// flock on the folder that `dir` names when the lock is taken. A writer swaps a new folder in
// under that name, so a waiter may wake holding the lock of the folder swapped out: it checks
// that `dir` still names the folder it locked, and locks again if not. Held until destroyed,
// released by the kernel if the process dies.
class FolderLock {
 public:
  explicit FolderLock(const std::string& dir) {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd_ < 0) return;  // the write that follows reports why
      ::flock(fd_, LOCK_EX);
      struct stat locked {
      }, named{};
      if (::fstat(fd_, &locked) == 0 && ::stat(dir.c_str(), &named) == 0 && locked.st_ino == named.st_ino &&
          locked.st_dev == named.st_dev)
        return;
      ::close(fd_);
      fd_ = -1;
      if (core::Status s = core::make_dirs(dir); !s) return;  // removed meanwhile: create it again
    }
  }
  ~FolderLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

// A trace file as write_report names them: trace-NAME-F.json.
bool is_trace_file(const std::string& name) {
  return name.size() > 11 && name.rfind("trace-", 0) == 0 && name.substr(name.size() - 5) == ".json";
}
}  // namespace

std::vector<std::vector<std::string>> trace_file_names(const Report& r) {
  std::vector<std::vector<std::string>> names(r.scenarios.size());
  std::set<std::string> used;  // two scenarios of one name must not overwrite each other's traces
  for (size_t i = 0; i < r.scenarios.size(); ++i) {
    const ScenarioResult& s = r.scenarios[i];
    std::string base = file_safe(s.name);
    while (!used.insert(base).second) base += "_" + std::to_string(i);  // ends: each pass lengthens it
    names[i].resize(s.findings.size());
    for (size_t f = 0; f < s.findings.size() && f < s.finding_traces.size(); ++f) {
      if (!s.finding_traces[f].slices.empty())
        names[i][f] = "trace-" + base + "-" + std::to_string(f) + ".json";
    }
  }
  return names;
}

namespace {

bool is_report_file(const std::string& name) {
  return name == "report.md" || name == "report.html" || name == "report.json" || is_trace_file(name) ||
         name.find(".tmp.") != std::string::npos;  // an atomic write's temporary, left by a killed writer
}

// Writes every file of the report into `dir`, each atomically; the first error.
core::Status write_files(const Report& r, const std::string& dir) {
  core::Status first;
  auto write = [&](const std::string& name, const std::string& text) {
    core::Status s = core::write_file_atomic(dir + "/" + name, text);
    if (!s && first) first = s;
  };
  // The traces first: the pages name them, so a reader who finds the pages finds the traces.
  const auto traces = trace_file_names(r);
  for (size_t i = 0; i < r.scenarios.size(); ++i) {
    const ScenarioResult& s = r.scenarios[i];
    for (size_t f = 0; f < traces[i].size(); ++f) {
      if (!traces[i][f].empty()) write(traces[i][f], chrome_trace(s.finding_traces[f], {s.findings[f]}));
    }
  }
  write("report.md", to_markdown(r));
  write("report.html", to_html(r));
  write("report.json", to_json(r));
  return first;
}

// Carries what is not a report file from the old folder into the new one: regular files as
// hard links (the old folder keeps them until it is swapped out), anything else moved.
// Returns the moved entries, to move back if the swap fails.
std::vector<std::pair<fs::path, fs::path>> carry_over(const fs::path& from, const fs::path& to,
                                                      core::Status& status) {
  std::vector<std::pair<fs::path, fs::path>> moved;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(from, ec)) {
    const fs::path name = e.path().filename();
    if (is_report_file(name.string())) continue;
    std::error_code one;
    if (e.is_regular_file(one) && !e.is_symlink(one)) {
      fs::create_hard_link(e.path(), to / name, one);
      if (!one) continue;
    }
    fs::rename(e.path(), to / name, one);
    if (one) {
      if (status)
        status = core::fail("cannot keep ", e.path().string(), " in the new report folder: ", one.message());
      continue;
    }
    moved.emplace_back(to / name, e.path());
  }
  return moved;
}
}  // namespace

// The folder is one unit: the report is written whole into a sibling folder, which is then
// swapped in for the old one in one rename (renameat2 RENAME_EXCHANGE), so a reader that opens
// the folder sees one run's files, never a mix, and nothing of an earlier report survives.
// Files in the folder that are not report files are carried over. Writers take turns under
// the folder's lock.
core::Status write_report(const Report& r, const std::string& dir_arg) {
  if (core::Status s = core::make_dirs(dir_arg); !s) return s;
  std::error_code ec;
  // Through a symlink to the folder it names: the swap replaces that folder, not the link.
  const fs::path dir = fs::canonical(dir_arg, ec);
  if (ec) return core::fail("cannot open folder ", dir_arg, ": ", ec.message());
  const FolderLock lock(dir.string());
  const fs::path parent = dir.parent_path();
  const std::string prefix = "." + dir.filename().string() + ".tmp.";
  // Under the lock no other writer of this folder is at work: a sibling of this name is what a
  // killed writer left.
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(e.path(), ec);
  }
  static std::atomic<int> writes{0};  // threads of one process get names of their own
  const fs::path fresh = parent / (prefix + std::to_string(::getpid()) + "." + std::to_string(writes++));
  fs::create_directory(fresh, ec);
  if (ec) return core::fail("cannot create folder ", fresh.string(), ": ", ec.message());
  core::Status first = write_files(r, fresh.string());
  const auto moved = carry_over(dir, fresh, first);
  if (!first) {
    for (const auto& [now, was] : moved) fs::rename(now, was, ec);
    fs::remove_all(fresh, ec);
    return first;
  }
  if (::syscall(SYS_renameat2, AT_FDCWD, fresh.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    const std::string why = std::strerror(errno);
    for (const auto& [now, was] : moved) fs::rename(now, was, ec);
    fs::remove_all(fresh, ec);
    return core::fail("cannot swap the new report folder in for ", dir.string(), ": ", why);
  }
  fs::remove_all(fresh, ec);  // the old folder, swapped out
  return {};
}

}  // namespace shardcheck::reports
