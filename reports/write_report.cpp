// Writes a report folder: report.md, report.html, report.json and a Chrome trace per finding
// that has a timeline. The whole folder is written beside the old one and swapped in with one
// rename, so a reader sees one run's files and nothing an earlier report left; two runs into
// one folder take turns under an exclusive lock on it. A folder is a report folder only when
// it is new, empty, or marked by an earlier report: nothing else is ever written, moved or
// removed, and a user's files in a report folder are linked into the new one, never moved.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/base/atomic_file.hpp"
#include "reports/chrome_trace.hpp"
#include "reports/report.hpp"

namespace shardcheck::reports {

namespace fs = std::filesystem;

namespace {
// File names stay portable and inside the folder whatever a scenario is called, and short:
// a name past kMaxBaseBytes keeps its start and ends in a hash of the whole, so the trace
// file's name stays far below the 255 bytes a file system allows, and two long names that
// share a start still differ.
constexpr size_t kMaxBaseBytes = 96;

std::string file_safe(const std::string& name) {
  std::string out;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    out += ok ? c : '_';
  }
  if (out.size() > kMaxBaseBytes) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the name as given
    for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(h));
    out = out.substr(0, kMaxBaseBytes - 17) + "-" + hash;
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

// The mark a report leaves in its folder: what makes a folder one shardcheck may replace.
constexpr const char* kMark = ".shardcheck-report";
constexpr const char* kMarkText =
    "This folder is a shardcheck report. Each report run into it replaces report.md, report.html,\n"
    "report.json and the trace-*.json files; other files in it are kept.\n";

bool is_report_file(const std::string& name) {
  return name == kMark || name == "report.md" || name == "report.html" || name == "report.json" ||
         is_trace_file(name) ||
         name.find(".tmp.") != std::string::npos;  // an atomic write's temporary, left by a killed writer
}

// What an existing folder holds, as far as a report is concerned.
struct Contents {
  bool marked = false;
  size_t report_files = 0;
  std::vector<std::string> own;     // the user's files and symlinks: kept
  std::vector<std::string> others;  // folders, devices, sockets: a report cannot keep them
};

Contents contents_of(const fs::path& dir, std::error_code& ec) {
  Contents c;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code one;
    const fs::file_status st = e.symlink_status(one);
    if (name == kMark) c.marked = true;
    if (is_report_file(name) && fs::is_regular_file(st)) {
      ++c.report_files;
    } else if (fs::is_regular_file(st) || fs::is_symlink(st)) {
      c.own.push_back(name);
    } else {
      c.others.push_back(name);
    }
  }
  return c;
}

std::string first_names(const std::vector<std::string>& names) {
  std::string out = "'" + names.front() + "'";
  if (names.size() > 1) out += " and " + std::to_string(names.size() - 1) + " more";
  return out;
}

// Whether `dir` is, or holds, this process's working folder: swapping it out would leave the
// shell that started the command in a removed folder.
bool holds_working_folder(const fs::path& dir) {
  std::error_code ec;
  const fs::path cwd = fs::canonical(fs::current_path(ec), ec);
  if (ec) return false;
  const fs::path rel = cwd.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

// A folder on a file system of its own (a mount point, a container's volume) cannot be swapped
// by a rename in its parent.
bool is_mount_point(const fs::path& dir) {
  struct stat d {
  }, p{};
  return ::stat(dir.c_str(), &d) == 0 && ::stat(dir.parent_path().c_str(), &p) == 0 && d.st_dev != p.st_dev;
}

// Removes a folder a report wrote (a swapped-out report, or a killed writer's new one) without
// recursing: its files and links go, the mark last, so a folder killed midway is still known
// as a report's; a folder someone put in it stays, and so does it.
void remove_report_folder(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code one;
    if (!fs::is_directory(e.symlink_status(one)) && e.path().filename() != kMark) files.push_back(e.path());
  }
  for (const auto& f : files) fs::remove(f, ec);
  fs::remove(dir / kMark, ec);
  fs::remove(dir, ec);  // fails, harmlessly, when something is left
}

// A sibling `.NAME.tmp.PID.N` that a killed writer left: it holds the mark, which the writer
// puts in first, or nothing but a report's files (killed before the mark was in).
bool is_stranded_write(const fs::directory_entry& e, const std::string& prefix) {
  const std::string name = e.path().filename().string();
  if (name.rfind(prefix, 0) != 0) return false;
  const std::string tail = name.substr(prefix.size());
  if (tail.empty() || tail.find_first_not_of("0123456789.") != std::string::npos) return false;
  std::error_code ec;
  if (!fs::is_directory(e.symlink_status(ec))) return false;
  const Contents c = contents_of(e.path(), ec);
  return !ec && (c.marked || (c.own.empty() && c.others.empty()));
}

// Writes the mark and every file of the report into `dir`, each atomically; the first error.
core::Status write_files(const Report& r, const std::string& dir, std::set<std::string>* written) {
  core::Status first;
  auto write = [&](const std::string& name, const std::string& text) {
    core::Status s = core::write_file_atomic(dir + "/" + name, text);
    if (!s && first) first = s;
    written->insert(name);
  };
  write(kMark, kMarkText);  // first: a folder a killed writer leaves is known as its own
  // The traces next: the pages name them, so a reader who finds the pages finds the traces.
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

// Keeps the user's files of the old folder in the new one without moving them: a file as a
// hard link (a copy where the file system refuses one), a symlink as a new link to the same
// target. Killed at any point, the old folder still holds every one of them.
core::Status keep_own_files(const fs::path& from, const fs::path& to, const std::vector<std::string>& own) {
  for (const auto& name : own) {
    std::error_code ec;
    const fs::path was = from / name, now = to / name;
    if (fs::is_symlink(fs::symlink_status(was, ec))) {
      fs::create_symlink(fs::read_symlink(was, ec), now, ec);
    } else {
      fs::create_hard_link(was, now, ec);
      if (ec) {
        ec.clear();
        fs::copy_file(was, now, ec);
      }
    }
    if (ec) return core::fail("cannot keep ", was.string(), " in the new report folder: ", ec.message());
  }
  return {};
}

// Where the folder cannot be swapped: each file written in place, then the earlier report's
// traces and temporaries removed. A reader may meet two runs' files for a moment.
core::Status write_in_place(const Report& r, const fs::path& dir) {
  std::set<std::string> written;
  core::Status first = write_files(r, dir.string(), &written);
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code one;
    if (is_report_file(name) && !written.count(name) && fs::is_regular_file(e.symlink_status(one)))
      stale.push_back(e.path());
  }
  for (const auto& p : stale) fs::remove(p, ec);
  return first;
}

