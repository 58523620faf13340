// Output paths checked before a command runs, and standard output before and after it.
#include "cli/output_paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "core/base/atomic_file.hpp"
#include "core/base/text.hpp"
#include "reports/report.hpp"

namespace shardcheck::cli {

bool outputs_ok(std::initializer_list<NamedPath> files, const NamedPath& report_folder) {
  bool ok = true;
  auto refuse = [&](const char* flag, const core::Status& s) {
    std::cerr << "shardcheck: " << flag << ": " << core::printable(s.message()) << "\n";
    ok = false;
  };
  for (const auto& [flag, path] : files) {
    if (path.empty()) continue;
    if (core::Status s = core::check_output_path(path); !s) refuse(flag, s);
  }
  if (!report_folder.second.empty()) {
    if (core::Status s = reports::check_report_folder(report_folder.second); !s)
      refuse(report_folder.first, s);
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
