// The SVG picture of each finding, drawn from its detail (a race's timeline, a deadlock's
// ring, the ranks' k-th collectives side by side, norm bars, an element panel), and the loss
// curves of a compare run. Each returns one <svg> element; `id` must be unique in the page.
//   html += finding_picture(finding, trace, "f0-1");
#pragma once

#include <string>
#include <string_view>

#include "core/base/trace_log.hpp"
#include "core/check/findings.hpp"
#include "reports/report_model.hpp"

namespace shardcheck::reports {

// class "finding-picture", data-kind = the finding's kind. `trace` may be empty.
std::string finding_picture(const core::Finding& f, const core::TraceLog& trace, const std::string& id);
// class "loss-plot".
std::string loss_plot(const CompareData& c, const std::string& id);

// One per detail type (race_picture.cpp, deadlock_picture.cpp, pictures.cpp).
std::string race_picture(const core::RaceDetail& d, const core::TraceLog& trace, std::string_view kind,
                         const std::string& id);
std::string deadlock_picture(const core::DeadlockDetail& d, std::string_view kind, const std::string& id);
std::string collective_picture(const core::CollectiveDetail& d, std::string_view kind, const std::string& id);
std::string norm_picture(const core::NormDetail& d, std::string_view kind, const std::string& id);
std::string element_picture(const core::ElementDetail& d, std::string_view kind, const std::string& id);

inline constexpr std::string_view kPictureClass = "finding-picture";

}  // namespace shardcheck::reports
