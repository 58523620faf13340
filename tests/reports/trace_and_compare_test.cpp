// The Chrome trace's arguments, counters, marks, cut markers and finding places, and the report
// parts that must agree with the findings: the compare section's schedule and verdict, the
// |Δloss| panel beside the loss curves, and what a scenario's runs checked.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "reports/chrome_trace.hpp"
#include "reports/pictures.hpp"
#include "reports/report.hpp"

using namespace shardcheck;

namespace {
// Two ranks, a kernel and a collective each, the end of step 0 marked, one pool's bytes.
core::TraceLog small_log() {
  core::TraceLog log;
  log.ranks = 2;
  for (int r = 0; r < 2; ++r) {
    log.threads.push_back({r, 0, "host"});
    log.threads.push_back({r, 1, "compute"});
  }
  for (int r = 0; r < 2; ++r) {
    core::TraceLog::Slice k{.rank = r,
                            .tid = 1,
                            .ts_us = 10 + r,
                            .name = "kernel 'fc1'",
                            .category = "kernel",
                            .op = static_cast<uint32_t>(10 + r)};
    k.buffers = {"acts#2", "w#1"};
    k.buffer = "acts";
    k.lifetime = 2;
    k.bytes = 4096;
    log.slices.push_back(k);
    core::TraceLog::Slice c{.rank = r,
                            .tid = 1,
                            .ts_us = 20,
                            .name = "all_reduce 'grad_norm'",
                            .category = "collective",
                            .op = static_cast<uint32_t>(20 + r)};
    c.buffers = {"norm#1"};
    c.buffer = "norm";
    c.lifetime = 1;
    c.bytes = 8;
    c.group = "dp";
    c.seq = 3;
    log.slices.push_back(c);
    log.marks.push_back({r, 30 + r, core::step_end_mark(0)});
  }
  log.counters = {{0, "compute", 5, 4096}, {0, "compute", 25, 0}, {1, "compute", 5, 4096}};
  return log;
}

nlohmann::json instants_named(const nlohmann::json& trace, const std::string& name) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("name", "") == name && e["ph"] == "i") out.push_back(e);
  }
  return out;
}
}  // namespace

TEST_CASE("each trace slice carries its buffer, bytes, lifetime, group and collective index",
          "[reports][trace]") {
  const auto j = nlohmann::json::parse(reports::chrome_trace(small_log(), {}));
  int kernels = 0, collectives = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const auto& a = e["args"];
    if (e["cat"] == "kernel") {
      ++kernels;
      REQUIRE(a["buffer"] == "acts");
      REQUIRE(a["lifetime"] == 2);
      REQUIRE(a["bytes"] == 4096);
      REQUIRE(a["buffers"] == nlohmann::json::array({"acts#2", "w#1"}));
      REQUIRE_FALSE(a.contains("group"));
    } else {
      ++collectives;
      REQUIRE(a["group"] == "dp");
      REQUIRE(a["seq"] == 3);
      REQUIRE(a["bytes"] == 8);
      REQUIRE_FALSE(a.contains("buffers"));  // one buffer: no list
    }
  }
  REQUIRE(kernels == 2);
  REQUIRE(collectives == 2);
}

TEST_CASE("a trace has a memory counter track per stream pool and the host programs' marks",
          "[reports][trace]") {
  const auto j = nlohmann::json::parse(reports::chrome_trace(small_log(), {}));
  int counters = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "C") continue;
    ++counters;
    REQUIRE(e["name"] == "memory compute");
    REQUIRE(e["args"].contains("live bytes"));
  }
  REQUIRE(counters == 3);
  REQUIRE(instants_named(j, "end of step 0").size() == 2);
}

