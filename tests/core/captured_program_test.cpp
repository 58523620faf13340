// The capture loader (docs/capture-format.md): the JSON line reader, every refusal of "What a
// reader must refuse" with its file and line, and the compact records of a folder that loads.
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/scenario/captured_program.hpp"
#include "core/scenario/json_line.hpp"
#include "core/scenario/line_reader.hpp"

using namespace shardcheck::core;

namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/fixtures/" + name;
}

// A temporary capture folder; removed when the test ends.
struct Folder {
  std::string dir;
  Folder() {
    char tmpl[] = "/tmp/shardcheck-capture-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }
  ~Folder() { fs::remove_all(dir); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir + "/" + name, std::ios::binary) << text;
  }
};

std::string header(int rank, int world, int version = 1) {
  return R"({"shardcheck_capture": )" + std::to_string(version) + R"(, "rank": )" + std::to_string(rank) +
         R"(, "world_size": )" + std::to_string(world) +
         R"(, "torch": "2.11.0", "device": "cpu", "argv": ["t.py"]})" + "\n";
}

// One rank's file: the header, `body` (lines ending in \n), and an end record counting them.
std::string file_of(int rank, int world, const std::string& body, int version = 1) {
  int64_t n = 0;
  for (char c : body) n += c == '\n';
  return header(rank, world, version) + body + R"({"k": "end", "records": )" + std::to_string(n) + "}\n";
}

const std::string kPrologue =
    "{\"k\": \"stream\", \"id\": 0, \"name\": \"default\"}\n"
    "{\"k\": \"site\", \"id\": 0, \"file\": \"t.py\", \"line\": 7, \"func\": \"f\"}\n"
    "{\"k\": \"alloc\", \"buf\": 0, \"bytes\": 64, \"stream\": 0, \"at\": 0}\n";

// Loads a one-rank folder whose body follows the prologue.
Expected<CapturedProgram> loaded(const std::string& body) {
  Folder f;
  f.write("rank-0.jsonl", file_of(0, 1, kPrologue + body));
  return load_captured_program(f.dir);
}

// Loads a one-rank folder whose body follows the prologue; returns the error ("" if it loads).
std::string refusal(const std::string& body) {
  Folder f;
  f.write("rank-0.jsonl", file_of(0, 1, kPrologue + body));
  auto p = load_captured_program(f.dir);
  if (p) return "";
  const std::string m = p.error().message();
  const std::string prefix = f.dir + "/rank-0.jsonl:";
  REQUIRE(m.rfind(prefix, 0) == 0);
  return m.substr(prefix.size());
}

}  // namespace

TEST_CASE("JsonLine reads flat objects with nested arrays and refuses what is not JSON", "[core][capture]") {
  JsonLine j;
  REQUIRE(j.parse(R"({"k": "op", "r": [[1, 0, 64], [2, 8, 8]], "s": "a\"b\u00e9", "x": -5, "t": true})") ==
          "");
  const auto* r = j.find("r");
  REQUIRE(r);
  REQUIRE(r->type == JsonLine::Type::array);
  REQUIRE(r->count == 2);
  REQUIRE(j.element(j.element(*r, 1), 1).i == 8);
  REQUIRE(j.find("s")->s == "a\"b\xc3\xa9");
  REQUIRE(j.find("x")->i == -5);
  REQUIRE(j.find("t")->b);
  REQUIRE(j.find("missing") == nullptr);
  REQUIRE(j.parse(R"({"n": 1.5, "big": 9223372036854775808})") == "");
  REQUIRE(j.find("n")->type == JsonLine::Type::number);
  REQUIRE(j.find("big")->type == JsonLine::Type::number);
  REQUIRE_THAT(j.parse(R"({"k": "op",})"), Catch::Contains("column"));
  REQUIRE_THAT(j.parse(R"([1, 2])"), Catch::Contains("expected '{'"));
  REQUIRE_THAT(j.parse(R"({"a": 1} x)"), Catch::Contains("end of the line"));
  REQUIRE_THAT(j.parse(R"({"a": 1, "a": 2})"), Catch::Contains("appears twice"));
  REQUIRE_THAT(j.parse("{\"a\": \"\xff\"}"), Catch::Contains("UTF-8"));
}

