// Output paths checked before a command runs, and standard output before and after it.
#include "cli/output_paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "core/base/atomic_file.hpp"
#include "core/base/text.hpp"
#include "reports/report.hpp"

namespace shardcheck::cli {

namespace {

namespace fs = std::filesystem;

// Whether `a` and `b` are one file or folder (false when either does not exist).
bool same(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

// Whether `path`, or a folder above it, is `folder`. `path` need not exist yet.
bool at_or_under(const fs::path& path, const fs::path& folder) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return false;
  for (int depth = 0; depth < 4096; ++depth) {  // a path has fewer components than that
    if (same(p, folder)) return true;
    if (!p.has_relative_path()) return false;
    p = p.parent_path();
  }
  return false;
}

// Why writing the file output `out` would destroy the input `in`, or "".
std::string clobbers_input(const std::string& out, const std::string& in) {
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  // A device or FIFO is streamed into, never replaced.
  if (fs::exists(st) && !fs::is_regular_file(st)) return "";
  if (fs::is_directory(in, ec)) {
    if (at_or_under(out, in)) return "it is inside " + in + ", the capture folder being read";
    return "";
  }
  return same(out, in) ? "it is " + in + ", an input of this command, which writing it would replace" : "";
}

// Why writing the report folder `dir` would destroy the input `in`, or "".
std::string report_clobbers_input(const std::string& dir, const std::string& in) {
  std::error_code ec;
  if (fs::is_directory(in, ec) && at_or_under(dir, in))
    return "it is or is inside " + in + ", the capture folder being read";
  if (at_or_under(in, dir)) return "it holds " + in + ", an input of this command";
  return "";
}

}  // namespace

bool outputs_ok(std::initializer_list<NamedPath> files, const NamedPath& report_folder,
                const std::vector<std::string>& inputs) {
  bool ok = true;
  auto refuse = [&](const char* flag, const std::string& path, const std::string& why) {
    std::cerr << "shardcheck: " << flag << " " << core::printable(path) << ": " << core::printable(why)
              << "\n";
    ok = false;
  };
  for (const auto& [flag, path] : files) {
    if (path.empty()) continue;
    if (core::Status s = core::check_output_path(path); !s) {
      std::cerr << "shardcheck: " << flag << ": " << core::printable(s.message()) << "\n";
      ok = false;
    }
    for (const auto& in : inputs) {
      if (const std::string why = clobbers_input(path, in); !why.empty()) refuse(flag, path, why);
    }
  }
  const auto& [flag, dir] = report_folder;
  if (dir.empty()) return ok;
  if (core::Status s = reports::check_report_folder(dir); !s) {
    std::cerr << "shardcheck: " << flag << ": " << core::printable(s.message()) << "\n";
    ok = false;
  }
  for (const auto& in : inputs) {
    if (const std::string why = report_clobbers_input(dir, in); !why.empty()) refuse(flag, dir, why);
  }
  return ok;
}

bool stdout_writable() {
  struct stat st {};
  if (::fstat(STDOUT_FILENO, &st) != 0 || !S_ISCHR(st.st_mode)) return true;
  if (core::Status s = core::check_device_takes_writes(STDOUT_FILENO, "standard output"); !s) {
    std::cerr << "shardcheck: " << s.message() << "\n";
    return false;
  }
  return true;
}

bool stdout_flushed() {
  std::cout.flush();
  const bool failed = !std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (failed) {
    const int err = errno;
    std::cerr << "shardcheck: cannot write standard output"
              << (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) << "\n";
  }
  return !failed;
}

}  // namespace shardcheck::cli
