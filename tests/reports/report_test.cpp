// The report renderers on a hand-built report holding every detail type: the Markdown summary
// rows, the JSON schema field by field, the HTML page's table, pictures and escaping, and the
// report folder that write_report leaves behind.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/base/text.hpp"
#include "reports/chrome_trace.hpp"
#include "reports/report.hpp"
#include "tests/reports/sample_report.hpp"

using namespace shardcheck;
using shardcheck::testing::sample_report;

namespace {
size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

std::string temp_dir() {
  char path[] = "/tmp/shardcheck-report-test-XXXXXX";
  REQUIRE(mkdtemp(path) != nullptr);
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every tag of an HTML page (from '<' to '>'): markup, as opposed to text.
std::vector<std::string> tags(const std::string& html) {
  std::vector<std::string> out;
  for (size_t p = html.find('<'); p != std::string::npos; p = html.find('<', p + 1)) {
    const size_t end = html.find('>', p);
    REQUIRE(end != std::string::npos);
    out.push_back(html.substr(p, end - p + 1));
  }
  return out;
}
}  // namespace

TEST_CASE("reproducer names the file and the seed, and the policy only when one was given", "[reports]") {
  const reports::Report r = sample_report();
  REQUIRE(reports::reproducer(r.scenarios[0], r.scenarios[0].findings[0]) ==
          "shardcheck replay scenarios/trace/reuse-race.yaml --seed 7 --policy pct");
  REQUIRE(reports::reproducer(r.scenarios[1], r.scenarios[1].findings[0]) ==
          "shardcheck replay scenarios/training/post-step-order.yaml --seed 3");
  reports::ScenarioResult odd = r.scenarios[1];
  odd.file = "my scenarios/it's.yaml";  // must survive being pasted into a shell
  REQUIRE(reports::reproducer(odd, odd.findings[0]) ==
          "shardcheck replay 'my scenarios/it'\\''s.yaml' --seed 3");
}

TEST_CASE("Markdown has one summary row per scenario with expected, found, schedules, time and result",
          "[reports]") {
  const std::string md = reports::to_markdown(sample_report());
  REQUIRE_THAT(md, Catch::Contains("| scenario | expected | found | schedules explored | time | result |"));
  REQUIRE_THAT(md,
               Catch::Contains("| reuse-race | stream_race | stream_race, deadlock | 12 | 0.25 s | ok |"));
  REQUIRE_THAT(
      md,
      Catch::Contains(
          "| post-step-order | collective_mismatch | collective_mismatch, collective_swap, deadlock | 200 | "
          "3.50 s | **FAILED** |"));
  REQUIRE_THAT(md, Catch::Contains("| compare-distopt | clean | clean | 1 | 12.00 s | ok |"));
  REQUIRE_THAT(md, Catch::Contains("4 scenarios: 3 met expectations, 1 failed; 10 findings."));
}

TEST_CASE(
    "a name with a newline, '#', backticks, HTML and controls cannot break report.md's code spans, "
    "inject a heading or raw HTML, or drive a terminal that shows report.md or report.html",
    "[reports]") {
  reports::Report r = sample_report();
  r.scenarios[0].name = "x\n# Injected\n<script>alert(1)</script>\x1b]0;t\x07";
  r.scenarios[0].file = "caps/a`b``\n# Also injected\xE2\x80\xAE";
  r.scenarios[0].description = "1. not a list\n## not a heading";
  const std::string md = reports::to_markdown(r);
  REQUIRE(md.find("\n# Injected") == std::string::npos);
  REQUIRE(md.find("\n# Also injected") == std::string::npos);
  REQUIRE(md.find("<script>") == std::string::npos);
  REQUIRE(md.find('\x1b') == std::string::npos);
  REQUIRE(md.find("\xE2\x80\xAE") == std::string::npos);
  REQUIRE_THAT(md, Catch::Contains("``` caps/a`b``\\n# Also injected\\u202e ```"));  // one code span
  REQUIRE_THAT(md, Catch::Contains("\n1\\. not a list ## not a heading\n"));
  REQUIRE_THAT(md, Catch::Contains("$'caps/a`b``\\x0a# Also injected\\xe2\\x80\\xae'"));  // runs as printed
  const std::string html = reports::to_html(r);
  REQUIRE(html.find("<script>alert") == std::string::npos);
  REQUIRE(html.find('\x1b') == std::string::npos);
  REQUIRE(html.find("\xE2\x80\xAE") == std::string::npos);
}

TEST_CASE("Markdown puts explanations and reproducers in code blocks and flags an incomplete report",
          "[reports]") {
  reports::Report r = sample_report();
  const std::string md = reports::to_markdown(r);
  REQUIRE_THAT(md, Catch::Contains("> **Incomplete report:** interrupted by SIGINT."));
  REQUIRE_THAT(md, Catch::Contains("```text\nThe block of grad was reused for act while <b>not bold</b> & "
                                   "still in use.\n  missing: an edge\n"));
  REQUIRE_THAT(
      md,
      Catch::Contains("```sh\nshardcheck replay scenarios/trace/reuse-race.yaml --seed 7 --policy pct\n```"));
  REQUIRE_THAT(md, Catch::Contains("`trace-reuse-race-0.json`"));
  r.complete = true;
  REQUIRE_THAT(reports::to_markdown(r), !Catch::Contains("Incomplete report"));
}

TEST_CASE("Markdown compare table has a row per step with the largest and relative difference", "[reports]") {
  const std::string md = reports::to_markdown(sample_report());
  REQUIRE_THAT(md, Catch::Contains("| step | optim_grads_params | distopt | max \\|Δ\\| | relative Δ |"));
  REQUIRE_THAT(md, Catch::Contains("| 0 | 4.2 | 4.2 | 0 | 0 |"));
  REQUIRE_THAT(md, Catch::Contains("| 3 | 3.1 | 3.2 | 0.1 | 0.0313 |"));
  REQUIRE_THAT(md, Catch::Contains("first divergence: step 2, tensor layers.1.fc1.weight, element 17"));
  REQUIRE_THAT(md, Catch::Contains("achievable loss (the data's entropy rate): 2.5 nats"));
}

TEST_CASE("JSON report carries the schema, its version, the totals and each scenario's fields", "[reports]") {
  const auto j = nlohmann::json::parse(reports::to_json(sample_report()));
  REQUIRE(j["schema"] == "shardcheck-report");
  REQUIRE(j["schema_version"] == 1);
  REQUIRE(j["title"] == "shardcheck report <sample>");
  REQUIRE(j["complete"] == false);
  REQUIRE(j["incomplete_reason"] == "interrupted by SIGINT");
  REQUIRE(j["totals"] ==
          nlohmann::json({{"scenarios", 4}, {"met", 3}, {"failed", 1}, {"no_verdict", 0}, {"findings", 10}}));
  const auto& s = j["scenarios"][0];
  REQUIRE(s["name"] == "reuse-race");
  REQUIRE(s["file"] == "scenarios/trace/reuse-race.yaml");
  REQUIRE(s["kind"] == "trace");
  REQUIRE(s["expected"] == "stream_race");
  REQUIRE(s["found"] == nlohmann::json({"stream_race", "deadlock"}));
  REQUIRE(s["met"] == true);
  REQUIRE(s["judged"] == true);
  REQUIRE(s["schedules"] == 12);
  REQUIRE(s["seconds"] == 0.25);
  REQUIRE(s["error"] == "");
  REQUIRE(s["compare"].is_null());
  const auto& f = s["findings"][0];
  REQUIRE(f["kind"] == "stream_race");
  REQUIRE(f["key"] == "race|grad|act");
  REQUIRE(f["seed"] == 7);
  REQUIRE(f["occurrences"] == 3);
  REQUIRE(f["reproducer"] == "shardcheck replay scenarios/trace/reuse-race.yaml --seed 7 --policy pct");
  REQUIRE(f["trace"] == "trace-reuse-race-0.json");
  REQUIRE(s["findings"][1]["trace"].is_null());
  const auto& c = j["scenarios"][3]["compare"];
  REQUIRE(c["against"] == "distopt");
  REQUIRE(c["series"][1] == nlohmann::json({{"label", "distopt"}, {"losses", {4.2, 3.9, 3.52, 3.2}}}));
  REQUIRE(c["max_abs_diff"] == 0.1);
  REQUIRE(c["max_rel_diff"] == 0.03125);
  REQUIRE(c["bitwise_equal"] == false);
  REQUIRE(c["first_divergent"] == "step 2, tensor layers.1.fc1.weight, element 17");
  REQUIRE(c["achievable_loss"] == 2.5);
}

TEST_CASE("JSON says why a report stopped, which scenario was cut short, and each determinism check",
          "[reports]") {
  reports::Report r = sample_report();
  r.scenarios[0].determinism = reports::DeterminismData{12, true, ""};
  r.scenarios[1].complete = false;
  r.scenarios[1].determinism =
      reports::DeterminismData{200, false, "run 3 (seed 3): trace digest 1, then 2 on the rerun"};
  auto j = nlohmann::json::parse(reports::to_json(r));
  REQUIRE(j["stopped"] == "interrupted");
  REQUIRE(j["scenarios"][0]["complete"] == true);
  REQUIRE(j["scenarios"][0]["determinism"] ==
          nlohmann::json({{"runs", 12}, {"matched", true}, {"mismatch", ""}}));
  REQUIRE(j["scenarios"][1]["complete"] == false);
  REQUIRE(j["scenarios"][1]["determinism"]["matched"] == false);
  REQUIRE(j["scenarios"][1]["determinism"]["mismatch"] ==
          "run 3 (seed 3): trace digest 1, then 2 on the rerun");
  REQUIRE(j["scenarios"][2]["determinism"].is_null());  // not checked
  // The keys added within version 1 come after the ones a version-1 reader already knows.
  const auto ordered = nlohmann::ordered_json::parse(reports::to_json(r));
  std::vector<std::string> keys;
  for (const auto& [k, v] : ordered.items()) keys.push_back(k);
  REQUIRE(keys == std::vector<std::string>{"schema", "schema_version", "title", "command", "complete",
                                           "incomplete_reason", "stopped", "scenarios", "totals"});
  std::vector<std::string> scenario_keys;
  for (const auto& [k, v] : ordered["scenarios"][0].items()) scenario_keys.push_back(k);
  REQUIRE(std::vector<std::string>(scenario_keys.end() - 3, scenario_keys.end()) ==
          std::vector<std::string>{"complete", "determinism", "checked"});
  r.complete = true;
  r.stopped.clear();
  REQUIRE(nlohmann::json::parse(reports::to_json(r))["stopped"].is_null());

  const std::string md = reports::to_markdown(r);
  REQUIRE_THAT(
      md,
      Catch::Contains(
          "Determinism: 12 schedules rerun with the same seeds: every trace digest and finding repeated"));
  REQUIRE_THAT(md, Catch::Contains("**Stopped early:** after 200 schedules"));
  REQUIRE_THAT(
      md, Catch::Contains("**Nondeterministic:** 200 schedules rerun with the same seeds: run 3 (seed 3)"));
  const std::string html = reports::to_html(r);
  REQUIRE(count(html, "<p class=\"determinism\" data-matched=\"true\">") == 1);
  REQUIRE(count(html, "<p class=\"determinism\" data-matched=\"false\">") == 1);
  REQUIRE(count(html, "<p class=\"stopped\">") == 1);
}

TEST_CASE("JSON report carries every field of every detail type", "[reports]") {
  const auto j = nlohmann::json::parse(reports::to_json(sample_report()));
  const auto& race = j["scenarios"][0]["findings"][0]["detail"];
  REQUIRE(race["type"] == "race");
  REQUIRE(race["first"] == nlohmann::json({{"rank", 0},
                                           {"stream", "rs"},
                                           {"op", "reduce_scatter 'grad'"},
                                           {"step", 9},
                                           {"op_id", 9},
                                           {"buffer", "grad"},
                                           {"lifetime", 1},
                                           {"address", 4096},
                                           {"byte_begin", 0},
                                           {"byte_end", 4096},
                                           {"write", false}}));
  REQUIRE(race["second"]["write"] == true);
  REQUIRE(race["second"]["lifetime"] == 2);
  REQUIRE(race["reuse"] == true);
  REQUIRE(race["missing_edge"].get<std::string>().find("no happens-before edge") == 0);
  REQUIRE(race["fixes"].size() == 2);

  const auto& cycle = j["scenarios"][0]["findings"][1]["detail"];
  REQUIRE(cycle["type"] == "deadlock");
  REQUIRE(cycle["is_cycle"] == true);
  REQUIRE(cycle["cycle"][1] == nlohmann::json({{"rank", 0},
                                               {"where", "rs"},
                                               {"op", "all_gather 'w1' on dp"},
                                               {"waits_for", "rank 1 rs to issue all_gather 'w1'"}}));
  REQUIRE(j["scenarios"][1]["findings"][2]["detail"]["is_cycle"] == false);

  const auto& coll = j["scenarios"][1]["findings"][0]["detail"];
  REQUIRE(coll["type"] == "collective");
  REQUIRE(coll["group"] == "dp");
  REQUIRE(coll["index"] == 4);
  REQUIRE(coll["ranks"].size() == 4);
  REQUIRE(coll["ranks"][3] == nlohmann::json({{"rank", 3},
                                              {"stream", "ag"},
                                              {"fingerprint", "all_gather bf16 64->256 on dp [0,1,2,3]"},
                                              {"tag", "post_step.group1"}}));

  const auto& norm = j["scenarios"][2]["findings"][0]["detail"];
  REQUIRE(norm["type"] == "norm");
  REQUIRE(norm["expected"] == 5.0);
  REQUIRE(norm["reported"] == 7.0710678);
  REQUIRE(norm["params"][1] == nlohmann::json({{"name", "output.weight (shared)"}, {"counted", 2}}));

  const auto& el = j["scenarios"][2]["findings"][2]["detail"];
  REQUIRE(el == nlohmann::json({{"type", "element"},
                                {"step", 2},
                                {"tensor", "layers.1.fc1.weight"},
                                {"element", 17},
                                {"rank", 1},
                                {"other_rank", 2},
                                {"expected", 0.25},
                                {"actual", 0.26},
                                {"note", "first element that differs"}}));
  REQUIRE(j["scenarios"][2]["findings"][4]["detail"]["actual"].is_null());  // NaN has no JSON spelling
}

TEST_CASE("HTML has the summary table and one finding picture per finding, of the finding's kind",
          "[reports]") {
  const reports::Report r = sample_report();
  const std::string html = reports::to_html(r);
  REQUIRE(count(html, "<table id=\"summary\">") == 1);
  const size_t body = html.find("<tbody>", html.find("id=\"summary\""));
  REQUIRE(count(html.substr(body, html.find("</tbody>", body) - body), "<tr>") == r.scenarios.size());
  std::vector<std::string> kinds;
  const std::regex svg_tag("<svg class=\"finding-picture\" data-kind=\"([a-z_]+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), svg_tag); it != std::sregex_iterator(); ++it)
    kinds.push_back((*it)[1]);
  std::vector<std::string> expected;
  for (const auto& s : r.scenarios) {
    for (const auto& f : s.findings) expected.emplace_back(core::to_string(f.kind));
  }
  REQUIRE(kinds == expected);
  REQUIRE(count(html, "<svg class=\"loss-plot\"") == 1);
  REQUIRE_THAT(html, Catch::Contains("class=\"race-edge\""));  // the missing edge, dashed in red
  REQUIRE_THAT(html, Catch::Contains("class=\"cell diff\""));  // the differing collective
  REQUIRE_THAT(html, Catch::Contains("class=\"box never\""));  // the chain's end
  REQUIRE_THAT(html, Catch::Contains("class=\"achievable\""));
  REQUIRE_THAT(
      html, Catch::Contains(
                "<li>call record_stream(&#39;grad&#39;, &#39;rs&#39;) before freeing &#39;grad&#39;</li>"));
  REQUIRE_THAT(html, Catch::Contains("class=\"banner\""));
}

TEST_CASE("HTML fetches nothing and escapes the text it shows", "[reports]") {
  const std::string html = reports::to_html(sample_report());
  for (const std::string& tag : tags(html)) {
    INFO(tag);
    REQUIRE(tag.find("http://") == std::string::npos);
    REQUIRE(tag.find("https://") == std::string::npos);
    REQUIRE(tag.find("<script") == std::string::npos);
    REQUIRE(tag.find("<link") == std::string::npos);
    REQUIRE(tag.find(" src=") == std::string::npos);
  }
  REQUIRE_THAT(html, !Catch::Contains("url(http"));
  // The URL in the explanation stays, as text; the markup-looking text is escaped.
  REQUIRE_THAT(html, Catch::Contains("See https://github.com/NVIDIA/Megatron-LM/pull/6187"));
  REQUIRE_THAT(
      html, Catch::Contains("while &lt;b&gt;not bold&lt;/b&gt; &amp; still in use.\n  missing: an edge\n"));
  REQUIRE_THAT(html, !Catch::Contains("<b>not bold"));
  REQUIRE_THAT(html, Catch::Contains("<title>shardcheck report &lt;sample&gt;</title>"));
}

TEST_CASE("HTML still draws a picture for a finding that carries no detail", "[reports]") {
  reports::Report r = sample_report();
  r.scenarios[3].findings.push_back(r.scenarios[0].findings[0]);
  r.scenarios[3].findings.back().detail = std::monostate{};
  const std::string html = reports::to_html(r);
  REQUIRE(count(html, "class=\"finding-picture\"") == 11);
  REQUIRE_THAT(html, Catch::Contains("no structured detail was recorded"));
}

TEST_CASE("write_report writes every file atomically and leaves no temporary files", "[reports]") {
  const std::string root = temp_dir(), dir = root + "/nested/out";
  const reports::Report r = sample_report();
  const core::Status s = reports::write_report(r, dir);
  REQUIRE(s.ok());
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename().string());
  REQUIRE(names == std::set<std::string>{".shardcheck-report", "report.md", "report.html", "report.json",
                                         "trace-reuse-race-0.json"});
  REQUIRE(read(dir + "/report.md") == reports::to_markdown(r));
  REQUIRE(read(dir + "/report.html") == reports::to_html(r));
  REQUIRE(nlohmann::json::parse(read(dir + "/report.json"))["schema_version"] == 1);
  const auto trace = nlohmann::json::parse(read(dir + "/trace-reuse-race-0.json"));
  REQUIRE(trace["traceEvents"].size() > 24);
  std::filesystem::remove_all(root);
}

TEST_CASE("write_report into a reused folder leaves no trace of the earlier report", "[reports]") {
  const std::string root = temp_dir(), dir = root + "/out";
  REQUIRE(reports::write_report(sample_report(), dir).ok());
  REQUIRE(std::filesystem::exists(dir + "/trace-reuse-race-0.json"));
  std::ofstream(dir + "/notes.txt") << "mine";  // not a report's file: kept
  reports::Report clean = sample_report();
  for (auto& s : clean.scenarios) {
    s.findings.clear();
    s.finding_traces.clear();
  }
  REQUIRE(reports::write_report(clean, dir).ok());
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename().string());
  REQUIRE(names == std::set<std::string>{".shardcheck-report", "report.md", "report.html", "report.json",
                                         "notes.txt"});
  std::filesystem::remove_all(root);
}

