// Terminal text the commands share: tables whose long cells wrap or are cut to the output's
// width, and durations rounded for people. The width is the terminal's when stdout is one, and
// a fixed kPipeWidth otherwise, so output into a pipe or a file never depends on the machine.
//   Table t({{"scenario"}, {"found", Table::kWrap}, {"time", Table::kRight}});
//   t.add({"reuse-race", "stream_race", duration_text(0.0007)});
//   t.print(std::cout, output_width());       // "in 0.7 ms", wrapped under "found" if too long
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace shardcheck::cli {

// Characters per line when stdout is not a terminal.
inline constexpr int kPipeWidth = 120;

// The columns of stdout's terminal, or kPipeWidth when stdout is not a terminal.
int output_width();

// "0.7 ms", "12.3 ms", "21.4 s", "3 min 5 s": three significant figures at most.
std::string duration_text(double seconds);

class Table {
 public:
  // How a column meets a line that is too narrow for its longest cell: kWrap breaks a cell
  // into lines at spaces (a word longer than the column is cut into pieces), kCut ends it
  // with "…". kKeep columns are never narrowed. kRight aligns right and is kept.
  enum Fit { kKeep, kWrap, kCut, kRight };
  struct Column {
    std::string header;
    Fit fit = kKeep;
    int min_width = 12;  // a kWrap or kCut column is never narrowed below this
    int order = 0;       // columns of a lower order are narrowed first
  };

  explicit Table(std::vector<Column> columns);
  void add(std::vector<std::string> cells);
  // Columns two spaces apart, each line at most `width` characters where the columns'
  // minimum widths allow; a header line when any column has a header. No trailing spaces.
  void print(std::ostream& out, int width) const;
  // The column widths print() uses for `width`: natural widths, narrowed (the lowest `order`
  // first, the widest column of it first) until the line fits or every kWrap and kCut column
  // is at its minimum.
  std::vector<int> widths(int width) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
  bool has_header_ = false;
};

// `text` broken into lines of at most `width` characters at spaces; a longer word is cut.
std::vector<std::string> wrap_text(const std::string& text, int width);

}  // namespace shardcheck::cli
