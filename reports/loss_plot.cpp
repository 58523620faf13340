// The loss-curve plot of a compare run: on the left one polyline per series with a legend,
// step and loss axes with tick labels, and the achievable loss (the data's entropy rate) as a
// dashed line; on the right |Δloss| per step between the first two series on a log axis, so
// a divergence of 1e-3 on a loss of 4 shows. Every series after the first is drawn dashed
// with its own marker shape on top, so identical curves stay both visible.
#include <algorithm>
#include <cmath>

#include "reports/format.hpp"
#include "reports/pictures.hpp"
#include "reports/svg.hpp"

namespace shardcheck::reports {

namespace {
constexpr double kLeft = 64, kPlotW = 420, kTop = 24, kPlotH = 250;
constexpr double kDeltaLeft = kLeft + kPlotW + 76, kDeltaW = 260, kLegendW = 200;
constexpr size_t kPalette = 6;      // series-0 .. series-5 in the page's CSS
constexpr size_t kMaxMarkers = 60;  // points get markers only while they stay readable
constexpr size_t kMaxLegend = 12;

struct Scale {
  double left = kLeft;
  double width = kPlotW;
  double x_max = 1;
  double y_lo = 0;
  double y_hi = 1;
  double x(double step) const { return left + width * step / x_max; }
  double y(double loss) const { return kTop + kPlotH * (y_hi - loss) / (y_hi - y_lo); }
};

double x_max_of(const CompareData& c) {
  return std::max<double>(1, static_cast<double>(compare_steps(c)) - 1);
}

Scale scale_of(const CompareData& c) {
  Scale s;
  s.x_max = x_max_of(c);
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& series : c.series) {
    for (const double v : series.losses) {
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  if (c.achievable_loss >= 0) lo = std::min(lo, c.achievable_loss), hi = std::max(hi, c.achievable_loss);
  if (!(lo <= hi)) lo = 0, hi = 1;  // nothing finite to plot
  const double pad = hi > lo ? (hi - lo) * 0.06 : std::max(0.5, std::fabs(lo) * 0.1);
  s.y_lo = lo - pad;
  s.y_hi = hi + pad;
  return s;
}

void draw_x_axis(Svg& svg, const Scale& s) {
  const int x_ticks = static_cast<int>(std::min(s.width >= kPlotW ? 10.0 : 6.0, s.x_max));
  for (const double t : nice_ticks(0, s.x_max, x_ticks)) {
    svg.line(s.x(t), kTop + kPlotH, s.x(t), kTop + kPlotH + 4, "axis");
    svg.text(s.x(t), kTop + kPlotH + 17, number(t), "tick", Anchor::middle);
  }
  svg.line(s.left, kTop + kPlotH, s.left + s.width, kTop + kPlotH, "axis");
  svg.line(s.left, kTop, s.left, kTop + kPlotH, "axis");
  svg.text(s.left + s.width / 2, kTop + kPlotH + 36, "step", "tick", Anchor::middle);
}

void draw_axes(Svg& svg, const Scale& s) {
  for (const double t : nice_ticks(s.y_lo, s.y_hi, 6)) {
    svg.line(kLeft, s.y(t), kLeft + kPlotW, s.y(t), "grid");
    svg.text(kLeft - 6, s.y(t) + 4, number(t, 4), "tick", Anchor::end);
  }
  draw_x_axis(svg, s);
  svg.text(kLeft - 6, kTop - 10, "loss", "tick", Anchor::end);
}

// Series 0 gets dots, series 1 squares, the rest diamonds: shapes that still show one on top
// of another where the curves coincide.
void marker(Svg& svg, size_t index, Point p, const std::string& cls, const std::string& tip) {
  // The later shapes are hollow and larger, so a dot under them stays visible.
  if (index == 0) return svg.circle(p.x, p.y, 2.5, cls + " dot", tip);
  if (index == 1) return svg.rect(p.x - 4, p.y - 4, 8, 8, cls + " mark", tip);
  svg.path("M" + coord(p.x) + " " + coord(p.y - 5.5) + "L" + coord(p.x + 5.5) + " " + coord(p.y) + "L" +
               coord(p.x) + " " + coord(p.y + 5.5) + "L" + coord(p.x - 5.5) + " " + coord(p.y) + "Z",
           cls + " mark");
}

// A NaN or infinite loss breaks the line rather than dragging it off the plot.
void draw_series(Svg& svg, const LossSeries& series, size_t index, const Scale& s, const std::string& cls) {
  const std::string line_cls = cls + " line" + (index > 0 ? " overlay" : "");
  std::vector<Point> run;
  for (size_t i = 0; i <= series.losses.size(); ++i) {
    const bool ok = i < series.losses.size() && std::isfinite(series.losses[i]);
    if (ok) run.push_back({s.x(static_cast<double>(i)), s.y(series.losses[i])});
    if (!ok && run.size() == 1) marker(svg, index, run[0], cls, "");
    if (!ok && run.size() > 1) svg.polyline(run, line_cls);
    if (!ok) run.clear();
  }
  if (series.losses.size() > kMaxMarkers) return;
  for (size_t i = 0; i < series.losses.size(); ++i) {
    if (!std::isfinite(series.losses[i])) continue;
    marker(svg, index, {s.x(static_cast<double>(i)), s.y(series.losses[i])}, cls,
           series.label + ", step " + std::to_string(i) + ": " + number(series.losses[i]));
  }
}

// |Δloss| per step on a log axis; a step where the two are equal sits on the "= 0" line at
// the bottom.
void draw_delta(Svg& svg, const CompareData& c) {
  Scale s{kDeltaLeft, kDeltaW, x_max_of(c), 0, 1};
  std::vector<std::pair<size_t, double>> deltas;
  double lo = INFINITY, hi = 0;
  for (size_t step = 0; step < compare_steps(c); ++step) {
    const StepDelta d = step_delta(c, step);
    if (!d.present || !std::isfinite(d.abs)) continue;
    deltas.emplace_back(step, d.abs);
    if (d.abs > 0) lo = std::min(lo, d.abs), hi = std::max(hi, d.abs);
  }
  const bool any = hi > 0;
  const double e_lo = any ? std::floor(std::log10(lo)) : -8, e_hi = any ? std::ceil(std::log10(hi)) : -7;
  s.y_lo = e_lo - (e_hi > e_lo ? 0 : 1) - 0.35;  // room for the "= 0" line below the lowest decade
  s.y_hi = std::max(e_hi, e_lo + 1);
  const double zero_y = s.y(s.y_lo + 0.15);
  const int decades = static_cast<int>(s.y_hi - e_lo);
  const int stride = std::max(1, decades / 6);
  for (double e = e_lo; any && e <= s.y_hi + 1e-9; e += stride) {
    svg.line(kDeltaLeft, s.y(e), kDeltaLeft + kDeltaW, s.y(e), "grid");
    svg.text(kDeltaLeft - 6, s.y(e) + 4, "1e" + number(e), "tick", Anchor::end);
  }
  svg.line(kDeltaLeft, zero_y, kDeltaLeft + kDeltaW, zero_y, "grid zero");
  svg.text(kDeltaLeft - 6, zero_y + 4, "= 0", "tick", Anchor::end);
  draw_x_axis(svg, s);
  svg.text(kDeltaLeft - 6, kTop - 10, "|Δloss| (log)", "tick", Anchor::start);
  std::vector<Point> pts;
  for (const auto& [step, d] : deltas)
    pts.push_back({s.x(static_cast<double>(step)), d > 0 ? s.y(std::log10(d)) : zero_y});
  if (pts.size() > 1) svg.polyline(pts, "delta line");
  for (size_t i = 0; i < pts.size() && deltas.size() <= kMaxMarkers; ++i)
    svg.circle(pts[i].x, pts[i].y, 2.5, "delta dot",
               "step " + std::to_string(deltas[i].first) + ": |Δloss| = " + number(deltas[i].second, 3));
  if (!any && !deltas.empty())
    svg.text(kDeltaLeft + kDeltaW / 2, kTop + kPlotH / 2, "identical at every step", "legend",
             Anchor::middle);
}

void draw_legend(Svg& svg, const CompareData& c, bool identical) {
  const double x = kDeltaLeft + kDeltaW + 20;
  double y = kTop + 8;
  for (size_t i = 0; i < c.series.size() && i < kMaxLegend; ++i, y += 18) {
    const std::string cls = "series series-" + std::to_string(i % kPalette);
    svg.line(x, y - 4, x + 22, y - 4, cls + " line" + (i > 0 ? " overlay" : ""));
    marker(svg, i, {x + 11, y - 4}, cls, "");
    svg.text(x + 28, y, truncate(c.series[i].label, 22), "legend");
  }
  if (c.series.size() > kMaxLegend) {
    svg.text(x, y, "+" + std::to_string(c.series.size() - kMaxLegend) + " more", "legend");
    y += 18;
  }
  if (c.achievable_loss >= 0) {
    svg.line(x, y - 4, x + 22, y - 4, "achievable");
    svg.text(x + 28, y, "achievable " + number(c.achievable_loss, 4), "legend");
    y += 18;
  }
  if (identical) svg.text(x, y + 6, "(the curves coincide)", "legend");
}

bool identical_curves(const CompareData& c) {
  if (c.series.size() < 2 || c.series[0].losses.empty()) return false;
  return c.series[0].losses == c.series[1].losses;
}
}  // namespace

std::string loss_plot(const CompareData& c, const std::string& id) {
  const Scale s = scale_of(c);
  Svg svg(id, kDeltaLeft + kDeltaW + kLegendW, kTop + kPlotH + 46);
  draw_axes(svg, s);
  if (c.achievable_loss >= 0)
    svg.line(kLeft, s.y(c.achievable_loss), kLeft + kPlotW, s.y(c.achievable_loss), "achievable");
  for (size_t i = 0; i < c.series.size(); ++i)
    draw_series(svg, c.series[i], i, s, "series series-" + std::to_string(i % kPalette));
  if (c.series.size() >= 2) draw_delta(svg, c);
  draw_legend(svg, c, identical_curves(c));
  return svg.finish("loss-plot", "",
                    "loss per step against " + c.against + ", and |Δloss| per step on a log scale");
}

}  // namespace shardcheck::reports
