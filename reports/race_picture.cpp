// The stream-race picture: a lane per (rank, stream) involved, that rank's operations in a
// window of scheduler steps around the two accesses (when a timeline was recorded), the two
// racing accesses highlighted, and the missing happens-before edge as a dashed red arrow.
#include <algorithm>

#include "reports/format.hpp"
#include "reports/pictures.hpp"
#include "reports/svg.hpp"

namespace shardcheck::reports {

namespace {
constexpr double kLabelW = 190, kPlotW = 620, kRightPad = 20, kLaneH = 34, kLaneGap = 16, kTop = 24;
constexpr double kSliceMinPx = 5;  // narrower than this, neighbouring operations merge into runs

struct Lane {
  int rank = 0;
  std::string stream;
  int tid = -1;  // thread in the trace; -1 when not recorded
  double y = 0;
};

struct Window {
  int64_t lo = 0;
  int64_t hi = 0;
  double sx = 1;  // pixels per scheduler step
  double x(int64_t step) const { return kLabelW + static_cast<double>(step - lo) * sx; }
};

int find_tid(const core::TraceLog& t, int rank, const std::string& stream) {
  for (const auto& th : t.threads) {
    if (th.rank == rank && th.name == stream) return th.tid;
  }
  return -1;
}

std::vector<Lane> lanes_of(const core::RaceDetail& d, const core::TraceLog& t) {
  std::vector<Lane> lanes;
  for (const core::AccessSite* a : {&d.first, &d.second}) {
    const bool have = std::any_of(lanes.begin(), lanes.end(),
                                  [&](const Lane& l) { return l.rank == a->rank && l.stream == a->stream; });
    if (!have)
      lanes.push_back({a->rank, a->stream, find_tid(t, a->rank, a->stream),
                       kTop + static_cast<double>(lanes.size()) * (kLaneH + kLaneGap)});
  }
  return lanes;
}

const Lane& lane_of(const std::vector<Lane>& lanes, const core::AccessSite& a) {
  for (const Lane& l : lanes) {
    if (l.rank == a.rank && l.stream == a.stream) return l;
  }
  return lanes.front();
}

Window window_of(const core::RaceDetail& d) {
  Window w;
  const int64_t lo = std::min(d.first.step, d.second.step), hi = std::max(d.first.step, d.second.step);
  const int64_t pad = 2 + (hi - lo) / 4;
  w.lo = std::max<int64_t>(0, lo - pad);
  w.hi = hi + pad;
  w.sx = kPlotW / static_cast<double>(w.hi - w.lo + 1);
  return w;
}

// Operations as separate boxes when there is room, otherwise merged into busy runs, so a
// window of thousands of steps still draws in at most a few hundred shapes.
void draw_slices(Svg& svg, const core::TraceLog& t, const Lane& lane, const Window& w,
                 const std::vector<int64_t>& accesses) {
  std::vector<const core::TraceLog::Slice*> in;
  for (const auto& s : t.slices) {
    if (s.rank == lane.rank && s.tid == lane.tid && s.ts_us + s.dur_us > w.lo && s.ts_us <= w.hi)
      in.push_back(&s);
  }
  std::sort(in.begin(), in.end(), [](auto* a, auto* b) { return a->ts_us < b->ts_us; });
  const double y = lane.y + 7, h = kLaneH - 14;
  if (w.sx >= kSliceMinPx) {
    for (const auto* s : in) {
      const double x = w.x(std::max(s->ts_us, w.lo)) + 0.5,
                   width = std::max(1.0, static_cast<double>(s->dur_us) * w.sx - 1);
      svg.rect(x, y, width, h, "slice", s->name + " (step " + std::to_string(s->ts_us) + ")");
      const bool under_access = std::find(accesses.begin(), accesses.end(), s->ts_us) != accesses.end();
      if (width >= 4 * kCharPx && !under_access)
        svg.text(x + 3, y + h - 6, truncate(s->name, static_cast<size_t>((width - 6) / kCharPx)),
                 "slice-label");
    }
    return;
  }
  const int64_t join = static_cast<int64_t>(2 / w.sx) + 1;  // steps closer than ~2 px join one run
  for (size_t i = 0; i < in.size();) {
    size_t j = i + 1;
    int64_t end = in[i]->ts_us + in[i]->dur_us;
    for (; j < in.size() && in[j]->ts_us <= end + join; ++j)
      end = std::max(end, in[j]->ts_us + in[j]->dur_us);
    svg.rect(w.x(std::max(in[i]->ts_us, w.lo)), y,
             static_cast<double>(end - std::max(in[i]->ts_us, w.lo)) * w.sx, h, "slice",
             std::to_string(j - i) + " operations, steps " + std::to_string(in[i]->ts_us) + "–" +
                 std::to_string(end - 1));
    i = j;
  }
}

// Steps of the racing accesses on `lane`, where slice labels would sit under the markers.
std::vector<int64_t> steps_on(const core::RaceDetail& d, const Lane& lane) {
  std::vector<int64_t> steps;
  for (const core::AccessSite* a : {&d.first, &d.second}) {
    if (a->rank == lane.rank && a->stream == lane.stream) steps.push_back(a->step);
  }
  return steps;
}

std::string access_text(const core::AccessSite& a) {
  return std::string(a.write ? "write" : "read") + " by " + a.op + " on rank " + std::to_string(a.rank) +
         " " + a.stream + " at step " + std::to_string(a.step) + ": " + a.buffer + ", lifetime " +
         std::to_string(a.lifetime) + ", bytes [" + std::to_string(a.byte_begin) + ", " +
         std::to_string(a.byte_end) + ")";
}

struct Marker {
  double x = 0;  // centre
  double top = 0;
  double bottom = 0;
};

Marker draw_access(Svg& svg, const core::AccessSite& a, int number, const Lane& lane, const Window& w,
                   double label_y) {
  const double width = std::max(w.sx, 10.0), x = w.x(a.step) + w.sx / 2;
  svg.rect(x - width / 2, lane.y + 2, width, kLaneH - 4, "access", access_text(a));
  svg.text(x, lane.y + kLaneH / 2 + 4, std::to_string(number), "access-number", Anchor::middle);
  const std::string label =
      std::to_string(number) + ": " + a.op + " · " + a.buffer + " · lifetime " + std::to_string(a.lifetime);
  const std::string shown = truncate(label, static_cast<size_t>(kPlotW / kCharPx));
  const double label_w = static_cast<double>(char_count(shown)) * kCharPx;
  const double lx = std::clamp(x - label_w / 2, kLabelW, kLabelW + kPlotW - label_w);
  svg.text(lx, label_y, shown, "access-label");
  return {x, lane.y + 2, lane.y + kLaneH - 2};
}

void draw_missing_edge(Svg& svg, const Marker& from, const Marker& to, bool same_lane) {
  constexpr std::string_view kLabel = "missing happens-before";
  if (same_lane) {
    const double mid = (from.x + to.x) / 2, peak = from.top - 20;
    svg.path("M" + coord(from.x) + "," + coord(from.top) + " Q" + coord(mid) + "," + coord(peak) + " " +
                 coord(to.x) + "," + coord(to.top),
             "race-edge", Arrow::red);
    svg.text(mid, peak + 4, kLabel, "race-edge-label", Anchor::middle);
    return;
  }
  svg.line(from.x, from.bottom, to.x, to.top, "race-edge", Arrow::red);
  // The label sits in the gap between the lanes, beside the arrow rather than on it.
  const double y = (from.bottom + to.top) / 2 + 4, width = static_cast<double>(kLabel.size()) * kCharPx;
  const double right = std::max(from.x, to.x) + 12, left = std::min(from.x, to.x) - 12;
  if (right + width <= kLabelW + kPlotW + kRightPad) {
    svg.text(right, y, kLabel, "race-edge-label");
  } else {
    svg.text(std::max(left, width), y, kLabel, "race-edge-label", Anchor::end);
  }
}

double draw_axis(Svg& svg, const Window& w, double y) {
  svg.line(kLabelW, y, kLabelW + kPlotW, y, "axis");
  const int max_ticks = static_cast<int>(std::min<int64_t>(8, w.hi - w.lo));
  for (const double t : nice_ticks(static_cast<double>(w.lo), static_cast<double>(w.hi), max_ticks)) {
    const double x = w.x(static_cast<int64_t>(t)) + w.sx / 2;
    svg.line(x, y, x, y + 4, "axis");
    svg.text(x, y + 16, number(t), "tick", Anchor::middle);
  }
  svg.text(kLabelW - 8, y + 16, "step", "tick", Anchor::end);
  return y + 22;
}

double draw_legend(Svg& svg, const core::RaceDetail& d, bool have_trace, double y) {
  const size_t chars = static_cast<size_t>((kLabelW + kPlotW - 10) / kCharPx);
  std::vector<std::string> lines = wrap("1: " + access_text(d.first), chars, 2);
  for (auto& l : wrap("2: " + access_text(d.second), chars, 2)) lines.push_back(std::move(l));
  if (d.reuse)
    lines.push_back("The two accesses are different lifetimes of one block: the allocator reused it.");
  if (!have_trace)
    lines.push_back("(no timeline was recorded for this run: only the two accesses are drawn)");
  svg.lines(10, y + 12, lines, "legend");
  y += 12 + 15 * static_cast<double>(lines.size());
  const auto missing = wrap("missing: " + d.missing_edge, chars, 3);
  svg.lines(10, y, missing, "race-edge-label");
  return y + 15 * static_cast<double>(missing.size());
}
}  // namespace

std::string race_picture(const core::RaceDetail& d, const core::TraceLog& trace, std::string_view kind,
                         const std::string& id) {
  const std::vector<Lane> lanes = lanes_of(d, trace);
  const Window w = window_of(d);
  Svg svg(id, kLabelW + kPlotW + kRightPad, 0);
  for (const Lane& lane : lanes) {
    svg.rect(kLabelW, lane.y, kPlotW, kLaneH, "lane");
    svg.text(kLabelW - 8, lane.y + kLaneH / 2 + 4,
             "rank " + std::to_string(lane.rank) + " · " + truncate(lane.stream, 16), "lane-label",
             Anchor::end);
    if (lane.tid >= 0) draw_slices(svg, trace, lane, w, steps_on(d, lane));
  }
  const bool same_lane = lanes.size() == 1;
  const Lane &l1 = lane_of(lanes, d.first), &l2 = lane_of(lanes, d.second);
  const Marker m1 = draw_access(svg, d.first, 1, l1, w, same_lane ? l1.y + kLaneH + 13 : l1.y - 6);
  const Marker m2 = draw_access(svg, d.second, 2, l2, w, l2.y + kLaneH + (same_lane ? 27 : 13));
  draw_missing_edge(svg, m1, m2, same_lane);
  const double axis_y = lanes.back().y + kLaneH + (same_lane ? 36 : 22);
  const double bottom = draw_legend(svg, d, !trace.slices.empty(), draw_axis(svg, w, axis_y));
  svg.resize(svg.width(), bottom + 8);
  return svg.finish(kPictureClass, kind,
                    "stream race: " + d.first.op + " and " + d.second.op + " on " + d.first.buffer);
}

}  // namespace shardcheck::reports
