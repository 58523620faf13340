// The deadlock picture: the waiters as boxes (rank, host or stream, what it is stuck on) in
// a ring of "waits for" arrows, or, when nothing closes a cycle, a chain that ends in the
// thing that will never come.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "reports/format.hpp"
#include "reports/pictures.hpp"
#include "reports/svg.hpp"

namespace shardcheck::reports {

namespace {
constexpr double kBoxW = 190, kBoxH = 60, kMargin = 24;
constexpr size_t kMaxNodes = 12;  // beyond this the picture says how many it left out

void draw_box(Svg& svg, double cx, double cy, double w, const core::DeadlockDetail::Node& n,
              std::string_view cls) {
  const double x = cx - w / 2, y = cy - kBoxH / 2;
  svg.rect(x, y, w, kBoxH, cls, n.waits_for.empty() ? n.op : n.op + "\nwaits for " + n.waits_for);
  svg.text(x + 8, y + 17, "rank " + std::to_string(n.rank) + " · " + n.where, "box-title");
  svg.lines(x + 8, y + 34, wrap(n.op, static_cast<size_t>((w - 16) / kCharPx), 2), "box-text");
}

// Where the ray from a box's centre along (dx, dy) leaves the box.
Point box_exit(Point c, double w, double dx, double dy) {
  const double tx = dx != 0 ? (w / 2) / std::fabs(dx) : 1e9, ty = dy != 0 ? (kBoxH / 2) / std::fabs(dy) : 1e9;
  const double t = std::min(tx, ty);
  return {c.x + dx * t, c.y + dy * t};
}

// A straight "waits for" arrow between two box centres, shifted sideways so that the two
// arrows between a pair of boxes (a two-waiter cycle) do not overlap.
void waits_for_arrow(Svg& svg, Point a, Point b, double w) {
  const double len = std::hypot(b.x - a.x, b.y - a.y);
  if (len < 1) return;
  const double dx = (b.x - a.x) / len, dy = (b.y - a.y) / len, nx = -dy * 8, ny = dx * 8;
  const Point from = box_exit(a, w, dx, dy), to = box_exit(b, w, -dx, -dy);
  svg.line(from.x + nx, from.y + ny, to.x + nx - dx * 3, to.y + ny - dy * 3, "edge", Arrow::plain);
  // Beside the arrow, on its own side: the two labels of a two-waiter cycle must not collide.
  const Anchor anchor = nx > 4 ? Anchor::start : nx < -4 ? Anchor::end : Anchor::middle;
  svg.text((from.x + to.x) / 2 + nx * 1.8, (from.y + to.y) / 2 + ny * 1.8 + 4, "waits for", "edge-label",
           anchor);
}

double draw_note(Svg& svg, double y, const std::string& note) {
  const auto lines = wrap(note, static_cast<size_t>((svg.width() - 2 * kMargin) / kCharPx), 3);
  svg.lines(kMargin, y, lines, "legend");
  return y + 15 * static_cast<double>(lines.size());
}

std::string left_out(size_t total) {
  return total > kMaxNodes ? " (" + std::to_string(total - kMaxNodes) + " more waiters are not drawn)" : "";
}

std::string ring(const core::DeadlockDetail& d, std::string_view kind, const std::string& id) {
  const size_t n = std::min(d.cycle.size(), kMaxNodes);
  const double rx =
      std::max(n == 1 ? 0.0 : 150.0, static_cast<double>(n) * (kBoxW + 50) / (2 * std::numbers::pi));
  const double ry = n <= 2 ? 0.0 : std::max(95.0, rx * 0.6);
  const double cx = kMargin + kBoxW / 2 + rx + 30, cy = kMargin + kBoxH / 2 + ry + 10;
  Svg svg(id, 2 * cx + (n == 1 ? 90 : 0), 0);  // room for the self-loop
  std::vector<Point> centres;
  for (size_t i = 0; i < n; ++i) {
    const double start = n == 2 ? std::numbers::pi : -std::numbers::pi / 2;  // two waiters side by side
    const double angle = start + 2 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(n);
    centres.push_back({cx + rx * std::cos(angle), cy + ry * std::sin(angle)});
    draw_box(svg, centres.back().x, centres.back().y, kBoxW, d.cycle[i], "box");
  }
  if (n == 1) {  // waits for itself: a loop over the box's right side
    const double x = cx + kBoxW / 2, y = cy;
    svg.path("M" + coord(x) + "," + coord(y - 14) + " C" + coord(x + 60) + "," + coord(y - 60) + " " +
                 coord(x + 60) + "," + coord(y + 60) + " " + coord(x + 3) + "," + coord(y + 14),
             "edge", Arrow::plain);
    svg.text(x + 50, y + 4, "waits for", "edge-label");
  }
  for (size_t i = 0; n > 1 && i < n; ++i) waits_for_arrow(svg, centres[i], centres[(i + 1) % n], kBoxW);
  const double bottom = draw_note(
      svg, cy + ry + kBoxH / 2 + 28,
      "Each waits for the next and the last for the first: nothing can run." + left_out(d.cycle.size()));
  svg.resize(svg.width(), bottom + 8);
  return svg.finish(kPictureClass, kind,
                    "deadlock: a cycle of " + std::to_string(d.cycle.size()) + " waiters");
}

std::string chain(const core::DeadlockDetail& d, std::string_view kind, const std::string& id) {
  constexpr double kChainW = 320, kStep = kBoxH + 46;
  const size_t n = std::min(d.cycle.size(), kMaxNodes);
  const double cx = kMargin + kChainW / 2;
  Svg svg(id, kChainW + 2 * kMargin + 120, 0);
  double y = kMargin + kBoxH / 2;
  for (size_t i = 0; i < n; ++i, y += kStep) {
    draw_box(svg, cx, y, kChainW, d.cycle[i], "box");
    svg.line(cx, y + kBoxH / 2, cx, y + kStep - kBoxH / 2 - 3, "edge", Arrow::plain);
    svg.text(cx + 10, y + kStep / 2 + 4, "waits for", "edge-label");
  }
  const std::string never =
      n > 0 && !d.cycle[n - 1].waits_for.empty() ? d.cycle[n - 1].waits_for : "something nothing will do";
  svg.rect(kMargin, y - kBoxH / 2, kChainW, kBoxH, "box never", never);
  svg.text(kMargin + 8, y - kBoxH / 2 + 17, "never comes", "box-title never-title");
  svg.lines(kMargin + 8, y - kBoxH / 2 + 34, wrap(never, static_cast<size_t>((kChainW - 16) / kCharPx), 2),
            "box-text");
  const double bottom =
      draw_note(svg, y + kBoxH / 2 + 24,
                "A chain of waits ending in something that will never happen." + left_out(d.cycle.size()));
  svg.resize(svg.width(), bottom + 8);
  return svg.finish(kPictureClass, kind,
                    "deadlock: a chain of " + std::to_string(d.cycle.size()) + " waiters that never ends");
}
}  // namespace

std::string deadlock_picture(const core::DeadlockDetail& d, std::string_view kind, const std::string& id) {
  return d.is_cycle && !d.cycle.empty() ? ring(d, kind, id) : chain(d, kind, id);
}

}  // namespace shardcheck::reports
