// Atomic file writes with POSIX write/fsync/rename, and streamed writes where the path is not
// a regular file: a device, a FIFO or /dev/stdout is written to as such, never renamed over.
#include "core/base/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace shardcheck::core {
namespace {

// Writes all of `content` to `fd`; on failure returns the errno text.
Status write_all(int fd, std::string_view content, const std::string& shown) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write ", shown, ": ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return {};
}

// The path a write lands on: a symlink is followed (to its target, existing or not), so the
// link stays and its target gets the content.
std::string resolve_links(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    if (!std::filesystem::is_symlink(std::filesystem::symlink_status(p, ec))) break;
    std::filesystem::path target = std::filesystem::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return p.string();
}

// Streams into an existing path that is not a regular file (character device, FIFO, socket
// path opened through /dev/fd): no temporary file, no rename, no truncation of the node.
Status write_stream(const std::string& path, std::string_view content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fail("cannot write ", path, ": ", std::strerror(errno));
  Status s = write_all(fd, content, path);
  if (::close(fd) != 0 && s.ok()) return fail("cannot write ", path, ": ", std::strerror(errno));
  return s;
}

// What `path` names now (stat follows links); refuses what can never take a file.
Status check_existing(const std::string& path, bool* exists, struct stat* st) {
  *exists = ::stat(path.c_str(), st) == 0;
  if (*exists && S_ISDIR(st->st_mode)) return fail("cannot write ", path, ": it is a folder");
  if (*exists && S_ISBLK(st->st_mode)) return fail("cannot write ", path, ": it is a block device");
  return {};
}

}  // namespace

Status check_device_takes_writes(int fd, const std::string& shown) {
  // A device tells a write error only when written to: an empty write asks it (/dev/full
  // says ENOSPC) without sending it anything.
  if (::write(fd, "", 0) < 0 && errno != EAGAIN)
    return fail("cannot write ", shown, ": ", std::strerror(errno));
  return {};
}

Status check_output_path(const std::string& path) {
  bool exists = false;
  struct stat st {};
  if (Status s = check_existing(path, &exists, &st); !s.ok()) return s;
  if (exists && S_ISCHR(st.st_mode)) {
    // Non-blocking, so a terminal or a device no one serves does not hold the command here.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return fail("cannot write ", path, ": ", std::strerror(errno));
    Status s = check_device_takes_writes(fd, path);
    ::close(fd);
    return s;
  }
  if (exists) return {};  // a file (replaced) or a FIFO (streamed into when the output is ready)
  // A new file: its folder must exist, so a typo in it is refused now, not after the run.
  const std::filesystem::path parent = std::filesystem::path(resolve_links(path)).parent_path();
  struct stat ps {};
  const std::string folder = parent.empty() ? "." : parent.string();
  if (::stat(folder.c_str(), &ps) != 0)
    return fail("cannot write ", path, ": folder ", folder, " does not exist");
  if (!S_ISDIR(ps.st_mode)) return fail("cannot write ", path, ": ", folder, " is not a folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return fail("cannot write ", path, ": folder ", folder, ": ", std::strerror(errno));
  return {};
}

Status write_file_atomic(const std::string& path, std::string_view content) {
  bool exists = false;
  struct stat st {};
  if (Status s = check_existing(path, &exists, &st); !s.ok()) return s;
  const std::string target = resolve_links(path);
  if (exists && !S_ISREG(st.st_mode)) return write_stream(target, content);
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return fail("cannot write ", path, ": ", std::strerror(errno));
  if (Status s = write_all(fd, content, path); !s.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return fail("cannot flush ", path, ": ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail("cannot write ", path, ": ", why);
  }
  return {};
}

Status make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return fail("cannot create folder ", path, ": ", ec.message());
  return {};
}

}  // namespace shardcheck::core
