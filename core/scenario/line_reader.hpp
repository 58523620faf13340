// The lines of one regular file, read in large blocks and handed out as views into the reader's
// own buffer (no copy per line), numbered for messages. A FIFO, device or folder is refused
// when opened (a FIFO would block forever, /dev/zero would never end), and a line is refused as
// soon as it passes `max_line_bytes`, so memory stays bounded by that limit.
//   LineReader lines(path, 1 << 20);
//   if (!lines.ok()) fail(lines.error());
//   std::string_view line;
//   while (lines.next(line)) use(lines.number(), line);   // valid until the next call
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace shardcheck::core {

class LineReader {
 public:
  // What next() throws: a line past the limit, or a read that failed; `line` is its number.
  struct Error {
    int64_t line;
    std::string what;
  };

  LineReader(const std::string& path, size_t max_line_bytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // The file's size when it was opened (a hint for reserving memory; it may still grow).
  int64_t file_bytes() const { return file_bytes_; }
  // The bytes handed out so far, newlines included.
  int64_t bytes_read() const { return consumed_; }
  // Whether the last line next() gave ended the file without its newline: a line cut while it
  // was written.
  bool unterminated() const { return unterminated_; }
  // The next line without its newline; false at the end of the file. Throws Error.
  bool next(std::string_view& line);
  int64_t number() const { return number_; }

 private:
  bool fill();  // reads more after the pending bytes; false at the end of the file

  int fd_ = -1;
  std::string error_;
  size_t max_line_bytes_;
  size_t capacity_ = 0;
  std::unique_ptr<char[]> buf_;
  size_t pos_ = 0, len_ = 0;  // the pending bytes are buf_[pos_, len_)
  int64_t number_ = 0;
  int64_t consumed_ = 0;
  int64_t file_bytes_ = 0;
  bool unterminated_ = false;
  bool eof_ = false;
};

}  // namespace shardcheck::core