// Every entry under `dir`, each with its inode: what a report must leave exactly as it was.
std::map<std::string, ino_t> entries_under(const std::string& dir) {
  std::map<std::string, ino_t> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = st.st_ino;
  }
  return out;
}

TEST_CASE("write_report swaps the whole folder in: earlier leftovers go, the user's files and links stay",
          "[reports]") {
  const std::string root = temp_dir(), dir = root + "/out";
  REQUIRE(reports::write_report(sample_report(), dir).ok());
  REQUIRE(std::filesystem::exists(dir + "/.shardcheck-report"));
  std::ofstream(dir + "/report.json.tmp.99999") << "half";  // what a killed writer left
  std::ofstream(dir + "/trace-gone-7.json") << "{}";
  std::ofstream(dir + "/notes.txt") << "mine";
  std::filesystem::create_symlink("notes.txt", dir + "/latest");
  // A killed writer's new folder (marked: it is the report's) and a user's folder of a like name.
  std::filesystem::create_directory(root + "/.out.tmp.99999.0");
  std::ofstream(root + "/.out.tmp.99999.0/.shardcheck-report") << "";
  std::filesystem::create_directory(root + "/.out.tmp.12.3");
  std::ofstream(root + "/.out.tmp.12.3/keep.txt") << "mine";
  REQUIRE(reports::write_report(sample_report(), dir).ok());
  std::set<std::string> names, siblings;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename().string());
  for (const auto& e : std::filesystem::directory_iterator(root))
    siblings.insert(e.path().filename().string());
  REQUIRE(names == std::set<std::string>{".shardcheck-report", "report.md", "report.html", "report.json",
                                         "trace-reuse-race-0.json", "notes.txt", "latest"});
  REQUIRE(read(dir + "/notes.txt") == "mine");
  REQUIRE(std::filesystem::read_symlink(dir + "/latest") == "notes.txt");
  REQUIRE(siblings == std::set<std::string>{"out", ".out.tmp.12.3"});
  REQUIRE(read(root + "/.out.tmp.12.3/keep.txt") == "mine");
  std::filesystem::remove_all(root);
}

