// SVG string building: elements, escaping, arrow markers and text wrapping.
#include "reports/svg.hpp"

#include <cmath>
#include <cstdio>
#include <utility>

#include "reports/format.hpp"

namespace shardcheck::reports {

namespace {
std::string attr(std::string_view name, std::string_view value) {
  return " " + std::string(name) + "=\"" + html_escape(value) + "\"";
}

std::string tooltip_element(std::string_view tooltip) {
  return tooltip.empty() ? "" : "<title>" + html_escape(tooltip) + "</title>";
}

std::string_view anchor_name(Anchor a) {
  switch (a) {
    case Anchor::start:
      return "start";
    case Anchor::middle:
      return "middle";
    case Anchor::end:
      return "end";
  }
  return "start";
}

std::string marker_def(const std::string& id, std::string_view fill) {
  return "<marker id=\"" + id +
         "\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
         "orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"" +
         std::string(fill) + "\"/></marker>";
}
}  // namespace

std::string coord(double v) {
  if (!std::isfinite(v)) v = 0;  // a picture with a misplaced mark beats an unparsable one
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  std::string s = buf;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s == "-0" ? "0" : s;
}

Svg::Svg(std::string id, double width, double height) : id_(std::move(id)), width_(width), height_(height) {}

void Svg::resize(double width, double height) {
  width_ = width;
  height_ = height;
}

std::string Svg::marker(Arrow arrow) const {
  switch (arrow) {
    case Arrow::none:
      return "";
    case Arrow::plain:
      return " marker-end=\"url(#" + id_ + "-arrow)\"";
    case Arrow::red:
      return " marker-end=\"url(#" + id_ + "-arrow-red)\"";
  }
  return "";
}

void Svg::rect(double x, double y, double w, double h, std::string_view cls, std::string_view tooltip) {
  body_ += "<rect x=\"" + coord(x) + "\" y=\"" + coord(y) + "\" width=\"" + coord(std::max(w, 0.0)) +
           "\" height=\"" + coord(std::max(h, 0.0)) + "\"" + attr("class", cls) + ">" +
           tooltip_element(tooltip) + "</rect>";
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view cls, Arrow arrow) {
  body_ += "<line x1=\"" + coord(x1) + "\" y1=\"" + coord(y1) + "\" x2=\"" + coord(x2) + "\" y2=\"" +
           coord(y2) + "\"" + attr("class", cls) + marker(arrow) + "/>";
}

void Svg::path(std::string_view d, std::string_view cls, Arrow arrow) {
  body_ += "<path" + attr("d", d) + attr("class", cls) + marker(arrow) + "/>";
}

void Svg::polyline(const std::vector<Point>& points, std::string_view cls) {
  std::string pts;
  for (const Point& p : points) pts += (pts.empty() ? "" : " ") + coord(p.x) + "," + coord(p.y);
  body_ += "<polyline points=\"" + pts + "\"" + attr("class", cls) + "/>";
}

void Svg::circle(double cx, double cy, double r, std::string_view cls, std::string_view tooltip) {
  body_ += "<circle cx=\"" + coord(cx) + "\" cy=\"" + coord(cy) + "\" r=\"" + coord(r) + "\"" +
           attr("class", cls) + ">" + tooltip_element(tooltip) + "</circle>";
}

void Svg::text(double x, double y, std::string_view s, std::string_view cls, Anchor anchor) {
  body_ += "<text x=\"" + coord(x) + "\" y=\"" + coord(y) + "\"" + (cls.empty() ? "" : attr("class", cls)) +
           (anchor == Anchor::start ? "" : attr("text-anchor", anchor_name(anchor))) + ">" + html_escape(s) +
           "</text>";
}

void Svg::lines(double x, double y, const std::vector<std::string>& texts, std::string_view cls,
                Anchor anchor, double line_px) {
  for (size_t i = 0; i < texts.size(); ++i)
    text(x, y + line_px * static_cast<double>(i), texts[i], cls, anchor);
}

std::string Svg::finish(std::string_view svg_class, std::string_view data_kind,
                        std::string_view title) const {
  std::string out = "<svg" + attr("class", svg_class) +
                    (data_kind.empty() ? "" : attr("data-kind", data_kind)) + attr("id", id_) +
                    " viewBox=\"0 0 " + coord(width_) + " " + coord(height_) + "\" width=\"" + coord(width_) +
                    "\" height=\"" + coord(height_) + "\" role=\"img\"" +
                    attr("aria-labelledby", id_ + "-title") + ">";
  out += "<title" + attr("id", id_ + "-title") + ">" + html_escape(title) + "</title>";
  out += "<defs>" + marker_def(id_ + "-arrow", "#455a64") + marker_def(id_ + "-arrow-red", "#d32f2f") +
         "</defs>";
  return out + body_ + "</svg>";
}

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || max_ticks < 1) return {lo};
  const double raw = (hi - lo) / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9 && ticks.size() < 64; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);  // no "-0" or 1e-17 labels
  }
  return ticks;
}

std::vector<std::string> wrap(std::string_view s, size_t chars, size_t max_lines) {
  std::vector<std::string> all;
  std::string line;
  size_t pos = 0;
  while (pos < s.size()) {  // ends: pos grows by at least one each pass
    const size_t end = std::min(s.find_first_of(" \n", pos), s.size());
    const std::string_view word = s.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (!line.empty() && char_count(line) + 1 + char_count(word) > chars)
      all.push_back(std::exchange(line, ""));
    line += (line.empty() ? "" : " ") + std::string(word);
  }
  if (!line.empty()) all.push_back(std::move(line));
  for (auto& l : all) l = truncate(l, chars);  // a single word longer than a line
  if (all.size() <= max_lines) return all;
  all.resize(max_lines);
  if (!all.empty()) {
    std::string& last = all.back();
    last = truncate(last, chars > 1 ? chars - 1 : 1);
    if (last.size() < 3 || last.compare(last.size() - 3, 3, "…") != 0) last += "…";
  }
  return all;
}

}  // namespace shardcheck::reports
