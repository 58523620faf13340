// The CI formats' escaping and counts without running anything: XML that any name can pass
// through, and a JUnit file that counts what was not run.
#include "reports/ci_formats.hpp"

#include <catch2/catch.hpp>

using namespace shardcheck::reports;

TEST_CASE("xml_escape leaves no markup, no control character XML 1.0 refuses, and no broken UTF-8",
          "[reports][ci]") {
  CHECK(xml_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c'");
  CHECK(xml_escape("tab\there\nline") == "tab\there\nline");
  CHECK(xml_escape(std::string("esc\x1b[2J nul") + '\0') == "esc\\x1b[2J nul\\x00");
  CHECK(xml_escape("caf\xc3\xa9 \xff") == "caf\xc3\xa9 \xef\xbf\xbd");
  // Characters XML 1.0 refuses though they are UTF-8: a CI server rejects the whole file.
  CHECK(xml_escape("n\xef\xbf\xbe\xef\xbf\xbfx") == "n\\ufffe\\uffffx");
  CHECK(xml_escape("lone \xed\xa0\x80") == "lone \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
  CHECK(xml_escape("c1\xc2\x9b bidi\xe2\x80\xae del\x7f") == "c1\\u009b bidi\\u202e del\\x7f");
}

TEST_CASE("junit_xml counts a refused file as an error and an unreached one as skipped", "[reports][ci]") {
  Report r;
  r.command = "shardcheck run a.yaml b.yaml c.yaml";
  ScenarioResult ok;
  ok.name = "a";
  ok.file = "a.yaml";
  ok.kind = "trace";
  ok.expected = "clean";
  ok.met = true;
  r.scenarios.push_back(ok);
  const CiInput in{
      r, {}, {}, {{"b.yaml", "bad input: b.yaml:3:1: unknown key", true}, {"c.yaml", "not run", false}}};
  const std::string x = junit_xml(in);
  INFO(x);
  CHECK_THAT(x, Catch::Contains("tests=\"3\" failures=\"0\" errors=\"1\" skipped=\"1\""));
  CHECK_THAT(x,
             Catch::Contains("<error message=\"bad input: b.yaml:3:1: unknown key\" type=\"bad_input\"/>"));
  CHECK_THAT(x, Catch::Contains("<skipped message=\"not run\"/>"));
  const std::string s = sarif_json(in, "0.1.0");
  CHECK_THAT(s, Catch::Contains("\"executionSuccessful\": false"));
  CHECK_THAT(s, Catch::Contains("\"results\": []"));
}

TEST_CASE("sarif_json shows a hostile name in a message escaped, as every other output does",
          "[reports][ci]") {
  Report r;
  r.command = "shardcheck run x";
  const std::string name =
      "cap\xe2\x80\xae"
      "elif\x1b]0;t\x07";
  const CiInput in{r, {}, {}, {{name, "bad input: " + name + ": unreadable", true}}};
  const std::string s = sarif_json(in, "0.1.0");
  INFO(s);
  CHECK_THAT(s, !Catch::Contains("\xe2\x80\xae"));
  CHECK_THAT(s, Catch::Contains("cap\\\\u202eelif\\\\x1b]0;t\\\\x07"));
}
