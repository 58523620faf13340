// The value checks of captured programs (core/scenario/captured_values.hpp) on small two-rank
// folders written here: which digests make a replica_divergence or a double_reduction, which do
// not (shards, one repeated value, a buffer written since where the capture does not see), and
// how value records are read and refused.
#include <unistd.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/scenario/captured_program.hpp"
#include "core/scenario/captured_values.hpp"
#include "core/scenario/json_line.hpp"

using namespace shardcheck::core;

namespace {

namespace fs = std::filesystem;

struct Folder {
  std::string dir;
  Folder() {
    char tmpl[] = "/tmp/shardcheck-values-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }
  ~Folder() { fs::remove_all(dir); }
};

// Rank `rank` of 2: the header, a prologue (stream, sites t.py:10 and t.py:20, the world group,
// a 64-byte buffer), `body`, and the end record.
std::string rank_file(int rank, const std::string& body) {
  std::string text = R"({"shardcheck_capture": 1, "rank": )" + std::to_string(rank) +
                     R"(, "world_size": 2, "torch": "2.11.0", "device": "cpu", "argv": ["t.py"]})" + "\n" +
                     "{\"k\": \"stream\", \"id\": 0, \"name\": \"default\"}\n"
                     "{\"k\": \"site\", \"id\": 0, \"file\": \"t.py\", \"line\": 10, \"func\": \"f\"}\n"
                     "{\"k\": \"site\", \"id\": 1, \"file\": \"t.py\", \"line\": 20, \"func\": \"f\"}\n"
                     "{\"k\": \"group\", \"id\": 0, \"name\": \"world\", \"ranks\": [0, 1]}\n"
                     "{\"k\": \"alloc\", \"buf\": 0, \"bytes\": 64, \"stream\": 0, \"at\": 0}\n"
                     "{\"k\": \"op\", \"name\": \"aten::fill_\", \"stream\": 0, \"r\": [], \"w\": [[0, 0, "
                     "64]], \"at\": 0}\n" +
                     body;
  int64_t n = 0;
  for (char c : text) n += c == '\n';
  return text + R"({"k": "end", "records": )" + std::to_string(n - 1) + "}\n";
}

std::string digest(const std::string& h, bool uniform = false, int n = 16) {
  return R"("h": ")" + h + R"(", "n": )" + std::to_string(n) + R"(, "s": 1.5, "a": 2.5, "u": )" +
         (uniform ? "true" : "false");
}

std::string all_reduce(int at) {
  return R"({"k": "coll", "op": "all_reduce", "group": 0, "stream": 0, "in": [0, 0, 64], "out": [0, 0, 64], )"
         R"("dtype": "f32", "count": 16, "reduce": "sum", "root": 0, "name": "g", "at": )" +
         std::to_string(at) + "}\n";
}

std::string coll_value(const char* side, int coll, const std::string& d) {
  return std::string(R"({"k": "value", "of": "coll_)") + side + R"(", "coll": )" + std::to_string(coll) +
         R"(, "at": 0, )" + d + "}\n";
}

std::string tensor_value(const char* of, const char* name, int step, const char* when, const std::string& d) {
  return std::string(R"({"k": "value", "of": ")") + of + R"(", "tensor": ")" + name + R"(", "step": )" +
         std::to_string(step) + R"(, "when": ")" + when + R"(", "at": 1, )" + d + "}\n";
}

std::vector<Finding> check(const std::string& rank0, const std::string& rank1) {
  Folder f;
  std::ofstream(f.dir + "/rank-0.jsonl") << rank_file(0, rank0);
  std::ofstream(f.dir + "/rank-1.jsonl") << rank_file(1, rank1);
  auto p = load_captured_program(f.dir);
  INFO((p ? std::string() : p.error().message()));
  REQUIRE(p);
  std::vector<Finding> found = check_captured_values(*p);
  // The finding kind table marks what the value checks report (is_captured_value_kind), and a
  // capture's outputs print those once, from the values, in every schedule.
  for (const Finding& x : found) REQUIRE(is_captured_value_kind(x.kind));
  return found;
}

// Two all_reduces of buffer 0, the second summing what the first wrote. `in2` is each rank's
// digest of the second's input; `out1` of the first's output.
std::vector<Finding> twice(const std::string& out1, const std::string& in2_0, const std::string& in2_1) {
  auto body = [&](const std::string& in1, const std::string& in2) {
    return all_reduce(0) + coll_value("in", 0, digest(in1)) + coll_value("out", 0, digest(out1)) +
           all_reduce(1) + coll_value("in", 1, in2);
  };
  return check(body("00000000000000a0", in2_0), body("00000000000000b0", in2_1));
}

}  // namespace

TEST_CASE(
    "a sum over the group of what a reduction over it made, the same on every rank, is a double reduction",
    "[core][capture][values]") {
  const auto found = twice("00000000000000c0", digest("00000000000000c0"), digest("00000000000000c0"));
  REQUIRE(found.size() == 1);
  REQUIRE(found[0].kind == FindingKind::double_reduction);
  REQUIRE(found[0].summary ==
          "all_reduce (sum) at t.py:20 over ranks 0, 1 sums what all_reduce at t.py:10 already reduced over "
          "them: "
          "the result is 2 times it");
  REQUIRE_THAT(found[0].explanation, Catch::Contains("Fix: reduce it once"));
  const auto* d = std::get_if<ElementDetail>(&found[0].detail);
  REQUIRE(d);
  REQUIRE(d->source.file == "t.py");
  REQUIRE(d->source.line == 20);
  REQUIRE(d->actual == 2 * d->expected);
}

TEST_CASE("a second sum is not called double where the digests do not show the same reduced value",
          "[core][capture][values]") {
  SECTION("the ranks' inputs differ") {
    REQUIRE(twice("00000000000000c0", digest("00000000000000c0"), digest("00000000000000c1")).empty());
  }
  SECTION("one repeated value (a count of ranks, zeros)") {
    REQUIRE(twice("00000000000000c0", digest("00000000000000c0", true), digest("00000000000000c0", true))
                .empty());
  }
  SECTION("the buffer holds something else than the first reduction wrote (an unseen write since)") {
    REQUIRE(twice("00000000000000c0", digest("00000000000000d0"), digest("00000000000000d0")).empty());
  }
  SECTION("an operator wrote it from something else in between") {
    auto body = [](const std::string& in1) {
      return all_reduce(0) + coll_value("in", 0, digest(in1)) +
             "{\"k\": \"op\", \"name\": \"aten::fill_\", \"stream\": 0, \"r\": [], \"w\": [[0, 0, 64]], "
             "\"at\": 0}\n" +
             all_reduce(1) + coll_value("in", 1, digest("00000000000000e0"));
    };
    REQUIRE(check(body("00000000000000a0"), body("00000000000000b0")).empty());
  }
}

TEST_CASE("a division of the reduced value carries its provenance to the next sum",
          "[core][capture][values]") {
  auto body = [](const std::string& in1) {
    return all_reduce(0) + coll_value("in", 0, digest(in1)) +
           coll_value("out", 0, digest("00000000000000c0")) +
           "{\"k\": \"op\", \"name\": \"aten::div_\", \"stream\": 0, \"r\": [[0, 0, 64]], \"w\": [[0, 0, "
           "64]], "
           "\"at\": 0}\n" +
           all_reduce(1) + coll_value("in", 1, digest("00000000000000f0"));
  };
  const auto found = check(body("00000000000000a0"), body("00000000000000b0"));
  REQUIRE(found.size() == 1);
  REQUIRE(found[0].kind == FindingKind::double_reduction);
}

TEST_CASE("parameters the same on two ranks before a step and apart after it are a replica_divergence",
          "[core][capture][values]") {
  auto body = [](const std::string& grad, const std::string& after) {
    return tensor_value("param", "head.weight", 0, "before", digest("1000000000000000")) +
           tensor_value("grad", "head.weight", 0, "before", digest(grad)) +
           tensor_value("param", "head.weight", 0, "after", digest(after)) +
           tensor_value("param", "body.weight", 0, "before", digest("2000000000000000")) +
           tensor_value("param", "body.weight", 0, "after", digest("2100000000000000"));
  };
  SECTION("their gradients differed") {
    const auto found =
        check(body("3000000000000000", "4000000000000000"), body("3100000000000000", "4100000000000000"));
    REQUIRE(found.size() == 1);
    REQUIRE(found[0].kind == FindingKind::replica_divergence);
    REQUIRE(
        found[0].summary ==
        "head.weight: the same on ranks 0, 1 before the optimizer step at t.py:20 (step 0), different after "
        "it: their gradients differed across those ranks going into the step");
    REQUIRE_THAT(found[0].explanation, Catch::Contains("stayed the same on those ranks (1: body.weight)"));
    REQUIRE_THAT(found[0].explanation, Catch::Contains("equal up to rounding: the bytes differ"));
  }
  SECTION("the gradients were the same: the step differed") {
    const auto found =
        check(body("3000000000000000", "4000000000000000"), body("3000000000000000", "4100000000000000"));
    REQUIRE(found.size() == 1);
    REQUIRE_THAT(found[0].summary, Catch::EndsWith("the step itself differed"));
  }
  SECTION("the same after the step: clean") {
    REQUIRE(check(body("3000000000000000", "4000000000000000"), body("3100000000000000", "4000000000000000"))
                .empty());
  }
}

TEST_CASE("shards, zeros and empty tensors are not replicas", "[core][capture][values]") {
  auto body = [](const std::string& before, bool uniform, const std::string& after) {
    return tensor_value("param", "w", 0, "before", digest(before, uniform)) +
           tensor_value("param", "w", 0, "after", digest(after));
  };
  // Each rank its own shard from the start.
  REQUIRE(check(body("1000000000000000", false, "2000000000000000"),
                body("1100000000000000", false, "2100000000000000"))
              .empty());
  // Zeros on both (a bias, or two shards of zeros): the same bytes say nothing of replication.
  REQUIRE(check(body("1000000000000000", true, "2000000000000000"),
                body("1000000000000000", true, "2100000000000000"))
              .empty());
}

TEST_CASE("a replica changed on one rank between two steps is found at the next step",
          "[core][capture][values]") {
  auto body = [](const std::string& next) {
    return tensor_value("param", "w", 0, "before", digest("1000000000000000")) +
           tensor_value("param", "w", 0, "after", digest("2000000000000000")) +
           tensor_value("param", "w", 1, "before", digest(next)) +
           tensor_value("param", "w", 1, "after", digest("3000000000000000"));
  };
  const auto found = check(body("2000000000000000"), body("2200000000000000"));
  REQUIRE(found.size() == 1);
  REQUIRE_THAT(found[0].summary,
               Catch::Contains("after the optimizer step at t.py:20 (step 0), different at the next"));
}

TEST_CASE("value records are read, and refused with their line when malformed", "[core][capture][values]") {
  JsonLine j;
  REQUIRE(j.parse(R"({"s": 1.25, "t": -2e3, "i": 7})") == "");
  REQUIRE(j.find("s")->x == 1.25);
  REQUIRE(j.find("t")->x == -2000);
  REQUIRE(j.find("i")->x == 7);
  Folder f;
  auto load = [&](const std::string& value) {
    const std::string body = all_reduce(0) + value;
    std::ofstream(f.dir + "/rank-0.jsonl") << rank_file(0, body);
    std::ofstream(f.dir + "/rank-1.jsonl") << rank_file(1, body);
    return load_captured_program(f.dir);
  };
  auto ok = load(
      R"({"k": "value", "of": "coll_in", "coll": 0, "at": 0, "h": "00000000000000ff", "n": 16, "s": null, "a": 3, "u": false})"
      "\n");
  REQUIRE(ok);
  REQUIRE(ok->ranks[0].values.size() == 1);
  REQUIRE(ok->ranks[0].values[0].hash == 0xff);
  REQUIRE(std::isnan(ok->ranks[0].values[0].sum));
  REQUIRE(ok->ranks[0].values[0].abs_sum == 3);
  REQUIRE(ok->ranks[0].file_records == 8);  // value records count as the file's, never as work
  REQUIRE(ok->ranks[0].records.size() == 3);
  const std::pair<std::string, std::string> bad[] = {
      {R"({"k": "value", "of": "coll_in", "coll": 1, "at": 0, )" + digest("00000000000000ff") + "}\n",
       "a value of collective 1, which no coll record before it defines"},
      {R"({"k": "value", "of": "weights", "at": 0, )" + digest("00000000000000ff") + "}\n",
       "unknown value of 'weights'"},
      {R"({"k": "value", "of": "coll_in", "coll": 0, "at": 0, )" + digest("xyz") + "}\n",
       "field 'h' of value must be 16 hexadecimal digits"},
      {R"({"k": "value", "of": "param", "tensor": "w", "step": 0, "when": "during", "at": 0, )" +
           digest("00000000000000ff") + "}\n",
       "field 'when' of value must be before or after"},
      {R"({"k": "value", "of": "coll_in", "coll": 0, "at": 0, "h": "00000000000000ff", "n": 16, "s": "x", "a": 3, "u": false})"
       "\n",
       "field 's' of value must be"},
  };
  for (const auto& [value, error] : bad) {
    INFO(value);
    auto p = load(value);
    REQUIRE(!p);
    REQUIRE_THAT(p.error().message(), Catch::Contains("rank-0.jsonl:9: ") && Catch::Contains(error));
  }
}

namespace {

std::string digest_abs(const std::string& h, double abs_sum) {
  return R"("h": ")" + h + R"(", "n": 16, "s": 1.5, "a": )" + std::to_string(abs_sum) + R"(, "u": false)";
}

// A gradient's value record that says where its bytes were: buffer 0, the whole of it.
std::string grad_at_buffer0(const char* name, const std::string& d) {
  return std::string(R"({"k": "value", "of": "grad", "tensor": ")") + name +
         R"(", "step": 0, "when": "before", "at": 1, "r": [0, 0, 64], )" + d + "}\n";
}

// Group 1 of a rank file: that rank alone.
std::string own_group(int rank) {
  return R"({"k": "group", "id": 1, "name": "own )" + std::to_string(rank) + R"(", "ranks": [)" +
         std::to_string(rank) + "]}\n";
}

std::string all_reduce_on(int group, int at) {
  std::string s = all_reduce(at);
  return s.replace(s.find(R"("group": 0)"), 10, "\"group\": " + std::to_string(group));
}

const std::string kDivide =
    R"({"k": "op", "name": "aten::div_", "stream": 0, "r": [[0, 0, 64]], "w": [[0, 0, 64]], "at": 0})"
    "\n";

}  // namespace

TEST_CASE(
    "a replicated parameter stepped with a gradient no reduction over its replicas made is a "
    "missing_reduction",
    "[core][capture][values]") {
  // head.weight the same on both ranks before the step, apart after it, its gradients apart:
  // `reduce` is what the rank ran on buffer 0, which holds the gradient as the step takes it.
  auto body = [](int rank, const std::string& reduce) {
    const std::string g = rank == 0 ? "3000000000000000" : "3100000000000000";
    const std::string after = rank == 0 ? "4000000000000000" : "4100000000000000";
    return own_group(rank) + reduce +
           tensor_value("param", "head.weight", 0, "before", digest("1000000000000000")) +
           grad_at_buffer0("head.weight", digest(g)) +
           tensor_value("param", "head.weight", 0, "after", digest(after));
  };
  SECTION("never reduced") {
    const auto found = check(body(0, ""), body(1, ""));
    REQUIRE(found.size() == 1);
    REQUIRE(found[0].kind == FindingKind::missing_reduction);
    REQUIRE_THAT(found[0].summary,
                 Catch::EndsWith("the step consumed gradients that no reduction over those ranks made"));
    REQUIRE_THAT(found[0].explanation, Catch::Contains("came from no reduction the capture saw"));
  }
  SECTION("reduced over fewer ranks than hold it") {
    const auto found = check(body(0, all_reduce_on(1, 0)), body(1, all_reduce_on(1, 0)));
    REQUIRE(found.size() == 1);
    REQUIRE(found[0].kind == FindingKind::missing_reduction);
    REQUIRE_THAT(found[0].explanation, Catch::Contains("were reduced over ranks 0 only"));
  }
  SECTION("reduced over every replica and still apart: a replica_divergence, not a missing reduction") {
    const auto found = check(body(0, all_reduce(0) + kDivide), body(1, all_reduce(0) + kDivide));
    REQUIRE(found.size() == 1);
    REQUIRE(found[0].kind == FindingKind::replica_divergence);
  }
}

namespace {

// Buffer 1 of a rank file: 64 bytes of the rank's own data, a gradient to be.
const std::string kSecondBuffer =
    R"({"k": "alloc", "buf": 1, "bytes": 64, "stream": 0, "at": 0})"
    "\n"
    R"({"k": "op", "name": "aten::fill_", "stream": 0, "r": [], "w": [[1, 0, 64]], "at": 0})"
    "\n";

// An all_to_all of buffer `buf` over the world: each rank's half goes to the other.
std::string all_to_all(int buf) {
  const std::string range = "[" + std::to_string(buf) + ", 0, 64]";
  return R"({"k": "coll", "op": "all_to_all", "group": 0, "stream": 0, "in": )" + range + R"(, "out": )" +
         range +
         R"(, "dtype": "f32", "count": 16, "reduce": "none", "root": 0, "name": "tokens", "at": 0})"
         "\n";
}

// An all_reduce (sum) of buffer `buf` over group `group`, at site 0.
std::string sum_of(int buf, int group) {
  std::string s = all_reduce_on(group, 0);
  const std::string from = "[0, 0, 64]", to = "[" + std::to_string(buf) + ", 0, 64]";
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Buffer `buf` divided in place, at site 1, by a number the capture wrote (`scale`: its inverse)
// or, with `scale` empty, by one it did not know.
std::string divided(int buf, const std::string& scale) {
  return R"({"k": "op", "name": "aten::div_", "stream": 0, "r": [[)" + std::to_string(buf) +
         R"(, 0, 64]], "w": [[)" + std::to_string(buf) + R"(, 0, 64]], "at": 1)" +
         (scale.empty() ? "" : R"(, "scale": )" + scale) + "}\n";
}

std::string grad_at(int buf, const char* name, const std::string& d) {
  return std::string(R"({"k": "value", "of": "grad", "tensor": ")") + name +
         R"(", "step": 0, "when": "before", "at": 1, "r": [)" + std::to_string(buf) + ", 0, 64], " + d +
         "}\n";
}

}  // namespace

TEST_CASE("a sum's gradient weighs each rank's loss it carries by one over their number, as the others do",
          "[core][capture][values]") {
  // router.weight (buffer 0): summed over the world and halved, the reference. expert.weight
  // (buffer 1): its tokens exchanged by an all_to_all or not, summed over `group`, divided by `k`.
  auto body = [](int rank, bool exchanged, int group, const std::string& k, const std::string& router_k) {
    return own_group(rank) + kSecondBuffer + (exchanged ? all_to_all(1) : "") + sum_of(0, 0) +
           divided(0, router_k) + sum_of(1, group) + divided(1, k) +
           grad_at(0, "router.weight", digest_abs("00000000000000a0", 4)) +
           grad_at(1, "expert.weight", digest_abs("00000000000000b0", 4));
  };
  auto both = [&](bool exchanged, int group, const std::string& k, const std::string& router_k = "0.5") {
    return check(body(0, exchanged, group, k, router_k), body(1, exchanged, group, k, router_k));
  };
  SECTION("the all_to_all brought both ranks' losses to the sum over one rank: divided by 1, a mismatch") {
    const auto found = both(true, 1, "1.0");
    REQUIRE(found.size() == 1);
    REQUIRE(found[0].kind == FindingKind::divisor_mismatch);
    REQUIRE(
        found[0].summary ==
        "all_reduce (sum) at t.py:10 over ranks 0, divided by 1 at t.py:20: the sum carries the losses of 2 "
        "ranks (0, 1), so their average divides by 2, not 1");
    REQUIRE_THAT(found[0].explanation,
                 Catch::Contains("the other parameters' there ('router.weight') weigh it 1/2"));
    const auto* d = std::get_if<ElementDetail>(&found[0].detail);
    REQUIRE(d);
    REQUIRE(d->tensor == "expert.weight");
    REQUIRE(d->source.line == 20);
  }
  SECTION("divided by 2: clean") { REQUIRE(both(true, 1, "0.5").empty()); }
  SECTION("without the all_to_all the sum over one rank carries its loss alone: divided by 1, clean") {
    REQUIRE(both(false, 1, "1.0").empty());
  }
  SECTION("summed over the world and divided by its size, as the router: clean") {
    REQUIRE(both(false, 0, "0.5").empty());
  }
  SECTION("no gradient averaged (the program scales its loss itself): nothing to compare with, clean") {
    REQUIRE(both(true, 1, "1.0", "1.0").empty());
  }
  SECTION("a division by a number the capture did not know: the digests say by what") {
    // Each sum's output has the absolute sum 8, each gradient 4: both divided by 2.
    auto digests = [&](int rank, const std::string& expert_out) {
      return own_group(rank) + kSecondBuffer + all_to_all(1) + sum_of(0, 0) +
             coll_value("out", 1, digest_abs("00000000000000c0", 8)) + divided(0, "") + sum_of(1, 1) +
             coll_value("out", 2, digest_abs("00000000000000c1", std::stod(expert_out))) + divided(1, "") +
             grad_at(0, "router.weight", digest_abs("00000000000000a0", 4)) +
             grad_at(1, "expert.weight", digest_abs("00000000000000b0", 4));
    };
    REQUIRE(check(digests(0, "8"), digests(1, "8")).empty());
    const auto found = check(digests(0, "4"), digests(1, "4"));  // the expert's sum not divided at all
    REQUIRE(found.size() == 1);
    REQUIRE(found[0].kind == FindingKind::divisor_mismatch);
  }
}

TEST_CASE("a value written after it was taken stands where it was taken", "[core][capture][values]") {
  // On CUDA the digests reach the file at the next step, after the gradient's buffer has been
  // written again (zero_grad, the next backward): `taken` puts the gradient back at its step.
  // Records before the fill_ below: 6 of the prologue, then the group, the all_reduce, the
  // division and the parameter's value.
  auto body = [](int rank, const char* taken) {
    const std::string g = rank == 0 ? "3000000000000000" : "3100000000000000";
    const std::string after = rank == 0 ? "4000000000000000" : "4100000000000000";
    return own_group(rank) + all_reduce(0) + kDivide +
           tensor_value("param", "w", 0, "before", digest("1000000000000000")) +
           R"({"k": "op", "name": "aten::fill_", "stream": 0, "r": [], "w": [[0, 0, 64]], "at": 0})"
           "\n" +
           R"({"k": "value", "of": "grad", "tensor": "w", "step": 0, "when": "before", "at": 1, "r": [0, 0, 64], )" +
           taken + digest(g) + "}\n" + tensor_value("param", "w", 0, "after", digest(after));
  };
  // Taken before the fill_: it came from the all_reduce over both ranks, and differed after it.
  auto found = check(body(0, R"("taken": 10, )"), body(1, R"("taken": 10, )"));
  REQUIRE(found.size() == 1);
  REQUIRE(found[0].kind == FindingKind::replica_divergence);
  // Without `taken` it stands after the fill_, which no reduction made.
  found = check(body(0, ""), body(1, ""));
  REQUIRE(found.size() == 1);
  REQUIRE(found[0].kind == FindingKind::missing_reduction);
  // A `taken` past the record itself is refused.
  Folder f;
  std::ofstream(f.dir + "/rank-0.jsonl") << rank_file(0, body(0, R"("taken": 99, )"));
  std::ofstream(f.dir + "/rank-1.jsonl") << rank_file(1, body(1, R"("taken": 10, )"));
  auto p = load_captured_program(f.dir);
  REQUIRE(!p);
  REQUIRE_THAT(p.error().message(),
               Catch::Contains("rank-0.jsonl:13: field 'taken' of value is 99, outside 0..11"));
}

TEST_CASE("a buffer summed again after an optimizer step is no double reduction", "[core][capture][values]") {
  // DDP's bucket: the next step's gradients are copied into it where the capture does not see
  // (and here no output digest tells them apart), then summed over the same ranks again.
  auto body = [](const std::string& in1, bool step_between) {
    return all_reduce(0) + coll_value("in", 0, digest(in1)) +
           (step_between ? tensor_value("param", "w", 0, "before", digest("1000000000000000")) : "") +
           all_reduce(1) + coll_value("in", 1, digest("00000000000000c0"));
  };
  REQUIRE(check(body("00000000000000a0", true), body("00000000000000b0", true)).empty());
  const auto found = check(body("00000000000000a0", false), body("00000000000000b0", false));
  REQUIRE(found.size() == 1);
  REQUIRE(found[0].kind == FindingKind::double_reduction);
}

TEST_CASE("an op's scale and a loss's digest are read, and a scale that is no number other than 0 refused",
          "[core][capture][values]") {
  Folder f;
  auto load = [&](const std::string& body) {
    std::ofstream(f.dir + "/rank-0.jsonl") << rank_file(0, body);
    std::ofstream(f.dir + "/rank-1.jsonl") << rank_file(1, body);
    return load_captured_program(f.dir);
  };
  auto ok = load(divided(0, "0.25") + R"({"k": "value", "of": "loss", "at": 0, "r": [0, 0, 4], )" +
                 digest("00000000000000aa", true, 1) + "}\n");
  REQUIRE(ok);
  REQUIRE(ok->ranks[0].scales.size() == 1);
  REQUIRE(ok->ranks[0].scales[0].second == 0.25);
  REQUIRE(ok->ranks[0].values.back().of == CapturedValue::Of::loss);
  for (const char* bad : {"0", "null", "\"x\""}) {
    INFO(bad);
    auto p = load(divided(0, bad));
    REQUIRE(!p);
    REQUIRE_THAT(p.error().message(), Catch::Contains("rank-0.jsonl:8: "));
  }
}

TEST_CASE(
    "a parameter of one repeated value is a replica where the program reduces its gradient over the "
    "ranks that hold it alike",
    "[core][capture][values]") {
  // norm.weight is all ones on both ranks (a LayerNorm's weight): its bytes say nothing of
  // replication, but a gradient summed over both ranks says the program treats them as copies.
  auto body = [](int rank, const std::string& reduce) {
    const std::string g = rank == 0 ? "3000000000000000" : "3100000000000000";
    const std::string after = rank == 0 ? "4000000000000000" : "4100000000000000";
    return own_group(rank) + reduce +
           tensor_value("param", "norm.weight", 0, "before", digest("1000000000000000", true)) +
           grad_at_buffer0("norm.weight", digest(g)) +
           tensor_value("param", "norm.weight", 0, "after", digest(after));
  };
  SECTION("reduced over both and apart after the step: a replica_divergence") {
    const auto found = check(body(0, all_reduce(0) + kDivide), body(1, all_reduce(0) + kDivide));
    REQUIRE(found.size() == 1);
    REQUIRE(found[0].kind == FindingKind::replica_divergence);
    REQUIRE_THAT(found[0].summary, Catch::StartsWith("norm.weight: the same on ranks 0, 1"));
  }
  SECTION("reduced over each rank alone: nothing says they are copies, so nothing is said") {
    REQUIRE(check(body(0, all_reduce_on(1, 0)), body(1, all_reduce_on(1, 0))).empty());
  }
}

namespace {

// The squares of the gradient at buffer 0 into buffer 1, summed over group `first`, then over
// the world.
std::string norm_summed_twice(int rank, int first) {
  const std::string g = rank == 0 ? "3000000000000000" : "3100000000000000";
  std::string sum1 =
      R"({"k": "coll", "op": "all_reduce", "group": 0, "stream": 0, "in": [1, 0, 64], "out": [1, 0, 64], )"
      R"("dtype": "f32", "count": 16, "reduce": "sum", "root": 0, "name": "n", "at": 0})"
      "\n";
  std::string sum2 = sum1;
  sum1.replace(sum1.find(R"("group": 0)"), 10, "\"group\": " + std::to_string(first));
  sum2.replace(sum2.find(R"("at": 0)"), 7, R"("at": 1)");
  return own_group(rank) + kSecondBuffer + grad_at_buffer0("expert", digest(g)) +
         R"({"k": "op", "name": "aten::linalg_vector_norm", "stream": 0, "r": [[0, 0, 64]], "w": [[1, 0, 64]], "at": 0})"
         "\n" +
         sum1 + sum2;
}

}  // namespace

TEST_CASE(
    "a norm's squares summed over a group and then over it again count each rank's gradient once per member",
    "[core][capture][values]") {
  // Each rank's own parameter (their gradients differ): the first sum over the world puts both
  // ranks' squares in each rank's input to the second, which counts each of them twice.
  // (The second sum also sums what the first made whole on each rank: a double_reduction too.)
  const auto found = check(norm_summed_twice(0, 0), norm_summed_twice(1, 0));
  const auto norm = std::find_if(found.begin(), found.end(),
                                 [](const Finding& f) { return f.kind == FindingKind::grad_norm_miscount; });
  REQUIRE(norm != found.end());
  REQUIRE_THAT(norm->summary, Catch::Contains("all_reduce (sum) at t.py:20 over ranks 0, 1"));
  REQUIRE_THAT(norm->summary, Catch::Contains("in the terms of ranks 0, 1"));
  REQUIRE_THAT(norm->summary, Catch::EndsWith("it is counted 2 times"));
  // The first sum over each rank alone adds nothing of the other's: counted once.
  REQUIRE(check(norm_summed_twice(0, 1), norm_summed_twice(1, 1)).empty());
}
