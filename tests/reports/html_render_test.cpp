// The HTML report in a real browser: headless Chromium loads the page from a file and dumps
// the DOM it built. A parse the browser repairs differently from what we meant (an unescaped
// '<', an unclosed element inside an SVG) shows up as a missing row or picture here.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "reports/report.hpp"
#include "tests/reports/sample_report.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/skip.hpp"

using namespace shardcheck;

namespace {
constexpr const char* kChromium = "/usr/bin/chromium";

// Loads `html` in headless Chromium (fresh profile, no network services) and returns the DOM.
std::string dump_dom(const std::string& html) {
  char dir[] = "/tmp/shardcheck-render-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string page = std::string(dir) + "/report.html", profile = std::string(dir) + "/profile";
  std::ofstream(page) << html;
  REQUIRE(mkdir(profile.c_str(), 0700) == 0);
  const auto r = testing::run_command(
      std::string("timeout 60 ") + kChromium +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
      " --disable-component-update --disable-sync --user-data-dir=" +
      profile + " --dump-dom file://" + page);
  std::filesystem::remove_all(dir);
  INFO("chromium stderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

// The value of attribute `name` in a start tag, or "" when it has none.
std::string attribute(const std::string& tag, const std::string& name) {
  std::smatch m;
  const std::regex re("\\s" + name + "=\"([^\"]*)\"");
  return std::regex_search(tag, m, re) ? m[1].str() : "";
}
}  // namespace

TEST_CASE("Chromium builds the summary table and every finding picture from the HTML report",
          "[reports][render]") {
  if (!std::filesystem::exists(kChromium)) SC_SKIP("chromium is not installed");
  const reports::Report report = testing::sample_report();
  const std::string dom = dump_dom(reports::to_html(report));

  const size_t table = dom.find("<table id=\"summary\">");
  REQUIRE(table != std::string::npos);
  const size_t body = dom.find("<tbody>", table), body_end = dom.find("</tbody>", body);
  REQUIRE(body_end != std::string::npos);
  const std::string rows = dom.substr(body, body_end - body);
  const std::regex row("<tr>");
  REQUIRE(static_cast<size_t>(std::distance(std::sregex_iterator(rows.begin(), rows.end(), row),
                                            std::sregex_iterator())) == report.scenarios.size());

  std::vector<std::string> kinds;  // data-kind of each svg.finding-picture, in page order
  const std::regex svg("<svg\\s[^>]*>");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), svg); it != std::sregex_iterator(); ++it) {
    const std::string tag = it->str();
    if (attribute(tag, "class") == "finding-picture") kinds.push_back(attribute(tag, "data-kind"));
  }
  std::vector<std::string> expected;
  for (const auto& s : report.scenarios) {
    for (const auto& f : s.findings) expected.emplace_back(core::to_string(f.kind));
  }
  REQUIRE(kinds == expected);

  // The explanation's markup-looking text stayed text: no <b> element was made of it.
  REQUIRE_THAT(dom, Catch::Contains("&lt;b&gt;not bold&lt;/b&gt;"));
  REQUIRE_THAT(dom, !Catch::Contains("<b>not bold"));
}

TEST_CASE("the demo's own report renders with a row per scenario and a picture per finding",
          "[reports][render]") {
  if (!std::filesystem::exists(kChromium)) SC_SKIP("chromium is not installed");
  char dir[] = "/tmp/shardcheck-demo-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const auto demo = testing::run_command(std::string(SHARDCHECK_BINARY) + " demo --scenarios " +
                                         SHARDCHECK_SOURCE_DIR + "/scenarios --out " + dir + "/report");
  INFO(demo.out << demo.err);
  REQUIRE(demo.exit_code == 0);
  REQUIRE_THAT(demo.out, Catch::Contains("scenarios met their expectations"));
  std::ifstream json_in(std::string(dir) + "/report/report.json");
  std::stringstream json;
  json << json_in.rdbuf();
  // Counts from the JSON report, then the same counts from the DOM Chromium built.
  const std::string j = json.str();
  size_t scenarios = 0, findings = 0;
  for (size_t at = j.find("\"reproducer\""); at != std::string::npos; at = j.find("\"reproducer\"", at + 1))
    ++findings;
  for (size_t at = j.find("\"schedules\""); at != std::string::npos; at = j.find("\"schedules\"", at + 1))
    ++scenarios;
  REQUIRE(scenarios >= 30);
  REQUIRE(findings >= 15);
  std::ifstream html_in(std::string(dir) + "/report/report.html");
  std::stringstream html;
  html << html_in.rdbuf();
  const std::string dom = dump_dom(html.str());
  std::filesystem::remove_all(dir);
  const size_t body = dom.find("<tbody>", dom.find("<table id=\"summary\">"));
  const std::string rows = dom.substr(body, dom.find("</tbody>", body) - body);
  size_t row_count = 0, pictures = 0;
  for (size_t at = rows.find("<tr"); at != std::string::npos; at = rows.find("<tr", at + 1)) ++row_count;
  for (size_t at = dom.find("finding-picture"); at != std::string::npos;
       at = dom.find("finding-picture", at + 1))
    ++pictures;
  REQUIRE(row_count == scenarios);
  REQUIRE(pictures >= findings);  // the CSS names the class too; every finding has one picture
}