TEST_CASE("the Megatron fixture loads into compact records with its sites and groups", "[core][capture]") {
  auto p = load_captured_program(fixture("megatron-6137"));
  REQUIRE(p.ok());
  REQUIRE(p->world_size == 2);
  REQUIRE(p->ranks.size() == 2);
  const CapturedRank& r = p->ranks[0];
  REQUIRE(r.streams == std::vector<std::string>{"default", "side", "nccl:dp"});
  REQUIRE(r.pre.size() == 1);
  REQUIRE(p->groups.size() == 1);
  REQUIRE(p->groups[0].ranks == std::vector<int>{0, 1});
  // site, stream, group and pre-alloc lines define things; the rest are records.
  REQUIRE(r.records.size() == 15);
  REQUIRE(std::find(p->sources.begin(), p->sources.end(), "train.py:37") != p->sources.end());
  REQUIRE(sizeof(CapturedRecord) <= 48);
  REQUIRE(sizeof(CapturedRange) <= 24);
}

TEST_CASE("a capture folder is a folder with rank files", "[core][capture]") {
  REQUIRE(is_capture_dir(fixture("megatron-6137")));
  REQUIRE_FALSE(is_capture_dir(fixture("")));
  REQUIRE_FALSE(is_capture_dir(fixture("megatron-6137/rank-0.jsonl")));
}

TEST_CASE("every malformed record is refused with its line", "[core][capture]") {
  REQUIRE(refusal("") == "");
  REQUIRE_THAT(refusal("{\"k\": \"op\"\n"), Catch::StartsWith("5: not a JSON object"));
  REQUIRE_THAT(refusal("{\"kind\": \"op\"}\n"), Catch::StartsWith("5: a record without 'k'"));
  REQUIRE_THAT(refusal("{\"k\": \"launch\"}\n"), Catch::StartsWith("5: unknown record kind 'launch'"));
  REQUIRE_THAT(refusal("{\"k\": \"free\", \"at\": 0}\n"),
               Catch::StartsWith("5: free record without its field 'buf'"));
  REQUIRE_THAT(refusal("{\"k\": \"free\", \"buf\": \"0\", \"at\": 0}\n"),
               Catch::StartsWith("5: field 'buf' of free must be an integer, not a string"));
  REQUIRE_THAT(refusal("{\"k\": \"free\", \"buf\": 0, \"at\": 3}\n"),
               Catch::StartsWith("5: site 3 is used before its site record defines it"));
  REQUIRE_THAT(refusal("{\"k\": \"stream\", \"id\": 0, \"name\": \"x\"}\n"),
               Catch::StartsWith("5: stream 0 is defined twice"));
  REQUIRE_THAT(refusal("{\"k\": \"stream\", \"id\": 2, \"name\": \"x\"}\n"),
               Catch::StartsWith("5: stream 2 is defined before stream 1"));
  REQUIRE_THAT(refusal("{\"k\": \"op\", \"name\": \"a\", \"stream\": 1, \"r\": [], \"w\": [], \"at\": 0}\n"),
               Catch::StartsWith("5: stream 1 is used before"));
  REQUIRE_THAT(
      refusal("{\"k\": \"op\", \"name\": \"a\", \"stream\": 0, \"r\": [[0, 60, 8]], \"w\": [], \"at\": 0}\n"),
      Catch::StartsWith("5: the range [0, 60, 8] in 'r' reaches outside buffer 0 of 64 bytes"));
  REQUIRE_THAT(
      refusal("{\"k\": \"op\", \"name\": \"a\", \"stream\": 0, \"r\": [[0, 0]], \"w\": [], \"at\": 0}\n"),
      Catch::StartsWith("5: a range in 'r' must be [buf, offset, bytes]"));
  REQUIRE_THAT(
      refusal("{\"k\": \"free\", \"buf\": 0, \"at\": 0}\n"
              "{\"k\": \"op\", \"name\": \"a\", \"stream\": 0, \"r\": [[0, 0, 8]], \"w\": [], \"at\": 0}\n"),
      Catch::StartsWith("6: a range of buffer 0 after it was freed"));
  REQUIRE_THAT(
      refusal("{\"k\": \"free\", \"buf\": 0, \"at\": 0}\n{\"k\": \"free\", \"buf\": 0, \"at\": 0}\n"),
      Catch::StartsWith("6: buffer 0 is freed twice"));
  REQUIRE_THAT(refusal("{\"k\": \"alloc\", \"buf\": 0, \"bytes\": 8, \"stream\": 0, \"at\": 0}\n"),
               Catch::StartsWith("5: buffer 0 is defined twice"));
  REQUIRE_THAT(refusal("{\"k\": \"free\", \"buf\": 9, \"at\": 0}\n"),
               Catch::StartsWith("5: a free of buffer 9, which no alloc record has defined"));
  REQUIRE_THAT(
      refusal("{\"k\": \"coll\", \"op\": \"all_reduce\", \"group\": 0, \"stream\": 0, \"in\": [0, 0, 64], "
              "\"out\": [0, 0, 64], \"dtype\": \"f32\", \"count\": 16, \"reduce\": \"sum\", \"root\": 0, "
              "\"name\": \"g\", \"at\": 0}\n"),
      Catch::StartsWith("5: group 0 is used before its group record defines it"));
  REQUIRE_THAT(refusal("\n"), Catch::StartsWith("5: a blank line"));
  REQUIRE_THAT(refusal("{\"k\": \"stream\", \"id\": 1, \"name\": \"a\\u001b[2J\"}\n"),
               Catch::StartsWith("5: field 'name' of stream holds a control character"));
  REQUIRE_THAT(refusal("{\"k\": \"alloc\", \"buf\": 1, \"bytes\": 1.5, \"stream\": 0, \"at\": 0}\n"),
               Catch::StartsWith("5: field 'bytes' of alloc must be an integer"));
}

