// Hostile scenario files: bytes that are not UTF-8, control characters, duplicate keys, a
// second document, deep nesting, and paths that are not regular files. Each is refused with
// file:line:column and a message that names the problem, and no message carries a raw
// control character to the terminal.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/base/text.hpp"
#include "core/scenario/trace_scenario.hpp"
#include "core/scenario/training_scenario.hpp"

using namespace shardcheck::core;

namespace {
const char* kTrace = R"(kind: trace
name: hostile
ranks: 1
streams: [compute]
program:
  - alloc: {buffer: x, bytes: 64}
  - kernel: {name: next_forward, stream: compute, writes: [x]}
expect: {findings: []}
)";

std::string with(const std::string& from, const std::string& to) {
  std::string text = kTrace;
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  return text;
}

// The message of a file that must be refused; it must be printable as it stands.
std::string refused(const std::string& text) {
  auto s = parse_trace_scenario(text, "h.yaml");
  REQUIRE_FALSE(s.ok());
  const std::string& m = s.error().message();
  REQUIRE(is_valid_utf8(m));
  for (const char c : m) REQUIRE_FALSE(is_control(static_cast<unsigned char>(c)));
  return m;
}

std::string temp_dir() {
  char path[] = "/tmp/shardcheck-yaml-test-XXXXXX";
  REQUIRE(mkdtemp(path) != nullptr);
  return path;
}
}  // namespace

TEST_CASE("the hostile-input base file loads, so each refusal below is for its one change",
          "[core][scenario][hostile]") {
  REQUIRE(parse_trace_scenario(kTrace, "h.yaml").ok());
}

TEST_CASE("a byte that is not UTF-8 is refused at its own line and column", "[core][scenario][hostile]") {
  // It used to load, and then every Chrome trace writer threw on the kernel's name (exit 3).
  REQUIRE_THAT(refused(with("next_forward",
                            "next_\xFF"
                            "forward")),
               Catch::StartsWith("h.yaml:7:25: byte \\xff is not UTF-8; a scenario file is UTF-8 text"));
  REQUIRE_THAT(refused(with("[compute]", "[comp\xC3]")),
               Catch::StartsWith("h.yaml:4:15: byte \\xc3 is not UTF-8"));
  REQUIRE_THAT(refused(with("hostile", "a\xED\xA0\x80")),
               Catch::StartsWith("h.yaml:2:8: byte \\xed is not UTF-8"));
}

TEST_CASE("a NUL byte and control characters in the file are refused by name, escaped",
          "[core][scenario][hostile]") {
  // yaml-cpp said "unknown escape character: y" for a NUL.
  REQUIRE_THAT(refused(with("hostile", std::string("x\0y", 3))),
               Catch::StartsWith("h.yaml:2:8: a NUL byte; a scenario file is text"));
  // A raw ESC [2J in a key cleared the screen of whoever read the "unknown key" message.
  REQUIRE_THAT(refused(with("ranks:", "ra\x1B[2Jnks:")),
               Catch::StartsWith("h.yaml:3:3: the control character \\x1b is not allowed in a YAML file"));
  REQUIRE_THAT(refused(with("hostile", "a\x7F")), Catch::Contains("the control character \\x7f"));
  REQUIRE_THAT(refused(with("hostile", "a\xC2\x9B")), Catch::Contains("the control character \\u009b"));
}

TEST_CASE(
    "names written with escapes may not hold control characters, descriptions only tabs and line breaks",
    "[core][scenario][hostile]") {
  REQUIRE_THAT(
      refused(with("next_forward", "\"k\\e[2J\"")),
      Catch::StartsWith(
          "h.yaml:7:20: name 'k\\x1b[2J' holds the control character \\x1b; names are printable text"));
  REQUIRE_THAT(refused(with("hostile", "\"x\\0y\"")),
               Catch::StartsWith("h.yaml:2:7: name 'x\\0y' holds the control character \\0"));
  REQUIRE(parse_trace_scenario(with("ranks: 1", "description: \"one\\n\\ttwo\"\nranks: 1"), "h.yaml").ok());
  REQUIRE_THAT(
      refused(with("ranks: 1", "description: \"one\\atwo\"\nranks: 1")),
      Catch::Contains(
          "h.yaml:3:14: description 'one\\x07two' holds the control character \\x07; text may hold"));
}

TEST_CASE("an unknown key's message escapes what the file wrote", "[core][scenario][hostile]") {
  REQUIRE_THAT(refused(with("ranks:", "\"ra\\e[2Jnks\":")),
               Catch::StartsWith("h.yaml:3:1: unknown key 'ra\\x1b[2Jnks'"));
}

