// Finding pictures chosen by detail type, and the three small ones: the ranks' k-th
// collectives side by side, the norm bars, and the element panel.
#include <algorithm>
#include <cmath>
#include <map>

#include "core/base/overloaded.hpp"
#include "reports/format.hpp"
#include "reports/pictures.hpp"
#include "reports/svg.hpp"

namespace shardcheck::reports {

namespace {
constexpr double kMargin = 16;

std::string placeholder(std::string_view kind, const std::string& id) {
  Svg svg(id, 420, 44);
  svg.rect(1, 1, 418, 42, "panel");
  svg.text(14, 27, "no structured detail was recorded for this finding", "legend");
  return svg.finish(kPictureClass, kind, std::string(kind) + ": no detail");
}

// Cells that differ: values that fewer than half of the ranks share, when not all agree.
std::vector<bool> differing(const std::vector<std::string>& values) {
  std::map<std::string, size_t> count;
  for (const auto& v : values) ++count[v];
  std::vector<bool> out(values.size(), false);
  if (count.size() <= 1) return out;
  for (size_t i = 0; i < values.size(); ++i) out[i] = 2 * count[values[i]] <= values.size();
  return out;
}

double norm_bars(Svg& svg, const core::NormDetail& d, double y) {
  constexpr double kLabelW = 150, kBarW = 420;
  const double top = std::max({std::fabs(d.expected), std::fabs(d.reported), 1e-300});
  const bool wrong = !(std::fabs(d.reported - d.expected) <= 1e-6 * std::max(1.0, std::fabs(d.expected)));
  const std::pair<const char*, double> rows[] = {{"expected norm", d.expected},
                                                 {"reported norm", d.reported}};
  for (const auto& [label, v] : rows) {
    const double w = std::isfinite(v) ? kBarW * std::fabs(v) / top : kBarW;
    const bool bad = wrong && std::string_view(label) == "reported norm";
    svg.text(kLabelW - 8, y + 15, label, "bar-label", Anchor::end);
    svg.rect(kLabelW, y, w, 20, bad ? "bar bad" : "bar expected", std::string(label) + " " + number(v));
    svg.text(kLabelW + w + 6, y + 15, number(v), bad ? "value bad" : "value");
    y += 28;
  }
  return y;
}

double param_bars(Svg& svg, const core::NormDetail& d, double y) {
  constexpr double kLabelW = 220, kBarW = 300;
  constexpr size_t kMaxRows = 20;
  std::vector<core::NormDetail::Param> rows = d.params;
  std::stable_partition(rows.begin(), rows.end(),
                        [](const auto& p) { return p.counted != 1; });  // wrong ones first
  int most = 2;
  for (const auto& p : rows) most = std::max(most, p.counted);
  svg.text(kMargin, y + 12, "parameters by times counted (1 is right)", "box-title");
  y += 22;
  for (size_t i = 0; i < rows.size() && i < kMaxRows; ++i, y += 22) {
    const auto& p = rows[i];
    const double w = kBarW * std::max(p.counted, 0) / most;
    svg.text(kLabelW - 8, y + 13, truncate(p.name, 28), "bar-label", Anchor::end);
    svg.rect(kLabelW, y, std::max(w, 2.0), 16, p.counted == 1 ? "bar ok" : "bar bad",
             p.name + ": counted " + std::to_string(p.counted));
    svg.text(kLabelW + std::max(w, 2.0) + 6, y + 13, "×" + std::to_string(p.counted),
             p.counted == 1 ? "value" : "value bad");
  }
  if (rows.size() > kMaxRows) {
    svg.text(kLabelW, y + 12, "… and " + std::to_string(rows.size() - kMaxRows) + " more parameters",
             "legend");
    y += 22;
  }
  return y;
}
}  // namespace

std::string collective_picture(const core::CollectiveDetail& d, std::string_view kind,
                               const std::string& id) {
  constexpr double kRowLabelW = 96, kColW = 200, kTagY = 66, kTagH = 30, kFpY = 104, kFpH = 74;
  constexpr size_t kMaxRanks = 16;
  const size_t n = std::min(d.ranks.size(), kMaxRanks);
  std::vector<std::string> tags, fps;
  for (size_t i = 0; i < n; ++i) {
    // The tag, and where its tensor was made when that is known (what a swap of one call differs in).
    tags.push_back(d.ranks[i].origin.empty() ? d.ranks[i].tag : d.ranks[i].tag + " of " + d.ranks[i].origin);
    fps.push_back(d.ranks[i].fingerprint);
  }
  const std::vector<bool> tag_diff = differing(tags), fp_diff = differing(fps);
  Svg svg(id, kRowLabelW + kColW * static_cast<double>(std::max<size_t>(n, 1)) + kMargin, kFpY + kFpH + 44);
  svg.text(kMargin, 20, "group " + d.group + " · collective #" + std::to_string(d.index) + " of each rank",
           "box-title");
  svg.text(kRowLabelW - 8, kTagY + 19, "tag", "bar-label", Anchor::end);
  svg.text(kRowLabelW - 8, kFpY + 19, "fingerprint", "bar-label", Anchor::end);
  const size_t chars = static_cast<size_t>((kColW - 20) / kCharPx);
  for (size_t i = 0; i < n; ++i) {
    const auto& r = d.ranks[i];
    const double x = kRowLabelW + kColW * static_cast<double>(i);
    svg.text(x + 8, 42, "rank " + std::to_string(r.rank), "box-title");
    svg.text(x + 8, 57, truncate(r.stream, chars), "box-text");
    svg.rect(x + 2, kTagY, kColW - 4, kTagH, tag_diff[i] ? "cell diff" : "cell", tags[i]);
    svg.text(x + 10, kTagY + 19, truncate(tags[i], chars), "box-text");
    svg.rect(x + 2, kFpY, kColW - 4, kFpH, fp_diff[i] ? "cell diff" : "cell", r.fingerprint);
    svg.lines(x + 10, kFpY + 18, wrap(r.fingerprint, chars, 4), "box-text");
  }
  std::string note =
      "Highlighted cells differ from what most ranks issued; every rank must issue the same collective at "
      "the same position.";
  if (d.ranks.size() > n) note = std::to_string(d.ranks.size() - n) + " more ranks are not drawn. " + note;
  svg.lines(kMargin, kFpY + kFpH + 22,
            wrap(note, static_cast<size_t>((svg.width() - 2 * kMargin) / kCharPx), 2), "legend");
  return svg.finish(kPictureClass, kind,
                    "collective #" + std::to_string(d.index) + " of group " + d.group + " on each rank");
}

std::string norm_picture(const core::NormDetail& d, std::string_view kind, const std::string& id) {
  Svg svg(id, 640, 0);
  // A captured program's norm is known by what it counts, not by its values (NaN).
  const bool values = !std::isnan(d.expected);
  const double y = param_bars(svg, d, values ? norm_bars(svg, d, kMargin) + 12 : kMargin);
  svg.resize(svg.width(), y + 8);
  return svg.finish(kPictureClass, kind,
                    values
                        ? "gradient norm: expected " + number(d.expected) + ", reported " + number(d.reported)
                        : std::string("gradient norm: parameters by times counted"));
}

std::string element_picture(const core::ElementDetail& d, std::string_view kind, const std::string& id) {
  const bool same = (std::isnan(d.expected) && std::isnan(d.actual)) || d.expected == d.actual;
  std::vector<std::pair<std::string, std::string>> rows = {
      {"tensor", d.tensor},
      {"element", std::to_string(d.element)},
      {"step", std::to_string(d.step)},
      {d.other_rank >= 0 ? "ranks" : "rank",
       std::to_string(d.rank) + (d.other_rank >= 0 ? " and " + std::to_string(d.other_rank) : "")},
      {"expected", number(d.expected, 9)},
      {"actual", number(d.actual, 9)},
      {"difference", number(d.actual - d.expected, 3)}};
  constexpr double kW = 560, kRowH = 20;
  const auto note = wrap(d.note, static_cast<size_t>((kW - 2 * kMargin - 16) / kCharPx), 4);
  const double height =
      kMargin + 14 + kRowH * static_cast<double>(rows.size()) + 15 * static_cast<double>(note.size()) + 14;
  Svg svg(id, kW, height);
  svg.rect(1, 1, kW - 2, height - 2, "panel");
  double y = kMargin + 14;
  for (const auto& [key, value] : rows) {
    svg.text(kMargin + 100, y, key, "bar-label", Anchor::end);
    svg.text(kMargin + 112, y, truncate(value, 58), key == "actual" && !same ? "value bad" : "value");
    y += kRowH;
  }
  svg.lines(kMargin + 8, y + 6, note, "legend");
  return svg.finish(kPictureClass, kind,
                    std::string(kind) + " at " + d.tensor + "[" + std::to_string(d.element) + "], step " +
                        std::to_string(d.step));
}

std::string finding_picture(const core::Finding& f, const core::TraceLog& trace, const std::string& id) {
  const std::string_view kind = core::to_string(f.kind);
  return std::visit(core::Overloaded{
                        [&](const std::monostate&) { return placeholder(kind, id); },
                        [&](const core::RaceDetail& d) { return race_picture(d, trace, kind, id); },
                        [&](const core::CollectiveDetail& d) { return collective_picture(d, kind, id); },
                        [&](const core::DeadlockDetail& d) { return deadlock_picture(d, kind, id); },
                        [&](const core::NormDetail& d) { return norm_picture(d, kind, id); },
                        [&](const core::ElementDetail& d) { return element_picture(d, kind, id); },
                    },
                    f.detail);
}

}  // namespace shardcheck::reports