TEST_CASE("collectives are checked against their group, dtype and count", "[core][capture]") {
  const std::string group = "{\"k\": \"group\", \"id\": 0, \"name\": \"world\", \"ranks\": [0]}\n";
  auto coll = [](const std::string& op, const std::string& dtype, int count, const std::string& reduce,
                 const std::string& in = "[0, 0, 64]") {
    return "{\"k\": \"coll\", \"op\": \"" + op + "\", \"group\": 0, \"stream\": 0, \"in\": " + in +
           ", \"out\": [0, 0, 64], \"dtype\": \"" + dtype + "\", \"count\": " + std::to_string(count) +
           ", \"reduce\": \"" + reduce + "\", \"root\": 0, \"name\": \"g\", \"at\": 0}\n";
  };
  REQUIRE(refusal(group + coll("all_reduce", "f16", 32, "max")) == "");
  REQUIRE(refusal(group + coll("all_to_all", "i8", 64, "none")) == "");
  REQUIRE(refusal(group +
                  "{\"k\": \"coll\", \"op\": \"barrier\", \"group\": 0, \"stream\": 0, \"name\": \"\", "
                  "\"at\": 0}\n") == "");
  REQUIRE_THAT(refusal(group + coll("all_reduce", "f8", 16, "sum")),
               Catch::StartsWith("6: unknown dtype 'f8'"));
  REQUIRE_THAT(refusal(group + coll("gather", "f32", 16, "sum")), Catch::StartsWith("6: unknown collective"));
  REQUIRE_THAT(refusal(group + coll("all_reduce", "f32", 16, "none")),
               Catch::StartsWith("6: all_reduce needs a reduce op"));
  REQUIRE_THAT(refusal(group + coll("all_reduce", "f32", 17, "sum")),
               Catch::StartsWith("6: all_reduce of count 17 needs 68 bytes of 'in'"));
  REQUIRE_THAT(refusal(group + coll("all_reduce", "f32", 8, "sum", "[0, 2, 32]")),
               Catch::StartsWith("6: 'in' starts at byte 2, not a multiple of 4"));
}

