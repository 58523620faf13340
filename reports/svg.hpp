// A small hand-written SVG builder for the HTML report's pictures. Every text and attribute
// it writes is escaped; styling comes from CSS classes defined once in the page.
//   Svg svg("f0-1", 400, 120);
//   svg.rect(10, 10, 80, 20, "slice");  svg.text(12, 24, "kernel 'fwd'", "slice-label");
//   page += svg.finish("finding-picture", "stream_race", "timeline of the race");
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardcheck::reports {

enum class Anchor { start, middle, end };
enum class Arrow { none, plain, red };

struct Point {
  double x = 0;
  double y = 0;
};

// Approximate advance of one character of the pictures' 12px text, for layout and truncation.
inline constexpr double kCharPx = 7.0;

class Svg {
 public:
  // `id` prefixes the arrow-marker ids, which must be unique in the page.
  Svg(std::string id, double width, double height);

  void rect(double x, double y, double w, double h, std::string_view cls, std::string_view tooltip = {});
  void line(double x1, double y1, double x2, double y2, std::string_view cls, Arrow arrow = Arrow::none);
  void path(std::string_view d, std::string_view cls, Arrow arrow = Arrow::none);
  void polyline(const std::vector<Point>& points, std::string_view cls);
  void circle(double cx, double cy, double r, std::string_view cls, std::string_view tooltip = {});
  void text(double x, double y, std::string_view s, std::string_view cls = {}, Anchor anchor = Anchor::start);
  // Lines one below the other, the first with its baseline at y.
  void lines(double x, double y, const std::vector<std::string>& texts, std::string_view cls = {},
             Anchor anchor = Anchor::start, double line_px = 15);

  void resize(double width, double height);
  double width() const { return width_; }
  double height() const { return height_; }

  // The finished <svg> element, with its class, data-kind and an accessible title.
  std::string finish(std::string_view svg_class, std::string_view data_kind, std::string_view title) const;

 private:
  std::string marker(Arrow arrow) const;
  std::string id_;
  double width_;
  double height_;
  std::string body_;
};

// Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi], at most about
// `max_ticks` of them.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);
// A coordinate as SVG wants it: at most one decimal.
std::string coord(double v);
// `s` wrapped at spaces into lines of at most `chars` characters; at most `max_lines` lines,
// the last one cut with "…" when the text goes on.
std::vector<std::string> wrap(std::string_view s, size_t chars, size_t max_lines);

}  // namespace shardcheck::reports
