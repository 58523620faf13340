// Writes a report folder: report.md, report.html, report.json and a Chrome trace per finding
// that has a timeline, each file atomically so a reader never sees half of one. The folder is
// written under an exclusive lock on it, so two runs into one folder take turns and the folder
// holds one run's files; trace files of an earlier report that this one does not name are
// removed, so a reused folder never keeps a stale trace.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "core/base/atomic_file.hpp"
#include "reports/chrome_trace.hpp"
#include "reports/report.hpp"

namespace shardcheck::reports {

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

// flock on the folder itself: held until destroyed, released by the kernel if the process dies.
class FolderLock {
 public:
  explicit FolderLock(const std::string& dir) : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FolderLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_;
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

core::Status write_report(const Report& r, const std::string& dir) {
  if (core::Status s = core::make_dirs(dir); !s) return s;
  const FolderLock lock(dir);
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
  // Traces an earlier report named and this one does not.
  std::set<std::string> current;
  for (const auto& names : traces) current.insert(names.begin(), names.end());
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_trace_file(name) && !current.count(name)) std::filesystem::remove(e.path(), ec);
  }
  return first;
}

}  // namespace shardcheck::reports