TEST_CASE("version 2: a list form's list side is a range per member, and the tensor's origin a field",
          "[core][capture]") {
  // Two ranks' files of format version 2 (or 1) whose bodies follow a prologue of 4 buffers.
  const std::string prologue =
      "{\"k\": \"stream\", \"id\": 0, \"name\": \"default\"}\n"
      "{\"k\": \"site\", \"id\": 0, \"file\": \"t.py\", \"line\": 7, \"func\": \"f\"}\n"
      "{\"k\": \"group\", \"id\": 0, \"name\": \"world\", \"ranks\": [0, 1]}\n"
      "{\"k\": \"alloc\", \"buf\": 0, \"bytes\": 64, \"stream\": 0, \"at\": 0}\n"
      "{\"k\": \"alloc\", \"buf\": 1, \"bytes\": 64, \"stream\": 0, \"at\": 0}\n"
      "{\"k\": \"alloc\", \"buf\": 2, \"bytes\": 64, \"stream\": 0, \"at\": 0}\n";
  auto load = [&](const std::string& rank0, const std::string& rank1, int version) {
    Folder f;
    f.write("rank-0.jsonl", file_of(0, 2, prologue + rank0, version));
    f.write("rank-1.jsonl", file_of(1, 2, prologue + rank1, version));
    auto p = load_captured_program(f.dir);
    std::string error = p ? "" : p.error().message();
    if (!error.empty()) error = error.substr(error.find(".jsonl:") + 7);
    return std::pair{std::move(p), error};
  };
  auto coll = [](const std::string& op, const std::string& in, const std::string& out, int count,
                 const std::string& extra = "") {
    return "{\"k\": \"coll\", \"op\": \"" + op + "\", \"group\": 0, \"stream\": 0, \"in\": " + in +
           ", \"out\": " + out + ", \"dtype\": \"f32\", \"count\": " + std::to_string(count) +
           ", \"reduce\": \"" + (op == "all_gather" ? "none" : "sum") + "\", \"root\": 0, \"name\": \"c\"" +
           extra + ", \"at\": 0}\n";
  };
  const std::string gather = coll("all_gather", "[0, 0, 16]", "[[1, 0, 16], [2, 16, 16]]", 4);
  auto [p, error] = load(gather, gather, 2);
  REQUIRE(error == "");
  const CapturedRecord& rec = p->ranks[0].records.back();
  REQUIRE((rec.reads == 1 && rec.writes == 2));
  REQUIRE(p->ranks[0].ranges[rec.first + 2].buf == 2);
  REQUIRE(p->ranks[0].ranges[rec.first + 2].offset == 16);
  const std::string scatter = coll("reduce_scatter", "[[1, 0, 16], [2, 0, 16]]", "[0, 0, 16]", 4);
  REQUIRE(load(scatter, scatter, 2).second == "");
  REQUIRE_THAT(
      load(gather, gather, 1).second,
      Catch::StartsWith("8: 'out' of all_gather must be one range [buf, offset, bytes] (a list of ranges "
                        "needs format version 2)"));
  REQUIRE_THAT(load(coll("all_gather", "[[0, 0, 16]]", "[1, 0, 32]", 4), gather, 2).second,
               Catch::StartsWith("8: 'in' of all_gather must be one range"));
  REQUIRE_THAT(load(coll("all_gather", "[0, 0, 16]", "[[1, 0, 16]]", 4), gather, 2).second,
               Catch::StartsWith("8: 'out' lists 1 range, but its group has 2 members"));
  REQUIRE_THAT(load(coll("all_gather", "[0, 0, 16]", "[[1, 0, 16], [2, 0, 8]]", 4), gather, 2).second,
               Catch::StartsWith("8: all_gather of count 4 needs 16 bytes of each range of 'out'"));
  // Where the tensor was made: the n-th of `of` buffers at a site, or a parameter.
  const auto origin = [&](const std::string& extra) {
    return load(coll("all_reduce", "[0, 0, 16]", "[0, 0, 16]", 4, extra),
                coll("all_reduce", "[0, 0, 16]", "[0, 0, 16]", 4, extra), 2);
  };
  auto [q, none] = origin(", \"from\": [0, 1, 2]");
  REQUIRE(none == "");
  const CapturedOrigin& o = q->ranks[1].coll_origins[0];
  REQUIRE((q->strings[static_cast<size_t>(o.where)] == "t.py:7" && o.nth == 1 && o.of == 2 && !o.parameter));
  auto [r, ok] = origin(", \"param\": \"fc.weight\"");
  REQUIRE(ok == "");
  REQUIRE(r->ranks[0].coll_origins[0].parameter);
  REQUIRE_THAT(origin(", \"from\": [0, 2, 2]").second,
               Catch::StartsWith("8: field 'from' of coll must be [site, n, of]"));
  REQUIRE_THAT(origin(", \"from\": [3, 0, 1]").second,
               Catch::StartsWith("8: site 3 is used before its site record defines it"));
  // Version 1 said where in the name: read as the origin, the name is the rest.
  const std::string legacy =
      "{\"k\": \"coll\", \"op\": \"all_reduce\", \"group\": 0, \"stream\": 0, \"in\": "
      "[0, 0, 16], \"out\": [0, 0, 16], \"dtype\": \"f32\", \"count\": 4, \"reduce\": "
      "\"sum\", \"root\": 0, \"name\": \"c10d::allreduce_ of the tensor from t.py:7\", "
      "\"at\": 0}\n";
  auto [v1, fine] = load(legacy, legacy, 1);
  REQUIRE(fine == "");
  REQUIRE(v1->strings[static_cast<size_t>(v1->ranks[0].records.back().name)] == "c10d::allreduce_");
  REQUIRE(v1->strings[static_cast<size_t>(v1->ranks[0].coll_origins[0].where)] == "t.py:7");
  REQUIRE(v1->ranks[0].coll_origins[0].nth == -1);
}