TEST_CASE("a trace cut to a window says so with markers and metadata, and an uncut one does not",
          "[reports][trace]") {
  core::TraceLog log = small_log();
  auto whole = nlohmann::json::parse(reports::chrome_trace(log, {}));
  REQUIRE_FALSE(whole["otherData"].contains("cut"));
  for (const auto& e : whole["traceEvents"]) REQUIRE(e.value("cat", "") != "trace_cut");
  log.cut = {5000, 900, 100, "the 4000 slices around the operation the finding concerns"};
  const auto cut = nlohmann::json::parse(reports::chrome_trace(log, {}));
  REQUIRE(cut["otherData"]["cut"]["slices_total"] == 5000);
  REQUIRE(cut["otherData"]["cut"]["dropped_before"] == 900);
  REQUIRE(cut["otherData"]["cut"]["dropped_after"] == 100);
  REQUIRE(cut["otherData"]["cut"]["slices_shown"] == log.slices.size());
  REQUIRE(instants_named(cut, "trace cut: 900 earlier slices not shown").size() == 1);
  REQUIRE(instants_named(cut, "trace cut: 100 later slices not shown").size() == 1);
}

TEST_CASE("every non-race finding sits on the operation it concerns, not at time 0", "[reports][trace]") {
  const core::TraceLog log = small_log();
  core::Finding numerics;
  numerics.kind = core::FindingKind::numerics_divergence;
  numerics.summary = "after step 0, rank 1's main weight differs";
  numerics.detail = core::ElementDetail{0, "w", 3, 1, -1, 1.0, 2.0, "", {}};
  core::Finding norm;
  norm.kind = core::FindingKind::grad_norm_miscount;
  core::NormDetail nd;
  nd.step = 0;
  nd.rank = 0;
  norm.detail = nd;
  core::Finding uninit;
  uninit.kind = core::FindingKind::uninitialized_read;
  uninit.detail = core::ElementDetail{};
  uninit.op = 11;  // rank 1's kernel
  core::Finding coll;
  coll.kind = core::FindingKind::collective_mismatch;
  core::CollectiveDetail cd;
  cd.group = "dp";
  cd.index = 3;
  cd.ranks = {{0, "compute", "all_reduce f32 1", "a", {}}, {1, "compute", "all_reduce f32 2", "b", {}}};
  coll.detail = cd;

  auto place = reports::finding_place(log, numerics);
  REQUIRE(place);
  REQUIRE(place->rank == 1);
  REQUIRE(place->ts_us == 31);  // rank 1's end of step 0
  place = reports::finding_place(log, norm);
  REQUIRE((place && place->ts_us == 30 && place->rank == 0));
  place = reports::finding_place(log, uninit);
  REQUIRE((place && place->ts_us == 11 && place->rank == 1 && place->tid == 1));
  place = reports::finding_place(log, coll);
  REQUIRE((place && place->ts_us == 20));

  const auto j = nlohmann::json::parse(reports::chrome_trace(log, {numerics, norm, uninit, coll}));
  int findings = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("cat", "") != "finding") continue;
    ++findings;
    INFO(e.dump());
    REQUIRE(e["ts"] != 0);
  }
  REQUIRE(findings == 5);  // the collective once per rank
  REQUIRE(instants_named(j, "collective_mismatch").size() == 2);
}

TEST_CASE("a finding whose operation is outside the timeline says so instead of sitting at a wrong place",
          "[reports][trace]") {
  core::Finding f;
  f.kind = core::FindingKind::numerics_divergence;
  f.summary = "after step 7";
  f.detail = core::ElementDetail{7, "w", 0, 0, -1, 1, 2, "", {}};
  REQUIRE_FALSE(reports::finding_place(small_log(), f));
  const auto j = nlohmann::json::parse(reports::chrome_trace(small_log(), {f}));
  const auto list = instants_named(j, "numerics_divergence");
  REQUIRE(list.size() == 1);
  REQUIRE_THAT(list[0]["args"]["finding"].get<std::string>(), Catch::Contains("not in this timeline"));
}