TEST_CASE("write_report refuses a folder it did not make, so --report / would move nothing", "[reports]") {
  const std::string root = temp_dir(), dir = root + "/home";
  std::filesystem::create_directories(dir + "/projects/src");
  std::ofstream(dir + "/projects/src/main.cpp") << "int main() {}";
  std::ofstream(dir + "/.bashrc") << "export A=1";
  const auto before = entries_under(root);
  const core::Status s = reports::write_report(sample_report(), dir);
  REQUIRE_FALSE(s.ok());
  REQUIRE_THAT(s.message(), Catch::Contains("holds files no report of shardcheck's wrote"));
  REQUIRE_FALSE(reports::check_report_folder(dir).ok());
  REQUIRE(entries_under(root) == before);
  std::filesystem::remove_all(root);
}

TEST_CASE("write_report refuses a report folder that holds a folder, which a swap would strand",
          "[reports]") {
  const std::string root = temp_dir(), dir = root + "/out";
  REQUIRE(reports::write_report(sample_report(), dir).ok());
  std::filesystem::create_directory(dir + "/mine");
  std::ofstream(dir + "/mine/keep.txt") << "mine";
  const auto before = entries_under(root);
  const core::Status s = reports::write_report(sample_report(), dir);
  REQUIRE_FALSE(s.ok());
  REQUIRE_THAT(s.message(), Catch::Contains("'mine'"));
  REQUIRE(entries_under(root) == before);
  std::filesystem::remove_all(root);
}