TEST_CASE("an origin some member of the group never carries under that name is not compared",
          "[core][capture]") {
  // Pipeline stages make their tensors at their own lines: rank 0 reduces one made at t.py:7,
  // rank 1 one made at t.py:8, each on their one collective of the group.
  auto file = [](int line) {
    return "{\"k\": \"stream\", \"id\": 0, \"name\": \"default\"}\n"
           "{\"k\": \"site\", \"id\": 0, \"file\": \"t.py\", \"line\": " +
           std::to_string(line) +
           ", \"func\": \"f\"}\n"
           "{\"k\": \"group\", \"id\": 0, \"name\": \"world\", \"ranks\": [0, 1]}\n"
           "{\"k\": \"alloc\", \"buf\": 0, \"bytes\": 64, \"stream\": 0, \"at\": 0}\n"
           "{\"k\": \"coll\", \"op\": \"all_reduce\", \"group\": 0, \"stream\": 0, \"in\": [0, 0, 16], "
           "\"out\": [0, 0, 16], \"dtype\": \"f32\", \"count\": 4, \"reduce\": \"sum\", \"root\": 0, "
           "\"name\": \"c\", \"from\": [0, 0, 1], \"at\": 0}\n";
  };
  Folder f;
  f.write("rank-0.jsonl", file_of(0, 2, file(7), 2));
  f.write("rank-1.jsonl", file_of(1, 2, file(8), 2));
  auto p = load_captured_program(f.dir);
  REQUIRE(p.ok());
  REQUIRE(p->ranks[0].coll_origins[0].where == 0);
  REQUIRE(p->ranks[1].coll_origins[0].where == 0);
  f.write("rank-1.jsonl", file_of(1, 2, file(7), 2));
  auto same = load_captured_program(f.dir);
  REQUIRE(same.ok());
  REQUIRE(same->ranks[1].coll_origins[0].where != 0);
}

TEST_CASE("a folder's shape is refused with the file and line that show it", "[core][capture]") {
  SECTION("a corrupt line") {
    auto p = load_captured_program(fixture("bad-corrupt-line"));
    REQUIRE_FALSE(p.ok());
    REQUIRE_THAT(p.error().message(),
                 Catch::StartsWith(fixture("bad-corrupt-line") + "/rank-1.jsonl:12: not a JSON object"));
  }
  SECTION("world sizes that disagree") {
    auto p = load_captured_program(fixture("bad-world-size"));
    REQUIRE_FALSE(p.ok());
    REQUIRE_THAT(p.error().message(), Catch::StartsWith(fixture("bad-world-size") +
                                                        "/rank-1.jsonl:1: world_size is 3 here but 2 in"));
  }
  SECTION("a missing rank") {
    auto p = load_captured_program(fixture("bad-missing-rank"));
    REQUIRE_FALSE(p.ok());
    REQUIRE_THAT(p.error().message(),
                 Catch::StartsWith(fixture("bad-missing-rank") + "/rank-1.jsonl:1: world_size is 2 but " +
                                   fixture("bad-missing-rank") + " has no rank-0.jsonl"));
  }
  SECTION("a duplicated rank, a rank the file name contradicts, an unknown version, an end that lies") {
    Folder f;
    f.write("rank-0.jsonl", file_of(0, 1, kPrologue));
    f.write("rank-00.jsonl", file_of(0, 1, kPrologue));
    REQUIRE_THAT(load_captured_program(f.dir).error().message(), Catch::Contains("rank 0 has two files"));
    fs::remove(f.dir + "/rank-00.jsonl");
    f.write("rank-0.jsonl", file_of(1, 2, kPrologue));
    REQUIRE_THAT(load_captured_program(f.dir).error().message(),
                 Catch::Contains("rank-0.jsonl:1: the header says rank 1 but the file is named for rank 0"));
    std::string h = file_of(0, 1, kPrologue);
    h.replace(h.find("\"shardcheck_capture\": 1"), 23, "\"shardcheck_capture\": 3");
    f.write("rank-0.jsonl", h);
    REQUIRE_THAT(
        load_captured_program(f.dir).error().message(),
        Catch::Contains("rank-0.jsonl:1: capture format version 3 is not one this shardcheck reads"));
    f.write("rank-0.jsonl", header(0, 1) + kPrologue + "{\"k\": \"end\", \"records\": 2}\n");
    REQUIRE_THAT(load_captured_program(f.dir).error().message(),
                 Catch::Contains("rank-0.jsonl:5: the end record counts 2 records but the file holds 3"));
  }
  SECTION("groups whose ranks differ between files") {
    Folder f;
    const std::string g0 = "{\"k\": \"group\", \"id\": 0, \"name\": \"dp\", \"ranks\": [0, 1]}\n";
    const std::string g1 = "{\"k\": \"group\", \"id\": 0, \"name\": \"dp\", \"ranks\": [1]}\n";
    f.write("rank-0.jsonl", file_of(0, 2, kPrologue + g0));
    f.write("rank-1.jsonl", file_of(1, 2, kPrologue + g1));
    REQUIRE_THAT(load_captured_program(f.dir).error().message(),
                 Catch::Contains("rank-1.jsonl:5: group 'dp' has ranks [1] here but [0, 1] at"));
  }
}