core::Status swap_in(const Report& r, const fs::path& dir, const std::vector<std::string>& own) {
  std::error_code ec;
  const fs::path parent = dir.parent_path();
  const std::string prefix = "." + dir.filename().string() + ".tmp.";
  // Under the lock no other writer of this folder is at work: a marked sibling of this name
  // is what a killed writer left.
  std::vector<fs::path> stranded;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    if (is_stranded_write(e, prefix)) stranded.push_back(e.path());
  }
  for (const auto& p : stranded) remove_report_folder(p);
  static std::atomic<int> writes{0};  // threads of one process get names of their own
  const fs::path fresh = parent / (prefix + std::to_string(::getpid()) + "." + std::to_string(writes++));
  fs::create_directory(fresh, ec);
  if (ec) return core::fail("cannot create folder ", fresh.string(), ": ", ec.message());
  std::set<std::string> written;
  core::Status first = write_files(r, fresh.string(), &written);
  if (first) first = keep_own_files(dir, fresh, own);
  if (!first) {
    remove_report_folder(fresh);
    return first;
  }
  if (::syscall(SYS_renameat2, AT_FDCWD, fresh.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    const std::string why = std::strerror(errno);
    remove_report_folder(fresh);
    return core::fail("cannot swap the new report folder in for ", dir.string(), ": ", why);
  }
  remove_report_folder(fresh);  // the old folder, swapped out
  return {};
}
}  // namespace

namespace {
// check_report_folder, handing back what an existing folder holds (empty for a new one).
core::Status check_folder(const std::string& dir_arg, Contents* contents) {
  std::error_code ec;
  const fs::path dir = dir_arg.empty() ? fs::path(".") : fs::path(dir_arg);
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) {
    // A new folder: what exists of its path must be folders.
    for (fs::path up = fs::absolute(dir, ec).parent_path(); !up.empty(); up = up.parent_path()) {
      const fs::file_status ust = fs::status(up, ec);
      if (!fs::exists(ust)) continue;
      if (!fs::is_directory(ust))
        return core::fail("cannot create report folder ", dir_arg, ": ", up.string(), " is not a folder");
      if (::access(up.c_str(), W_OK | X_OK) != 0)
        return core::fail("cannot create report folder ", dir_arg, " in ", up.string(), ": ",
                          std::strerror(errno));
      break;
    }
    return {};
  }
  if (!fs::is_directory(st)) return core::fail("report folder ", dir_arg, " is a file, not a folder");
  const Contents& c = *contents = contents_of(dir, ec);
  if (ec) return core::fail("cannot read report folder ", dir_arg, ": ", ec.message());
  const bool empty = c.report_files == 0 && c.own.empty() && c.others.empty();
  // A folder an earlier version wrote holds report files and nothing else.
  const bool ours = c.marked || (c.report_files > 0 && c.own.empty() && c.others.empty());
  if (!empty && !ours) {
    std::vector<std::string> names = c.own;
    names.insert(names.end(), c.others.begin(), c.others.end());
    return core::fail("report folder ", dir_arg, " holds files no report of shardcheck's wrote (",
                      first_names(names),
                      "); a report goes into a new or empty folder, or one an earlier report made: name "
                      "another, such as ",
                      (dir / "report").lexically_normal().string());
  }
  if (!c.others.empty())
    return core::fail("report folder ", dir_arg, " holds ", first_names(c.others),
                      ", which a report keeps only as files or links: a report replaces the whole folder, "
                      "and never moves what is in it; move it out, or name another folder");
  return {};
}
}  // namespace

core::Status check_report_folder(const std::string& dir) {
  Contents unused;
  return check_folder(dir, &unused);
}

// The folder is one unit: the report is written whole into a sibling folder, which is then
// swapped in for the old one in one rename (renameat2 RENAME_EXCHANGE), so a reader that opens
// the folder sees one run's files, never a mix, and nothing of an earlier report survives.
// The user's files in the folder are kept. Writers take turns under the folder's lock.
core::Status write_report(const Report& r, const std::string& dir_arg) {
  if (core::Status s = check_report_folder(dir_arg); !s) return s;
  if (core::Status s = core::make_dirs(dir_arg); !s) return s;
  std::error_code ec;
  // Through a symlink to the folder it names: the swap replaces that folder, not the link.
  const fs::path dir = fs::canonical(dir_arg, ec);
  if (ec) return core::fail("cannot open folder ", dir_arg, ": ", ec.message());
  const FolderLock lock(dir.string());
  // Checked again under the lock: what another writer or the user did meanwhile counts.
  Contents c;
  if (core::Status s = check_folder(dir.string(), &c); !s) return s;
  if (dir == dir.root_path() || is_mount_point(dir) || holds_working_folder(dir))
    return write_in_place(r, dir);
  return swap_in(r, dir, c.own);
}

}  // namespace shardcheck::reports
