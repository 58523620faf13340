// The loss-curve plot of a compare run: one polyline per series with a legend, step and loss
// axes with tick labels, and the achievable loss (the data's entropy rate) as a dashed line.
#include <algorithm>
#include <cmath>

#include "reports/format.hpp"
#include "reports/pictures.hpp"
#include "reports/svg.hpp"

namespace shardcheck::reports {

namespace {
constexpr double kLeft = 64, kPlotW = 480, kTop = 24, kPlotH = 250, kLegendW = 200;
constexpr size_t kPalette = 6;      // series-0 .. series-5 in the page's CSS
constexpr size_t kMaxMarkers = 60;  // points get dots only while they stay readable
constexpr size_t kMaxLegend = 12;

struct Scale {
  double x_max = 1;
  double y_lo = 0;
  double y_hi = 1;
  double x(double step) const { return kLeft + kPlotW * step / x_max; }
  double y(double loss) const { return kTop + kPlotH * (y_hi - loss) / (y_hi - y_lo); }
};

Scale scale_of(const CompareData& c) {
  Scale s;
  s.x_max = std::max<double>(1, static_cast<double>(compare_steps(c)) - 1);
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

void draw_axes(Svg& svg, const Scale& s) {
  for (const double t : nice_ticks(s.y_lo, s.y_hi, 6)) {
    svg.line(kLeft, s.y(t), kLeft + kPlotW, s.y(t), "grid");
    svg.text(kLeft - 6, s.y(t) + 4, number(t, 4), "tick", Anchor::end);
  }
  const int x_ticks = static_cast<int>(std::min(10.0, s.x_max));
  for (const double t : nice_ticks(0, s.x_max, x_ticks)) {
    svg.line(s.x(t), kTop + kPlotH, s.x(t), kTop + kPlotH + 4, "axis");
    svg.text(s.x(t), kTop + kPlotH + 17, number(t), "tick", Anchor::middle);
  }
  svg.line(kLeft, kTop + kPlotH, kLeft + kPlotW, kTop + kPlotH, "axis");
  svg.line(kLeft, kTop, kLeft, kTop + kPlotH, "axis");
  svg.text(kLeft + kPlotW / 2, kTop + kPlotH + 36, "step", "tick", Anchor::middle);
  svg.text(kLeft - 6, kTop - 10, "loss", "tick", Anchor::end);
}

// A NaN or infinite loss breaks the line rather than dragging it off the plot.
void draw_series(Svg& svg, const LossSeries& series, const Scale& s, const std::string& cls) {
  std::vector<Point> run;
  for (size_t i = 0; i <= series.losses.size(); ++i) {
    const bool ok = i < series.losses.size() && std::isfinite(series.losses[i]);
    if (ok) run.push_back({s.x(static_cast<double>(i)), s.y(series.losses[i])});
    if (!ok && run.size() == 1) svg.circle(run[0].x, run[0].y, 2.5, cls + " dot");
    if (!ok && run.size() > 1) svg.polyline(run, cls + " line");
    if (!ok) run.clear();
  }
  if (series.losses.size() > kMaxMarkers) return;
  for (size_t i = 0; i < series.losses.size(); ++i) {
    if (!std::isfinite(series.losses[i])) continue;
    svg.circle(s.x(static_cast<double>(i)), s.y(series.losses[i]), 2.5, cls + " dot",
               series.label + ", step " + std::to_string(i) + ": " + number(series.losses[i]));
  }
}

void draw_legend(Svg& svg, const CompareData& c) {
  const double x = kLeft + kPlotW + 20;
  double y = kTop + 8;
  for (size_t i = 0; i < c.series.size() && i < kMaxLegend; ++i, y += 18) {
    svg.line(x, y - 4, x + 22, y - 4, "series series-" + std::to_string(i % kPalette) + " line");
    svg.text(x + 28, y, truncate(c.series[i].label, 22), "legend");
  }
  if (c.series.size() > kMaxLegend) {
    svg.text(x, y, "+" + std::to_string(c.series.size() - kMaxLegend) + " more", "legend");
    y += 18;
  }
  if (c.achievable_loss >= 0) {
    svg.line(x, y - 4, x + 22, y - 4, "achievable");
    svg.text(x + 28, y, "achievable " + number(c.achievable_loss, 4), "legend");
  }
}
}  // namespace

std::string loss_plot(const CompareData& c, const std::string& id) {
  const Scale s = scale_of(c);
  Svg svg(id, kLeft + kPlotW + kLegendW, kTop + kPlotH + 46);
  draw_axes(svg, s);
  if (c.achievable_loss >= 0)
    svg.line(kLeft, s.y(c.achievable_loss), kLeft + kPlotW, s.y(c.achievable_loss), "achievable");
  for (size_t i = 0; i < c.series.size(); ++i)
    draw_series(svg, c.series[i], s, "series series-" + std::to_string(i % kPalette));
  draw_legend(svg, c);
  return svg.finish("loss-plot", "", "loss per step against " + c.against);
}

}  // namespace shardcheck::reports