TEST_CASE("an alloc's device address and the header's allocator load, and bad ones are refused",
          "[core][capture]") {
  REQUIRE_THAT(
      refusal("{\"k\": \"alloc\", \"buf\": 1, \"bytes\": 64, \"stream\": 0, \"at\": 0, \"addr\": 0}\n"),
      Catch::Contains("5: field 'addr' of alloc is 0, outside 1..72057594037927935"));
  REQUIRE_THAT(
      refusal("{\"k\": \"alloc\", \"buf\": 1, \"bytes\": 64, \"stream\": 0, \"at\": 0, \"addr\": \"x\"}\n"),
      Catch::Contains("5: "));
  auto load = [&](const std::string& a0, const std::string& a1) {
    Folder f;
    for (int r = 0; r < 2; ++r) {
      std::string h = header(r, 2);
      h = h.substr(0, h.size() - 2) + ", \"allocator\": \"" + (r == 0 ? a0 : a1) + "\"}\n";
      f.write("rank-" + std::to_string(r) + ".jsonl", h + kPrologue + "{\"k\": \"end\", \"records\": 3}\n");
    }
    auto p = load_captured_program(f.dir);
    return p ? std::string(to_string(p->allocator)) : p.error().message().substr(f.dir.size());
  };
  REQUIRE(load("native", "native") == "caching");
  REQUIRE(load("cudaMallocAsync", "cudaMallocAsync") == "stream_ordered");
  REQUIRE_THAT(load("cudaMallocAsync", "native"),
               Catch::StartsWith("/rank-1.jsonl:1: allocator is 'native' here but 'cudaMallocAsync' in "));
  REQUIRE_THAT(load("pluggable", "pluggable"),
               Catch::StartsWith("/rank-0.jsonl:1: allocator 'pluggable' is not one the checker models"));
  // The addresses land on their alloc records.
  auto p = loaded(
      "{\"k\": \"alloc\", \"buf\": 1, \"bytes\": 64, \"stream\": 0, \"at\": 0, "
      "\"addr\": 140737488355328}\n");
  REQUIRE(p);
  const auto& r = p->ranks[0];
  REQUIRE(r.records[0].first == CapturedRank::kNoAddress);
  REQUIRE(r.records[1].first == 0);
  REQUIRE(r.addresses == std::vector<uint64_t>{140737488355328ULL});
}

TEST_CASE(
    "host threads, their signals and waits load, a switch to the same thread is dropped, bad ones are "
    "refused",
    "[core][capture]") {
  REQUIRE_THAT(refusal("{\"k\": \"thread\", \"id\": -1}\n"),
               Catch::Contains("5: field 'id' of thread is -1, outside 0..1023"));
  REQUIRE_THAT(refusal("{\"k\": \"thread\", \"id\": 1, \"name\": 7}\n"),
               Catch::Contains("5: field 'name' of thread must be"));
  REQUIRE_THAT(refusal("{\"k\": \"host_wait\", \"id\": 0, \"at\": 0}\n"),
               Catch::Contains("5: host_wait record without its field 'signal'"));
  REQUIRE_THAT(refusal("{\"k\": \"host_signal\", \"id\": 0}\n"),
               Catch::Contains("5: host_signal record without its field 'at'"));
  auto p = loaded(
      "{\"k\": \"host_signal\", \"id\": 3, \"at\": 0}\n"
      "{\"k\": \"thread\", \"id\": 0}\n"
      "{\"k\": \"thread\", \"id\": 2, \"name\": \"loader\"}\n"
      "{\"k\": \"host_wait\", \"signal\": 3, \"at\": 0}\n"
      "{\"k\": \"thread\", \"id\": 2}\n"
      "{\"k\": \"thread\", \"id\": 0}\n");
  REQUIRE(p);
  std::vector<std::pair<CapturedKind, int32_t>> got;
  for (const auto& rec : p->ranks[0].records) got.emplace_back(rec.kind, rec.a);
  const std::vector<std::pair<CapturedKind, int32_t>> want = {{CapturedKind::alloc, 0},
                                                              {CapturedKind::host_signal, 3},
                                                              {CapturedKind::host_thread, 2},
                                                              {CapturedKind::host_wait, 3},
                                                              {CapturedKind::host_thread, 0}};
  REQUIRE(got == want);
  REQUIRE(p->strings[static_cast<size_t>(p->ranks[0].records[2].name)] == "loader");
}