TEST_CASE("write_report accepts a new, an empty and an older version's report folder", "[reports]") {
  const std::string root = temp_dir();
  REQUIRE(reports::check_report_folder(root + "/new/deeper").ok());
  std::filesystem::create_directory(root + "/empty");
  REQUIRE(reports::check_report_folder(root + "/empty").ok());
  std::filesystem::create_directory(root + "/older");  // report files only, no mark
  std::ofstream(root + "/older/report.json") << "{}";
  std::ofstream(root + "/older/report.md") << "#";
  REQUIRE(reports::write_report(sample_report(), root + "/older").ok());
  std::ofstream(root + "/file") << "x";
  REQUIRE_THAT(reports::check_report_folder(root + "/file").message(), Catch::Contains("is a file"));
  REQUIRE_THAT(reports::check_report_folder(root + "/file/out").message(),
               Catch::Contains("is not a folder"));
  std::filesystem::remove_all(root);
}

TEST_CASE("a report into the working folder writes in place, so the shell is not left in a removed folder",
          "[reports]") {
  const std::string root = temp_dir(), dir = root + "/here";
  std::filesystem::create_directory(dir);
  struct stat before {
  }, after{};
  REQUIRE(::stat(dir.c_str(), &before) == 0);
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const core::Status first = reports::write_report(sample_report(), ".");
  reports::Report clean = sample_report();
  for (auto& sc : clean.scenarios) {
    sc.findings.clear();
    sc.finding_traces.clear();
  }
  const core::Status second = reports::write_report(clean, ".");
  std::filesystem::current_path(cwd);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  REQUIRE(::stat(dir.c_str(), &after) == 0);
  REQUIRE(after.st_ino == before.st_ino);
  REQUIRE_FALSE(std::filesystem::exists(dir + "/trace-reuse-race-0.json"));  // the first run's trace
  REQUIRE(read(dir + "/report.md") == reports::to_markdown(clean));
  std::filesystem::remove_all(root);
}

