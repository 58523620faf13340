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

Status check_output_path(const std::string& path) {
  bool exists = false;
  struct stat st {};
  return check_existing(path, &exists, &st);
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