TEST_CASE("the captured-program limits are enforced at load", "[core][capture]") {
  std::string body;
  for (int s = 1; s <= CaptureLimits::kMaxStreams; ++s)
    body +=
        "{\"k\": \"stream\", \"id\": " + std::to_string(s) + ", \"name\": \"s" + std::to_string(s) + "\"}\n";
  REQUIRE_THAT(refusal(body), Catch::Contains("more than " + std::to_string(CaptureLimits::kMaxStreams) +
                                              " streams on one rank"));
  REQUIRE_THAT(refusal("{\"k\": \"alloc\", \"buf\": 1, \"bytes\": " +
                       std::to_string(CaptureLimits::kMaxLiveBytes) + ", \"stream\": 0, \"at\": 0}\n"),
               Catch::Contains("bytes at once, past the limit"));
}

TEST_CASE(
    "a rank that did not finish loads as partial, with why and where: refusing it would lose the program",
    "[core][capture]") {
  const std::string body =
      kPrologue +
      "{\"k\": \"op\", \"name\": \"aten::add\", \"stream\": 0, \"r\": [[0, 0, 64]], \"w\": [], \"at\": 0}\n";
  SECTION("an end record marked partial names the reason and the Python line") {
    Folder f;
    f.write("rank-0.jsonl",
            header(0, 1) + body +
                "{\"k\": \"end\", \"records\": 4, \"partial\": \"raised ValueError: no\", \"at\": 0}\n");
    auto p = load_captured_program(f.dir);
    REQUIRE(p.ok());
    REQUIRE(p->ranks[0].partial == "raised ValueError: no");
    REQUIRE(p->partial() == "rank 0: raised ValueError: no at t.py:7");
  }
  SECTION("a file cut before its end record (the rank was killed) keeps every whole line") {
    Folder f;
    f.write("rank-0.jsonl", header(0, 1) + body);
    auto p = load_captured_program(f.dir);
    REQUIRE(p.ok());
    REQUIRE(p->ranks[0].records.size() == 2);
    REQUIRE_THAT(p->partial(),
                 Catch::StartsWith("rank 0: the file ends without its end record after 4 records"));
  }
  SECTION("a last line cut while it was written is the record in flight: dropped") {
    Folder f;
    f.write("rank-0.jsonl", header(0, 1) + body + "{\"k\": \"op\", \"name\": \"aten::m");
    auto p = load_captured_program(f.dir);
    REQUIRE(p.ok());
    REQUIRE(p->ranks[0].records.size() == 2);
    REQUIRE_THAT(p->partial(), Catch::Contains("after 4 records"));
  }
  SECTION("a corrupt line that is not the file's cut end is still refused") {
    Folder f;
    f.write("rank-0.jsonl", header(0, 1) + body + "{\"k\": \"op\", \"name\n");
    REQUIRE_FALSE(load_captured_program(f.dir).ok());
  }
  SECTION("the shipped fixture of a killed rank") {
    auto p = load_captured_program(fixture("partial-killed"));
    REQUIRE(p.ok());
    REQUIRE(p->ranks[0].partial.empty());
    REQUIRE_THAT(p->partial(),
                 Catch::StartsWith("rank 1: the file ends without its end record after 19 records"));
  }
}

