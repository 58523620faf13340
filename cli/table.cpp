// Tables and durations for the terminal: column widths fitted to the output's width, long
// cells wrapped at spaces or cut with "…".
#include "cli/table.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

namespace shardcheck::cli {

namespace {

constexpr int kGap = 2;        // spaces between columns
constexpr int kMinWidth = 40;  // a terminal narrower than this is treated as this wide

bool continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

int chars(const std::string& s) {
  int n = 0;
  for (const char c : s) n += continuation(c) ? 0 : 1;
  return n;
}

// The byte offset after the first `n` characters of `s` (its size when it has fewer).
size_t prefix_bytes(const std::string& s, int n) {
  size_t i = 0;
  for (int count = 0; i < s.size(); ++i) {
    if (continuation(s[i])) continue;
    if (count == n) return i;
    ++count;
  }
  return s.size();
}

std::string cut(const std::string& s, int width) {
  if (chars(s) <= width) return s;
  if (width <= 1) return width == 1 ? "…" : "";
  return s.substr(0, prefix_bytes(s, width - 1)) + "…";
}

std::string pad(const std::string& s, int width, bool right) {
  const int n = std::max(0, width - chars(s));
  return right ? std::string(static_cast<size_t>(n), ' ') + s : s + std::string(static_cast<size_t>(n), ' ');
}

}  // namespace

int output_width() {
  if (!::isatty(STDOUT_FILENO)) return kPipeWidth;
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return kPipeWidth;
  return std::max<int>(ws.ws_col, kMinWidth);
}

std::string duration_text(double seconds) {
  char buf[48];
  if (!(seconds >= 0) || std::isinf(seconds)) return "? s";
  if (seconds < 0.00005) {
    std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  } else if (seconds < 0.9995) {
    const double ms = seconds * 1e3;
    std::snprintf(buf, sizeof buf, ms < 99.95 ? "%.1f ms" : "%.0f ms", ms);
  } else if (seconds < 59.95) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else {
    const long long whole = std::llround(seconds);
    std::snprintf(buf, sizeof buf, "%lld min %lld s", whole / 60, whole % 60);
  }
  return buf;
}

std::vector<std::string> wrap_text(const std::string& text, int width) {
  width = std::max(width, 1);
  std::vector<std::string> lines;
  std::string line;
  size_t i = 0;
  while (i < text.size()) {
    const size_t space = text.find(' ', i);
    std::string word = text.substr(i, space == std::string::npos ? std::string::npos : space - i);
    i = space == std::string::npos ? text.size() : space + 1;
    if (word.empty()) continue;
    const int room = line.empty() ? width : width - chars(line) - 1;
    if (chars(word) <= room) {
      line += (line.empty() ? "" : " ") + word;
      continue;
    }
    if (!line.empty()) lines.push_back(std::move(line));
    line.clear();
    while (chars(word) > width) {  // a word wider than the column: cut it into pieces
      const size_t b = prefix_bytes(word, width);
      lines.push_back(word.substr(0, b));
      word.erase(0, b);
    }
    line = std::move(word);
  }
  if (!line.empty() || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {
  for (const auto& c : columns_) has_header_ = has_header_ || !c.header.empty();
}

void Table::add(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::vector<int> Table::widths(int width) const {
  std::vector<int> w(columns_.size(), 0);
  for (size_t c = 0; c < columns_.size(); ++c) {
    w[c] = chars(columns_[c].header);
    for (const auto& row : rows_) w[c] = std::max(w[c], chars(row[c]));
  }
  int total = kGap * static_cast<int>(std::max<size_t>(columns_.size(), 1) - 1);
  for (const int x : w) total += x;
  // Narrow one character at a time: the widest kWrap or kCut column of the lowest order that
  // is above its minimum. Bounded by the sum of the widths.
  std::vector<int> orders;
  for (const auto& c : columns_) orders.push_back(c.order);
  std::sort(orders.begin(), orders.end());
  orders.erase(std::unique(orders.begin(), orders.end()), orders.end());
  for (const int order : orders) {
    while (total > width) {
      int pick = -1;
      for (size_t c = 0; c < columns_.size(); ++c) {
        const Column& col = columns_[c];
        const int floor = std::max(col.min_width, chars(col.header));
        if (col.order == order && (col.fit == kWrap || col.fit == kCut) && w[c] > floor &&
            (pick < 0 || w[c] > w[static_cast<size_t>(pick)]))
          pick = static_cast<int>(c);
      }
      if (pick < 0) break;
      --w[static_cast<size_t>(pick)];
      --total;
    }
  }
  return w;
}

void Table::print(std::ostream& out, int width) const {
  const std::vector<int> w = widths(width);
  auto emit = [&](const std::vector<std::string>& cells) {
    std::vector<std::vector<std::string>> parts(columns_.size());
    size_t lines = 1;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const Fit fit = columns_[c].fit;
      parts[c] = fit == kWrap ? wrap_text(cells[c], w[c])
                              : std::vector<std::string>{fit == kCut ? cut(cells[c], w[c]) : cells[c]};
      lines = std::max(lines, parts[c].size());
    }
    for (size_t l = 0; l < lines; ++l) {
      std::string line;
      for (size_t c = 0; c < columns_.size(); ++c) {
        const std::string& part = l < parts[c].size() ? parts[c][l] : std::string();
        if (c > 0) line += std::string(kGap, ' ');
        line += pad(part, w[c], columns_[c].fit == kRight);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out << line << "\n";
    }
  };
  if (has_header_) {
    std::vector<std::string> header;
    for (const auto& c : columns_) header.push_back(c.header);
    emit(header);
  }
  for (const auto& row : rows_) emit(row);
}

}  // namespace shardcheck::cli
