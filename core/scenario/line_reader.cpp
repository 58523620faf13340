// Block reads into one buffer that holds at least a whole line: a line that ends inside the
// buffer is handed out in place; one cut by the buffer's end moves to its start first.
#include "core/scenario/line_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shardcheck::core {

namespace {
// Reads go in blocks of this size, so that a file's header costs one small read, not a buffer.
constexpr size_t kReadBytes = size_t{256} << 10;
}  // namespace

LineReader::LineReader(const std::string& path, size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    error_ = std::string("cannot be read: ") + std::strerror(errno);
    return;
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    error_ = std::string("cannot be read: ") + std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    error_ = "is a folder, not a rank file";
  } else if (!S_ISREG(st.st_mode)) {
    error_ = std::string(S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)" : "a device or socket") +
             ", not a regular file; a capture is read from files";
  } else {
    file_bytes_ = static_cast<int64_t>(st.st_size);
  }
}

LineReader::~LineReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool LineReader::fill() {
  if (eof_) return false;
  // Room for a whole line (past the limit by one byte, to see that it is) and one more block.
  if (!buf_) {
    capacity_ = max_line_bytes_ + 1 + kReadBytes;
    buf_ = std::make_unique_for_overwrite<char[]>(capacity_);
  }
  if (pos_ > 0 && capacity_ - len_ < kReadBytes) {
    std::memmove(buf_.get(), buf_.get() + pos_, len_ - pos_);
    len_ -= pos_;
    pos_ = 0;
  }
  for (;;) {
    const ssize_t n = ::read(fd_, buf_.get() + len_, std::min(kReadBytes, capacity_ - len_));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error{number_ + 1, std::string("cannot read the file: ") + std::strerror(errno)};
    len_ += static_cast<size_t>(n);
    eof_ = n == 0;
    return n > 0;
  }
}

bool LineReader::next(std::string_view& line) {
  unterminated_ = false;
  if (!buf_ && !fill()) return false;
  size_t scanned = pos_;  // the pending bytes before it hold no newline
  for (;;) {
    const void* nl = std::memchr(buf_.get() + scanned, '\n', len_ - scanned);
    if (nl) {
      const size_t end = static_cast<size_t>(static_cast<const char*>(nl) - buf_.get());
      if (end - pos_ > max_line_bytes_) break;
      line = std::string_view(buf_.get() + pos_, end - pos_);
      consumed_ += static_cast<int64_t>(end + 1 - pos_);
      pos_ = end + 1;
      ++number_;
      return true;
    }
    if (len_ - pos_ > max_line_bytes_) break;
    const size_t offset = len_ - pos_;  // scanned already: fill() may move the pending bytes
    if (!fill()) {
      if (pos_ == len_) return false;
      unterminated_ = true;
      line = std::string_view(buf_.get() + pos_, len_ - pos_);
      consumed_ += static_cast<int64_t>(len_ - pos_);
      pos_ = len_;
      ++number_;
      return true;
    }
    scanned = pos_ + offset;
  }
  throw Error{number_ + 1, "a line past the limit of " + std::to_string(max_line_bytes_) + " bytes"};
}

}  // namespace shardcheck::core