TEST_CASE("a capture where no rank recorded anything checked nothing: it is never clean", "[core][capture]") {
  // A program whose work ran on another device, or in processes the capture did not start.
  Folder f;
  f.write("rank-0.jsonl", file_of(0, 2, "{\"k\": \"stream\", \"id\": 0, \"name\": \"default\"}\n"));
  f.write("rank-1.jsonl", file_of(1, 2, ""));
  auto p = load_captured_program(f.dir);
  REQUIRE(p.ok());
  REQUIRE(p->ranks[0].partial.empty());
  REQUIRE_THAT(p->partial(),
               Catch::StartsWith("nothing was recorded: no operator, allocation or collective"));
  // One operator on one rank is something checked.
  auto q = loaded(
      "{\"k\": \"op\", \"name\": \"aten::add\", \"stream\": 0, \"r\": [[0, 0, 64]], \"w\": [], "
      "\"at\": 0}\n");
  REQUIRE(q.ok());
  REQUIRE(q->partial().empty());
}

TEST_CASE("a FIFO rank file would hang the loader forever: it is refused at once", "[core][capture]") {
  Folder f;
  REQUIRE(::mkfifo((f.dir + "/rank-0.jsonl").c_str(), 0600) == 0);
  auto p = load_captured_program(f.dir);
  REQUIRE_FALSE(p);
  REQUIRE_THAT(p.error().message(), Catch::Contains("rank-0.jsonl: a FIFO (named pipe), not a regular file"));
}

TEST_CASE("a folder named like a rank file is called a folder, not an empty file", "[core][capture]") {
  Folder f;
  fs::create_directory(f.dir + "/rank-0.jsonl");
  auto p = load_captured_program(f.dir);
  REQUIRE_FALSE(p);
  REQUIRE_THAT(p.error().message(), Catch::Contains("rank-0.jsonl: is a folder"));
}

TEST_CASE("a rank file linked to /dev/zero would grow memory without end: it is refused", "[core][capture]") {
  if (!fs::exists("/dev/zero")) return;  // not every machine has it
  Folder f;
  fs::create_symlink("/dev/zero", f.dir + "/rank-0.jsonl");
  auto p = load_captured_program(f.dir);
  REQUIRE_FALSE(p);
  REQUIRE_THAT(p.error().message(), Catch::Contains("a device or socket, not a regular file"));
}

TEST_CASE("a line past the line limit is refused while it is read, with its line number", "[core][capture]") {
  const std::string longline = "{\"k\": \"site\", \"pad\": \"" + std::string(3u << 20, 'x') + "\"}\n";
  const std::string m = refusal(longline);
  REQUIRE_THAT(m, Catch::Contains("5: a line past the limit of 1048576 bytes"));
}

TEST_CASE("LineReader hands out every line whole, wherever its blocks cut them", "[core][capture]") {
  // Lines of many lengths, several longer than a read block (256 KiB), so that blocks end
  // inside lines, at newlines and right after them; one line exactly at the limit.
  constexpr size_t kLimit = 600'000;
  std::vector<std::string> lines;
  for (size_t n : {0u, 1u, 7u, 300'000u, 5u, 262'143u, 262'144u, 1u, 599'999u, 600'000u, 3u})
    lines.push_back(std::string(n, static_cast<char>('a' + lines.size())));
  Folder f;
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  f.write("lines.txt", text + "tail");  // a last line without its newline
  LineReader r(f.dir + "/lines.txt", kLimit);
  REQUIRE(r.ok());
  REQUIRE(r.file_bytes() == static_cast<int64_t>(text.size() + 4));
  std::string_view line;
  for (size_t i = 0; i < lines.size(); ++i) {
    REQUIRE(r.next(line));
    REQUIRE(line == lines[i]);
    REQUIRE(r.number() == static_cast<int64_t>(i + 1));
    REQUIRE_FALSE(r.unterminated());
  }
  REQUIRE(r.next(line));
  REQUIRE(line == "tail");
  REQUIRE(r.unterminated());
  REQUIRE(r.bytes_read() == r.file_bytes());
  REQUIRE_FALSE(r.next(line));
}

TEST_CASE("LineReader refuses a line one byte past its limit, with that line's number", "[core][capture]") {
  Folder f;
  f.write("lines.txt", "first\n" + std::string(1001, 'x') + "\nlast\n");
  LineReader r(f.dir + "/lines.txt", 1000);
  std::string_view line;
  REQUIRE(r.next(line));
  try {
    r.next(line);
    FAIL("the long line was handed out");
  } catch (const LineReader::Error& e) {
    REQUIRE(e.line == 2);
    REQUIRE(e.what == "a line past the limit of 1000 bytes");
  }
}