namespace {
reports::ScenarioResult divergent_but_equal() {
  reports::ScenarioResult s;
  s.name = "vpp";
  s.file = "vpp.yaml";
  s.kind = "training";
  s.expected = "numerics_divergence";
  s.found = {core::FindingKind::numerics_divergence};
  s.met = true;
  s.schedules = 4;
  reports::CompareData c;
  c.against = "single_rank";
  c.series = {{"optim", {4.2, 3.1, 1.2}}, {"single_rank", {4.2, 3.1, 1.2}}};
  c.bitwise_equal = true;
  c.schedule = "seed 5 (the schedule that found the numerics_divergence above)";
  s.compare = c;
  return s;
}
}  // namespace

TEST_CASE(
    "a compare section under a numerics_divergence names its schedule and never just says bitwise equal",
    "[reports][compare]") {
  reports::Report r;
  r.scenarios.push_back(divergent_but_equal());
  for (const std::string& page : {reports::to_markdown(r), reports::to_html(r)}) {
    REQUIRE_THAT(page, Catch::Contains("weights bitwise equal after the last step: yes, on schedule seed 5"));
    REQUIRE_THAT(page, Catch::Contains("is not visible in these weights"));
  }
  r.scenarios[0].found.clear();  // a clean scenario: "yes" needs no words
  REQUIRE_THAT(reports::to_markdown(r), !Catch::Contains("not visible"));
  REQUIRE(nlohmann::json::parse(reports::to_json(r))["scenarios"][0]["compare"]["schedule"] ==
          "seed 5 (the schedule that found the numerics_divergence above)");
}

TEST_CASE("the loss plot draws |Δloss| per step on a log axis and keeps identical curves both visible",
          "[reports][compare]") {
  reports::CompareData c = divergent_but_equal().compare.value();
  std::string svg = reports::loss_plot(c, "p");
  REQUIRE_THAT(svg, Catch::Contains("|Δloss| (log)"));
  REQUIRE_THAT(svg, Catch::Contains("series series-1 line overlay"));  // dashed, on top
  REQUIRE_THAT(svg, Catch::Contains("series series-1 mark"));          // its own marker shape
  REQUIRE_THAT(svg, Catch::Contains("(the curves coincide)"));
  REQUIRE_THAT(svg, Catch::Contains("identical at every step"));
  // A divergence of 0.007 on a loss near 1.2: its decade is on the axis.
  c.series[1].losses = {4.2, 3.1, 1.207};
  svg = reports::loss_plot(c, "p");
  REQUIRE_THAT(svg, Catch::Contains(">1e-3<"));
  REQUIRE_THAT(svg, Catch::Contains("delta line") || Catch::Contains("delta dot"));
  REQUIRE_THAT(svg, !Catch::Contains("(the curves coincide)"));
}

TEST_CASE("a scenario's page says what its runs checked, not one line", "[reports]") {
  reports::Report r;
  reports::ScenarioResult s;
  s.name = "clean";
  s.file = "clean.yaml";
  s.kind = "training";
  s.expected = "clean";
  s.met = true;
  s.schedules = 200;
  s.policy = "pct";
  s.checked = reports::CheckedData{41230, 12004, 1800, 3100000, 3, {"stream_race", "numerics_divergence"}};
  r.scenarios.push_back(s);
  const std::string md = reports::to_markdown(r), html = reports::to_html(r);
  REQUIRE_THAT(md, Catch::Contains("### What was checked"));
  REQUIRE_THAT(
      md, Catch::Contains("200 schedules of 3 training steps each: 41,230 scheduler steps, 12,004 stream "
                          "operations, 1,800 collectives or transfers, 3.1 MB of memory accesses checked"));
  REQUIRE_THAT(md, Catch::Contains("looked for: stream_race, numerics_divergence"));
  REQUIRE_THAT(html, Catch::Contains("<h3>What was checked</h3>"));
  REQUIRE_THAT(html, Catch::Contains("<code>numerics_divergence</code>"));
  REQUIRE_THAT(html, Catch::Contains("<td class=\"num\">1800</td>"));
  const auto j = nlohmann::json::parse(reports::to_json(r));
  REQUIRE(j["scenarios"][0]["checked"]["collectives"] == 1800);
  REQUIRE(j["scenarios"][0]["checked"]["detectors"].size() == 2);
}