TEST_CASE("a key given twice is refused at the second, naming the first, in every map",
          "[core][scenario][hostile]") {
  // The first used to win silently, even when the second was out of bounds.
  REQUIRE_THAT(
      refused(with("ranks: 1\n", "ranks: 1\nranks: 999\n")),
      Catch::StartsWith(
          "h.yaml:4:1: duplicate key 'ranks' (first at line 3, column 1); a key may appear once in a map"));
  REQUIRE_THAT(refused(with("{buffer: x, bytes: 64}", "{buffer: x, bytes: 64, bytes: 99999999999}")),
               Catch::StartsWith("h.yaml:6:35: duplicate key 'bytes' (first at line 6, column 24)"));
  // Equal after unquoting is equal: yaml-cpp looks both up by the same string.
  REQUIRE_THAT(refused(with("ranks: 1\n", "ranks: 1\n\"ranks\": 2\n")),
               Catch::StartsWith("h.yaml:4:1: duplicate key 'ranks'"));
  REQUIRE_THAT(refused(with("ranks: 1\n", "&r ranks: 1\n*r : 2\n")),
               Catch::StartsWith("h.yaml:4:1: duplicate key 'ranks'"));
  // The same key in two maps, and equal values under different keys, are fine.
  REQUIRE(parse_trace_scenario(with("{buffer: x, bytes: 64}", "{buffer: x, bytes: 64, stream: compute}"),
                               "h.yaml")
              .ok());
}

TEST_CASE("a second YAML document is refused where it starts", "[core][scenario][hostile]") {
  // yaml-cpp read the first document and ignored the rest.
  REQUIRE_THAT(refused(std::string(kTrace) + "---\nkind: trace\nname: other\n"),
               Catch::StartsWith("h.yaml:9:1: a second YAML document starts here"));
  REQUIRE_THAT(refused(std::string(kTrace) + "...\n---\n"),
               Catch::StartsWith("h.yaml:10:1: a second YAML document"));
  REQUIRE(parse_trace_scenario("---\n" + std::string(kTrace) + "...\n", "h.yaml").ok());  // one, marked
}

TEST_CASE("nesting deeper than the reader's bound is refused by name", "[core][scenario][hostile]") {
  // yaml-cpp stops at 500 levels with "bad file".
  const std::string deep = std::string(3000, '[') + std::string(3000, ']');
  REQUIRE_THAT(refused(with("ranks: 1", "ranks: " + deep)),
               Catch::StartsWith("h.yaml:3:71: maps and lists nest more than 64 levels deep here"));
  const std::string ok =
      std::string(YamlReader::kMaxDepth - 1, '[') + std::string(YamlReader::kMaxDepth - 1, ']');
  REQUIRE_THAT(refused(with("ranks: 1", "ranks: " + ok)),
               Catch::Contains("ranks must be an integer, not a list"));
}

TEST_CASE("a path that is not a regular file is refused, and one that cannot be opened says why",
          "[core][scenario][hostile]") {
  const std::string dir = temp_dir();
  REQUIRE_THAT(load_trace_scenario(dir).error().message(),
               Catch::Equals(dir + " is a directory; pass " + dir + "/*.yaml"));
  REQUIRE_THAT(load_trace_scenario(dir + "/missing.yaml").error().message(),
               Catch::Equals(dir + "/missing.yaml:1:1: cannot open the file: No such file or directory"));
  const std::string fifo = dir + "/fifo.yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO blocked until a writer came, forever; should it block again, the alarm ends
  // the test run instead of hanging it.
  ::alarm(20);
  const auto s = load_trace_scenario(fifo);
  ::alarm(0);
  REQUIRE_THAT(
      s.error().message(),
      Catch::Equals(fifo + ":1:1: a FIFO (named pipe), not a regular file; a scenario is read from a file"));
  REQUIRE_THAT(load_trace_scenario("/dev/null").error().message(),
               Catch::StartsWith("/dev/null:1:1: a character device, not a regular file"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a subnormal number such as 1e-320 is read, one that rounds to 0 is refused by name",
          "[core][scenario][hostile]") {
  const std::string good = R"(kind: training
name: tiny-lr
mesh: {dp: 2}
model: {vocab: 16, hidden: 8, layers: 1, seq: 4, tied_embeddings: true}
strategy: optim
optimizer: {kind: adam, lr: 1e-320}
steps: 1
expect: {findings: []}
)";
  auto s = parse_training_scenario(good, "t.yaml");
  INFO((s.ok() ? "" : s.error().message()));
  REQUIRE(s.ok());
  REQUIRE(s->config.optimizer.lr == 1e-320);
  std::string zero = good;
  zero.replace(zero.find("1e-320"), 6, "1e-400");
  REQUIRE_THAT(parse_training_scenario(zero, "t.yaml").error().message(),
               Catch::StartsWith("t.yaml:6:29: lr is '1e-400', too close to 0 for a double"));
}