TEST_CASE("a report write killed at any moment loses none of the user's files in the folder", "[reports]") {
  const std::string root = temp_dir(), dir = root + "/out";
  REQUIRE(reports::write_report(sample_report(), dir).ok());
  for (int i = 0; i < 50; ++i) std::ofstream(dir + "/note-" + std::to_string(i) + ".txt") << i;
  // Kills a writer after 0, 0.2, 0.4, ... ms: before, inside and after the swap.
  for (int k = 0; k < 40; ++k) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      for (;;) (void)reports::write_report(sample_report(), dir);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200 * k));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    for (int i = 0; i < 50; ++i) {
      INFO("killed after " << 200 * k << " us");
      REQUIRE(read(dir + "/note-" + std::to_string(i) + ".txt") == std::to_string(i));
    }
  }
  REQUIRE(reports::write_report(sample_report(), dir).ok());
  size_t siblings = 0;
  for (const auto& e : std::filesystem::directory_iterator(root)) siblings += e.path().filename() != "out";
  REQUIRE(siblings == 0);  // what the killed writers left is cleared by the next
  std::filesystem::remove_all(root);
}

TEST_CASE("a reader of the folder never sees report.md of one run beside report.json of another",
          "[reports]") {
  const std::string root = temp_dir(), dir = root + "/out";
  auto report = [](int k) {
    reports::Report r = sample_report();
    r.command = "shardcheck run w" + std::to_string(k) + ".yaml";
    return r;
  };
  REQUIRE(reports::write_report(report(0), dir).ok());
  std::atomic<bool> done{false};
  std::atomic<int> mixed{0}, reads{0}, gone{0}, failed{0};  // Catch2's REQUIRE is for the test's own thread
  // A reader opens the folder once and both files through it: one folder, one run.
  std::thread reader([&] {
    while (!done.load()) {
      const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
      if (fd < 0) continue;
      auto text = [&](const char* name) {
        std::string out;
        const int f = ::openat(fd, name, O_RDONLY);
        if (f < 0) return out;
        char buf[65536];
        for (ssize_t n; (n = ::read(f, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
        ::close(f);
        return out;
      };
      const std::string md = text("report.md"), json = text("report.json");
      ::close(fd);
      const std::regex run("w([0-9]+)\\.yaml");
      std::smatch a, b;
      if (md.empty() || json.empty()) {
        ++gone;  // opened as the old folder was swapped out and removed: no files, never a mix
      } else if (!std::regex_search(md, a, run) || !std::regex_search(json, b, run) || a[1] != b[1]) {
        ++mixed;
      }
      ++reads;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int k = 1; k <= 40; ++k) failed += reports::write_report(report(100 * w + k), dir).ok() ? 0 : 1;
    });
  }
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  INFO(reads.load() << " reads, " << gone.load() << " of a folder already swapped out");
  REQUIRE(failed == 0);
  REQUIRE(reads > 0);
  REQUIRE(mixed == 0);
  std::filesystem::remove_all(root);
}

TEST_CASE("write_report returns the error when the folder cannot be made", "[reports]") {
  const std::string root = temp_dir();
  std::ofstream(root + "/file") << "x";
  const core::Status s = reports::write_report(sample_report(), root + "/file/out");
  REQUIRE_FALSE(s.ok());
  REQUIRE_THAT(s.message(), Catch::Contains(root + "/file/out"));
  std::filesystem::remove_all(root);
}

TEST_CASE("trace file names stay inside the folder and apart for scenarios of one name", "[reports]") {
  reports::Report r = sample_report();
  r.scenarios[1] = r.scenarios[0];
  r.scenarios[1].name = "../reuse-race";
  r.scenarios[2] = r.scenarios[0];
  const auto names = reports::trace_file_names(r);
  REQUIRE(names[0][0] == "trace-reuse-race-0.json");
  REQUIRE(names[1][0] == "trace-_.._reuse-race-0.json");
  REQUIRE(names[2][0] == "trace-reuse-race_2-0.json");
  REQUIRE(names[0][1].empty());  // no timeline, no file
}

TEST_CASE("a race far apart in a long run still draws a bounded picture", "[reports]") {
  // 20000 scheduler steps between the accesses: one box per operation would be megabytes of
  // SVG; the picture must merge them into runs instead.
  reports::Report r = sample_report();
  core::TraceLog& log = r.scenarios[0].finding_traces[0];
  log.slices.clear();
  for (int step = 0; step < 40000; ++step)
    log.slices.push_back({.rank = 0, .tid = 1 + step % 2, .ts_us = step, .name = "op", .category = "kernel"});
  auto& d = std::get<core::RaceDetail>(r.scenarios[0].findings[0].detail);
  d.first.step = 100;
  d.second.step = 20100;
  r.scenarios.resize(1);
  const std::string html = reports::to_html(r);
  const size_t begin = html.find("<svg class=\"finding-picture\" data-kind=\"stream_race\"");
  REQUIRE(begin != std::string::npos);
  const std::string svg = html.substr(begin, html.find("</svg>", begin) - begin);
  REQUIRE(svg.size() < 100'000);
  REQUIRE(count(svg, "<rect") > 2);  // the runs and the two accesses are there
  REQUIRE(count(svg, "class=\"access\"") == 2);
}

TEST_CASE("empty and degenerate details still render a picture each", "[reports]") {
  // Producers may leave vectors empty or values non-finite; the report must not fall over.
  reports::Report r;
  reports::ScenarioResult s;
  s.name = "edge";
  s.findings.resize(6);
  s.findings[0].detail = core::RaceDetail{};  // both accesses at step 0 on one stream
  s.findings[1].kind = core::FindingKind::deadlock;
  s.findings[1].detail = core::DeadlockDetail{};
  s.findings[2].kind = core::FindingKind::collective_swap;
  s.findings[2].detail = core::CollectiveDetail{};
  s.findings[3].kind = core::FindingKind::grad_norm_miscount;
  s.findings[3].detail = core::NormDetail{.expected = std::nan(""), .reported = INFINITY};
  s.findings[4].kind = core::FindingKind::uninitialized_read;
  s.findings[4].detail = core::ElementDetail{};
  s.findings[5].kind = core::FindingKind::deadlock;
  s.findings[5].detail = core::DeadlockDetail{{{0, "host", "sync", "", {}}}, true};  // waits for itself
  s.compare = reports::CompareData{};
  s.compare->series = {{"nan", {std::nan(""), std::nan("")}}, {"empty", {}}};
  r.scenarios = {s, reports::ScenarioResult{}};
  const std::string html = reports::to_html(r);
  REQUIRE(count(html, "class=\"finding-picture\"") == 6);
  REQUIRE_THAT(html, !Catch::Contains("nan\""));  // no NaN coordinates
  REQUIRE(nlohmann::json::parse(reports::to_json(r))["totals"]["findings"] == 6);
  REQUIRE_THAT(reports::to_markdown(r), Catch::Contains("| edge |"));
}

TEST_CASE("names and messages that are not UTF-8 give every report file, with U+FFFD, and never throw",
          "[reports]") {
  // A raw byte such as \xff in a kernel name once made the Chrome trace writer throw after
  // report.json was written: the folder said "complete" and named a trace that did not exist.
  reports::Report r = sample_report();
  reports::ScenarioResult& race = r.scenarios[0];
  race.name = "reuse\xFFrace";
  race.description = "bad \xC3 byte";
  race.findings[0].summary = "kernel 'next\xFF' writes 'act'";
  race.findings[0].explanation = "kernel 'next\xFF' \xED\xA0\x80";
  std::get<core::RaceDetail>(race.findings[0].detail).second.op = "kernel 'next\xFF'";
  race.finding_traces[0].slices[1].name = "kernel 'next\xFF'";
  race.finding_traces[0].threads[1].name = "comp\xFFute";
  race.finding_traces[0].title = "reuse\xFFrace seed 7";
  const std::string fffd = "\xEF\xBF\xBD";

  std::string trace;
  REQUIRE_NOTHROW(trace = reports::chrome_trace(race.finding_traces[0], {race.findings[0]}));
  REQUIRE(core::is_valid_utf8(trace));
  const auto parsed = nlohmann::json::parse(trace);
  REQUIRE(parsed["otherData"]["title"] == "reuse" + fffd + "race seed 7");
  REQUIRE(core::is_valid_utf8(reports::to_html(r)));
  REQUIRE_THAT(reports::to_html(r), Catch::Contains("next" + fffd));
  REQUIRE(core::is_valid_utf8(reports::to_markdown(r)));
  REQUIRE(core::is_valid_utf8(reports::to_json(r)));

  const std::string root = temp_dir();
  REQUIRE(reports::write_report(r, root).ok());
  const auto json = nlohmann::json::parse(read(root + "/report.json"));
  int traces = 0;
  for (const auto& s : json["scenarios"]) {
    for (const auto& f : s["findings"]) {
      if (f["trace"].is_null()) continue;
      ++traces;
      INFO(f["trace"]);
      REQUIRE(std::filesystem::exists(root + "/" + f["trace"].get<std::string>()));
      REQUIRE(nlohmann::json::parse(read(root + "/" + f["trace"].get<std::string>()))["traceEvents"].size() >
              24);
    }
  }
  REQUIRE(traces == 1);
  std::filesystem::remove_all(root);
}
