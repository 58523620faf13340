// Loading a capture folder (docs/capture-format.md): every rank's header first, so that the
// folder's shape is checked before any body is read, then each file streamed line by line
// into its rank's compact records. Every refusal names the file and line.
#include "core/scenario/captured_program.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <unordered_map>

#include "core/base/text.hpp"
#include "core/scenario/json_line.hpp"
#include "core/scenario/line_reader.hpp"

namespace shardcheck::core {

namespace {

namespace fs = std::filesystem;
using Type = JsonLine::Type;
using Value = JsonLine::Value;

constexpr size_t kMaxNameBytes = 4096;

struct Refusal {
  int64_t line;
  std::string what;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Interned = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

int32_t intern(Interned& ids, std::vector<std::string>& table, std::string_view s) {
  auto it = ids.find(s);
  if (it != ids.end()) return it->second;
  const auto id = static_cast<int32_t>(table.size());
  table.emplace_back(s);
  ids.emplace(std::string(s), id);
  return id;
}

// "rank-12.jsonl" -> 12; -1 for any other name.
int rank_of_file(const std::string& name) {
  constexpr std::string_view prefix = "rank-", suffix = ".jsonl";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoi(digits);
}

std::string ranks_text(const std::vector<int>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s + "]";
}

// The lines of a rank file, each refusal of the reader (a line past the limit, a failed read)
// a Refusal with its line.
class Lines : public LineReader {
 public:
  explicit Lines(const std::string& path) : LineReader(path, CaptureLimits::kMaxLineBytes) {}
  bool next(std::string_view& line) {
    try {
      return LineReader::next(line);
    } catch (const LineReader::Error& e) {
      throw Refusal{e.line, e.what};
    }
  }
};

struct Header {
  int version = 1;  // of the format (docs/capture-format.md)
  int rank = 0;
  int world_size = 0;
  Allocator allocator = Allocator::caching;
  std::string allocator_name = "native";
  bool cpu = false;  // the header's `device` is "cpu"
};

// The checks on one parsed line: a field's presence and type, with the record's line.
class Fields {
 public:
  Fields(const JsonLine& j, int64_t line, std::string_view kind) : j_(j), line_(line), kind_(kind) {}
  [[noreturn]] void fail(const std::string& what) const { throw Refusal{line_, what}; }
  const Value& need(std::string_view key, Type t) const {
    const Value* v = j_.find(key);
    if (!v) fail(std::string(kind_) + " record without its field '" + std::string(key) + "'");
    if (v->type != t) {
      fail("field '" + std::string(key) + "' of " + std::string(kind_) + " must be " +
           std::string(JsonLine::type_name(t)) + ", not " + std::string(JsonLine::type_name(v->type)));
    }
    return *v;
  }
  int64_t integer(std::string_view key, int64_t lo, int64_t hi) const {
    const int64_t x = need(key, Type::integer).i;
    if (x < lo || x > hi) {
      fail("field '" + std::string(key) + "' of " + std::string(kind_) + " is " + std::to_string(x) +
           ", outside " + std::to_string(lo) + ".." + std::to_string(hi));
    }
    return x;
  }
  // Names, files and functions end up in findings printed on a terminal: no control characters
  // (even written as JSON escapes), and at most kMaxNameBytes.
  std::string_view str(std::string_view key) const {
    const std::string_view s = need(key, Type::string).s;
    if (s.size() > kMaxNameBytes) {
      fail("field '" + std::string(key) + "' of " + std::string(kind_) + " is longer than " +
           std::to_string(kMaxNameBytes) + " bytes");
    }
    for (size_t i = 0; i < s.size();) {
      const auto byte = static_cast<unsigned char>(s[i]);
      if (byte >= 0x20 && byte < 0x7f) {  // ASCII other than a control: the usual byte
        ++i;
        continue;
      }
      const Utf8Sequence u = utf8_sequence_at(s, i);
      if (is_control(u.code_point)) {
        fail("field '" + std::string(key) + "' of " + std::string(kind_) + " holds a control character");
      }
      i += u.length;
    }
    return s;
  }
  bool flag(std::string_view key) const {
    const Value* v = j_.find(key);
    if (!v) return false;
    return need(key, Type::boolean).b;
  }
  bool has(std::string_view key) const { return j_.find(key) != nullptr; }
  const JsonLine& json() const { return j_; }

 private:
  const JsonLine& j_;
  int64_t line_;
  std::string_view kind_;
};

Header read_header(Lines& lines, const std::string& file, int file_rank);

class RankLoader {
 public:
  RankLoader(CapturedProgram& p, CapturedRank& r, int rank, Interned& strings, Interned& sources,
             std::map<std::string, std::pair<int32_t, std::string>>& group_where)
      : p_(p), r_(r), rank_(rank), strings_(strings), sources_(sources), group_where_(group_where) {}

  void load(Lines& lines, int64_t* total_records, int64_t* total_ranges) {
    ranges_total_ = total_ranges;
    std::string_view line;
    version_ = read_header(lines, r_.file, rank_).version;  // checked already, with every header
    bool ended = false;
    while (lines.next(line)) {
      line_ = lines.number();
      if (ended) throw Refusal{line_, "a line after the end record"};
      if (line.size() > CaptureLimits::kMaxLineBytes) {
        throw Refusal{line_, "a line of " + std::to_string(line.size()) + " bytes, past the limit of " +
                                 std::to_string(CaptureLimits::kMaxLineBytes)};
      }
      if (line.empty() || line == "\r") throw Refusal{line_, "a blank line (every line is one JSON object)"};
      if (std::string e = j_.parse(line); !e.empty()) {
        // The last line, cut while the rank was killed writing it: the record in flight is lost.
        if (lines.unterminated()) break;
        throw Refusal{line_, e};
      }
      const Value* k = j_.find("k");
      if (!k) throw Refusal{line_, "a record without 'k', its kind"};
      if (k->type != Type::string) throw Refusal{line_, "field 'k' must be a string"};
      if (k->s == "end") {
        Fields f(j_, line_, "end");
        const int64_t n = f.integer("records", 0, INT64_MAX);
        if (n != records_) {
          f.fail("the end record counts " + std::to_string(n) + " records but the file holds " +
                 std::to_string(records_) + " (truncated or corrupt)");
        }
        if (f.has("partial")) {
          r_.partial = std::string(f.str("partial"));
          if (r_.partial.empty()) r_.partial = "stopped";
          if (f.has("at")) r_.partial_source = site_ref(f);
        }
        ended = true;
        continue;
      }
      ++records_;
      if (records_ > CaptureLimits::kMaxRecordsPerRank) {
        throw Refusal{line_, "more than " + std::to_string(CaptureLimits::kMaxRecordsPerRank) +
                                 " records for one rank (docs/limits.md)"};
      }
      if (++*total_records > CaptureLimits::kMaxRecords) {
        throw Refusal{line_, "more than " + std::to_string(CaptureLimits::kMaxRecords) +
                                 " records summed over the ranks (docs/limits.md)"};
      }
      record(k->s);
      if (records_ == kRecordsBeforeReserving) reserve_for_file(lines);
    }
    r_.file_records = records_;
    if (!ended) {
      // Killed or crashed before it could end its file: what reached the file is the rank's
      // program up to there (records reach it at every collective and synchronization).
      r_.partial = "the file ends without its end record after " + std::to_string(records_) +
                   " records: the rank was killed, or crashed, before the capture could end it";
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Refusal{line_, what}; }

  // Reserves room for the rest of the file at the rate of its first records, so that the
  // records and ranges are not grown (copied, their pages touched again) and then shrunk to fit
  // (copied once more). Room reserved and never written costs address space, not memory.
  static constexpr int64_t kRecordsBeforeReserving = 4096;
  void reserve_for_file(const Lines& lines) {
    const double read = static_cast<double>(std::max<int64_t>(lines.bytes_read(), 1));
    const double scale = static_cast<double>(lines.file_bytes()) / read * 1.0625;
    if (scale <= 1) return;
    const auto room = [scale](size_t now, int64_t most) {
      return static_cast<size_t>(std::min(static_cast<double>(now) * scale + 64, static_cast<double>(most)));
    };
    r_.records.reserve(room(r_.records.size(), CaptureLimits::kMaxRecordsPerRank));
    r_.ranges.reserve(room(r_.ranges.size(), CaptureLimits::kMaxRanges));
  }

  int32_t stream_ref(const Fields& f, std::string_view key = "stream") const {
    const int64_t s = f.integer(key, 0, INT32_MAX);
    if (s >= static_cast<int64_t>(r_.streams.size()))
      f.fail("stream " + std::to_string(s) + " is used before its stream record defines it");
    return static_cast<int32_t>(s);
  }
  int32_t site_ref(const Fields& f) const {
    const int64_t s = f.integer("at", 0, INT32_MAX);
    if (s >= static_cast<int64_t>(sites_.size()))
      f.fail("site " + std::to_string(s) + " is used before its site record defines it");
    return sites_[static_cast<size_t>(s)];
  }
  int32_t buffer_ref(const Fields& f, int64_t b, const char* use) const {
    if (b < 0 || b >= static_cast<int64_t>(sizes_.size()))
      f.fail(std::string(use) + " of buffer " + std::to_string(b) + ", which no alloc record has defined");
    if (!live_[static_cast<size_t>(b)])
      f.fail(std::string(use) + " of buffer " + std::to_string(b) + " after it was freed");
    return static_cast<int32_t>(b);
  }
  // Event ids are any integers below the bound, and a capture may use a few far apart: each
  // is numbered densely in the order of its first use, so a rank's event state is as large as
  // the events it uses, not as its largest id.
  int32_t event_ref(const Fields& f) {
    const int64_t e = f.integer("event", 0, CaptureLimits::kMaxIds - 1);
    const auto [it, fresh] = event_index_.try_emplace(e, r_.events);
    if (fresh) {
      r_.event_ids.push_back(e);
      ++r_.events;
    }
    return it->second;
  }
  int32_t group_ref(const Fields& f) const {
    const int64_t g = f.integer("group", 0, INT32_MAX);
    if (g >= static_cast<int64_t>(r_.groups.size()))
      f.fail("group " + std::to_string(g) + " is used before its group record defines it");
    const CapturedGroup& group = p_.groups[static_cast<size_t>(r_.groups[static_cast<size_t>(g)])];
    if (!std::binary_search(group.ranks.begin(), group.ranks.end(), rank_))
      f.fail("rank " + std::to_string(rank_) + " uses group '" + group.name +
             "', which it is not a member of");
    return static_cast<int32_t>(g);
  }
  CapturedRange range(const Fields& f, const Value& v, std::string_view key) const {
    if (v.type != Type::array || v.count != 3)
      f.fail("a range in '" + std::string(key) + "' must be [buf, offset, bytes]");
    int64_t x[3];
    for (uint32_t i = 0; i < 3; ++i) {
      const Value& e = f.json().element(v, i);
      if (e.type != Type::integer)
        f.fail("a range in '" + std::string(key) + "' must be [buf, offset, bytes] of integers");
      x[i] = e.i;
    }
    const int32_t b = buffer_ref(f, x[0], "a range");
    const int64_t size = sizes_[static_cast<size_t>(b)];
    if (x[1] < 0 || x[2] < 0 || x[1] > size || x[2] > size - x[1]) {
      f.fail("the range [" + std::to_string(x[0]) + ", " + std::to_string(x[1]) + ", " +
             std::to_string(x[2]) + "] in '" + std::string(key) + "' reaches outside buffer " +
             std::to_string(x[0]) + " of " + std::to_string(size) + " bytes");
    }
    return {x[1], x[2], b};
  }
  DType dtype(const Fields& f) const {
    const std::string_view s = f.str("dtype");
    static constexpr std::pair<std::string_view, DType> kNames[] = {
        {"f32", DType::f32}, {"f16", DType::f16},     {"bf16", DType::bf16}, {"f64", DType::f64},
        {"i8", DType::i8},   {"u8", DType::u8},       {"i16", DType::i16},   {"i32", DType::i32},
        {"i64", DType::i64}, {"bool", DType::boolean}};
    for (const auto& [n, t] : kNames) {
      if (n == s) return t;
    }
    f.fail("unknown dtype '" + std::string(s) +
           "' (expected f32, f16, bf16, f64, i8, u8, i16, i32, i64 or bool)");
  }
  int32_t name(const Fields& f, std::string_view key = "name") {
    return intern(strings_, p_.strings, f.str(key));
  }

  void count_ranges(const Fields& f, int64_t n) const {
    *ranges_total_ += n;
    if (*ranges_total_ > CaptureLimits::kMaxRanges) {
      f.fail("more than " + std::to_string(CaptureLimits::kMaxRanges) +
             " byte ranges summed over the ranks (docs/limits.md)");
    }
  }

  void define_dense(const Fields& f, const char* what, size_t defined) const {
    const int64_t id = f.integer("id", 0, CaptureLimits::kMaxIds - 1);
    if (id < static_cast<int64_t>(defined))
      f.fail(std::string(what) + " " + std::to_string(id) + " is defined twice");
    if (id > static_cast<int64_t>(defined)) {
      f.fail(std::string(what) + " " + std::to_string(id) + " is defined before " + what + " " +
             std::to_string(defined) + " (ids are dense and defined in order)");
    }
  }

  // One record kind: reads the line's fields into `rec`; true when `rec` is a record to keep
  // (definitions and pre-existing buffers are kept elsewhere).
  using Reader = bool (RankLoader::*)(std::string_view kind, CapturedRecord& rec);
  struct Handler {
    std::string_view kind;
    Reader read;
  };
  // Every record kind a rank file may hold but `end`, in the order docs/capture-format.md
  // lists them; kind_list() and the refusal of an unknown kind are made from it.
  static std::span<const Handler> handlers() {
    static constexpr Handler kTable[] = {
        {"site", &RankLoader::site},
        {"stream", &RankLoader::stream},
        {"group", &RankLoader::group},
        {"alloc", &RankLoader::alloc},
        {"free", &RankLoader::free_record},
        {"op", &RankLoader::op},
        {"record_stream", &RankLoader::record_stream},
        {"event_record", &RankLoader::event},
        {"event_wait", &RankLoader::event},
        {"event_sync", &RankLoader::event_sync},
        {"stream_sync", &RankLoader::stream_sync},
        {"device_sync", &RankLoader::device_sync},
        {"coll", &RankLoader::collective},
        {"send", &RankLoader::p2p},
        {"recv", &RankLoader::p2p},
        {"thread", &RankLoader::thread},
        {"host_signal", &RankLoader::host_signal},
        {"host_wait", &RankLoader::host_signal},
        {"value", &RankLoader::value},
    };
    return kTable;
  }

  static std::string kind_list() {
    std::string out;
    for (const Handler& h : handlers()) out += std::string(h.kind) + ", ";
    return out + "end";
  }

  void record(std::string_view k) {
    for (const Handler& h : handlers()) {
      if (h.kind != k) continue;
      CapturedRecord rec;
      if ((this->*h.read)(k, rec)) {
        r_.records.push_back(rec);
      } else {
        dropped_.push_back(records_ - 1);
      }
      return;
    }
    fail("unknown record kind '" + std::string(k) + "' (expected " + kind_list() + ")");
  }

  bool site(std::string_view, CapturedRecord&) {
    Fields f(j_, line_, "site");
    define_dense(f, "site", sites_.size());
    const std::string_view file = f.str("file");
    const int64_t line = f.integer("line", 0, INT32_MAX);
    f.str("func");
    sites_.push_back(intern(sources_, p_.sources, std::string(file) + ":" + std::to_string(line)));
    if (p_.source_lines.size() < p_.sources.size())
      p_.source_lines.push_back({std::string(file), static_cast<int>(line)});
    return false;
  }

  bool stream(std::string_view, CapturedRecord&) {
    Fields f(j_, line_, "stream");
    define_dense(f, "stream", r_.streams.size());
    if (r_.streams.size() >= static_cast<size_t>(CaptureLimits::kMaxStreams)) {
      f.fail("more than " + std::to_string(CaptureLimits::kMaxStreams) +
             " streams on one rank (docs/limits.md)");
    }
    std::string n(f.str("name"));
    if (n.empty()) n = "stream " + std::to_string(r_.streams.size());
    // Stream names are how the simulator tells streams apart: a repeated name gets its id.
    if (std::find(r_.streams.begin(), r_.streams.end(), n) != r_.streams.end())
      n += " #" + std::to_string(r_.streams.size());
    r_.streams.push_back(std::move(n));
    return false;
  }

  // A group's ranks: integers of the world, ascending, each once.
  std::vector<int> group_ranks(const Fields& f, const std::string& n) const {
    const Value& rv = f.need("ranks", Type::array);
    std::vector<int> ranks;
    for (uint32_t i = 0; i < rv.count; ++i) {
      const Value& e = j_.element(rv, i);
      if (e.type != Type::integer || e.i < 0 || e.i >= p_.world_size)
        f.fail("group '" + n + "': ranks must be integers in 0.." + std::to_string(p_.world_size - 1));
      if (!ranks.empty() && e.i <= ranks.back())
        f.fail("group '" + n + "': ranks must be ascending, each once");
      ranks.push_back(static_cast<int>(e.i));
    }
    if (ranks.empty()) f.fail("group '" + n + "' has no ranks");
    return ranks;
  }

  bool group(std::string_view, CapturedRecord&) {
    Fields f(j_, line_, "group");
    define_dense(f, "group", r_.groups.size());
    const std::string n(f.str("name"));
    const std::vector<int> ranks = group_ranks(f, n);
    auto it = group_where_.find(n);
    if (it == group_where_.end()) {
      if (p_.groups.size() >= static_cast<size_t>(CaptureLimits::kMaxGroups)) {
        f.fail("more than " + std::to_string(CaptureLimits::kMaxGroups) + " process groups (docs/limits.md)");
      }
      p_.groups.push_back({n, ranks});
      it = group_where_
               .emplace(n, std::pair{static_cast<int32_t>(p_.groups.size() - 1),
                                     r_.file + ":" + std::to_string(line_)})
               .first;
    } else if (p_.groups[static_cast<size_t>(it->second.first)].ranks != ranks) {
      f.fail("group '" + n + "' has ranks " + ranks_text(ranks) + " here but " +
             ranks_text(p_.groups[static_cast<size_t>(it->second.first)].ranks) + " at " + it->second.second);
    }
    r_.groups.push_back(it->second.first);
    return false;
  }

  bool alloc(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "alloc");
    const int64_t b = f.integer("buf", 0, CaptureLimits::kMaxIds - 1);
    if (b < static_cast<int64_t>(sizes_.size())) f.fail("buffer " + std::to_string(b) + " is defined twice");
    if (b > static_cast<int64_t>(sizes_.size())) {
      f.fail("buffer " + std::to_string(b) + " is defined before buffer " + std::to_string(sizes_.size()) +
             " (ids are dense and defined in order)");
    }
    const int64_t bytes = f.integer("bytes", 0, CaptureLimits::kMaxLiveBytes);
    const int32_t stream = stream_ref(f);
    const int32_t source = site_ref(f);
    sizes_.push_back(bytes);
    live_.push_back(1);
    r_.buffers = static_cast<int32_t>(sizes_.size());
    live_bytes_ += bytes;
    if (live_bytes_ > CaptureLimits::kMaxLiveBytes) {
      f.fail("rank " + std::to_string(rank_) + " holds " + std::to_string(live_bytes_) +
             " bytes at once, past the limit of " + std::to_string(CaptureLimits::kMaxLiveBytes) +
             " (docs/limits.md)");
    }
    r_.peak_live_bytes = std::max(r_.peak_live_bytes, live_bytes_);
    const uint64_t address =
        f.has("addr") ? static_cast<uint64_t>(f.integer("addr", 1, CaptureLimits::kMaxAddress)) : 0;
    if (f.flag("pre")) {
      r_.pre.push_back({static_cast<int32_t>(b), stream, source, bytes, address});
      return false;
    }
    rec.kind = CapturedKind::alloc;
    rec.a = static_cast<int32_t>(b);
    rec.stream = stream;
    rec.source = source;
    rec.n = bytes;
    rec.first = CapturedRank::kNoAddress;
    if (address != 0) {
      rec.first = static_cast<uint32_t>(r_.addresses.size());
      r_.addresses.push_back(address);
    }
    return true;
  }

  bool free_record(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "free");
    const int64_t b = f.integer("buf", 0, INT32_MAX);
    if (b < static_cast<int64_t>(live_.size()) && !live_[static_cast<size_t>(b)])
      f.fail("buffer " + std::to_string(b) + " is freed twice");
    rec.kind = CapturedKind::free;
    rec.a = buffer_ref(f, b, "a free");
    rec.source = site_ref(f);
    live_[static_cast<size_t>(b)] = 0;
    live_bytes_ -= sizes_[static_cast<size_t>(b)];
    return true;
  }

  bool op(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "op");
    rec.kind = CapturedKind::op;
    rec.name = name(f);
    rec.stream = stream_ref(f);
    rec.source = site_ref(f);
    const Value& r = f.need("r", Type::array);
    const Value& w = f.need("w", Type::array);
    if (r.count + w.count > static_cast<uint32_t>(CaptureLimits::kMaxRangesPerOp)) {
      f.fail("an op with " + std::to_string(r.count + w.count) + " ranges, past the limit of " +
             std::to_string(CaptureLimits::kMaxRangesPerOp) + " (docs/limits.md)");
    }
    count_ranges(f, r.count + w.count);
    rec.first = static_cast<uint32_t>(r_.ranges.size());
    for (uint32_t i = 0; i < r.count; ++i) r_.ranges.push_back(range(f, j_.element(r, i), "r"));
    for (uint32_t i = 0; i < w.count; ++i) r_.ranges.push_back(range(f, j_.element(w, i), "w"));
    rec.reads = static_cast<uint16_t>(r.count);
    rec.writes = static_cast<uint16_t>(w.count);
    if (f.has("scale")) {
      const double scale = fraction(f, "scale");
      if (!std::isfinite(scale) || scale == 0)
        f.fail("field 'scale' of op must be a finite number other than 0");
      r_.scales.emplace_back(static_cast<int32_t>(r_.records.size()), scale);
    }
    return true;
  }

  bool record_stream(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "record_stream");
    rec.kind = CapturedKind::record_stream;
    rec.a = buffer_ref(f, f.integer("buf", 0, INT32_MAX), "record_stream");
    rec.stream = stream_ref(f);
    rec.source = site_ref(f);
    return true;
  }

  bool event(std::string_view k, CapturedRecord& rec) {
    Fields f(j_, line_, k);
    rec.kind = k == "event_record" ? CapturedKind::event_record : CapturedKind::event_wait;
    rec.a = event_ref(f);
    rec.stream = stream_ref(f);
    rec.source = site_ref(f);
    return true;
  }

  bool event_sync(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "event_sync");
    rec.kind = CapturedKind::event_sync;
    rec.a = event_ref(f);
    rec.source = site_ref(f);
    return true;
  }

  bool stream_sync(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "stream_sync");
    rec.kind = CapturedKind::stream_sync;
    rec.stream = stream_ref(f);
    rec.source = site_ref(f);
    return true;
  }

  bool device_sync(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "device_sync");
    rec.kind = CapturedKind::device_sync;
    rec.source = site_ref(f);
    return true;
  }

  // A switch of the issuing host thread: kept only where it changes the thread.
  bool thread(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "thread");
    const int64_t t = f.integer("id", 0, CaptureLimits::kMaxThreads - 1);
    const int32_t named = f.has("name") ? name(f) : intern(strings_, p_.strings, "");
    if (t == thread_) return false;
    thread_ = static_cast<int32_t>(t);
    rec.kind = CapturedKind::host_thread;
    rec.a = thread_;
    rec.name = named;
    return true;
  }

  bool host_signal(std::string_view k, CapturedRecord& rec) {
    Fields f(j_, line_, k);
    const bool signal = k == "host_signal";
    rec.kind = signal ? CapturedKind::host_signal : CapturedKind::host_wait;
    rec.a = static_cast<int32_t>(f.integer(signal ? "id" : "signal", 0, CaptureLimits::kMaxIds - 1));
    rec.source = site_ref(f);
    return true;
  }

  bool p2p(std::string_view k, CapturedRecord& rec) {
    Fields f(j_, line_, k);
    rec.kind = k == "send" ? CapturedKind::send : CapturedKind::recv;
    rec.b = group_ref(f);
    const CapturedGroup& g = p_.groups[static_cast<size_t>(r_.groups[static_cast<size_t>(rec.b)])];
    const int64_t peer = f.integer("peer", 0, p_.world_size - 1);
    if (peer == rank_) f.fail(std::string(k) + " with peer " + std::to_string(peer) + ", this rank itself");
    if (!std::binary_search(g.ranks.begin(), g.ranks.end(), static_cast<int>(peer)))
      f.fail("peer " + std::to_string(peer) + " is not a member of group '" + g.name + "'");
    rec.a = static_cast<int32_t>(peer);
    rec.stream = stream_ref(f);
    rec.dtype = dtype(f);
    rec.n = f.integer("count", 0, CaptureLimits::kMaxLiveBytes);
    rec.name = name(f);
    // NCCL matches transfers in issue order per communicator; the tag matches nothing there.
    if (const Value* tag = j_.find("tag"); !tag || (tag->type != Type::integer && tag->type != Type::string))
      f.fail(std::string(k) + " record without its field 'tag' (an integer)");
    rec.source = site_ref(f);
    count_ranges(f, 1);
    rec.first = static_cast<uint32_t>(r_.ranges.size());
    const CapturedRange buf = range(f, f.need("buf", Type::array), "buf");
    if (buf.bytes < rec.n * dtype_bytes(rec.dtype)) {
      f.fail(std::string(k) + " of " + std::to_string(rec.n) +
             " elements, more than its buffer range holds (" + std::to_string(buf.bytes) + " bytes)");
    }
    r_.ranges.push_back(buf);
    rec.reads = 1;
    return true;
  }

  static CollectiveKind collective_kind(const Fields& f, std::string_view op) {
    static constexpr std::pair<std::string_view, CollectiveKind> kOps[] = {
        {"all_reduce", CollectiveKind::all_reduce}, {"reduce_scatter", CollectiveKind::reduce_scatter},
        {"all_gather", CollectiveKind::all_gather}, {"broadcast", CollectiveKind::broadcast},
        {"reduce", CollectiveKind::reduce},         {"all_to_all", CollectiveKind::all_to_all},
        {"barrier", CollectiveKind::barrier}};
    for (const auto& [n, c] : kOps) {
      if (n == op) return c;
    }
    f.fail("unknown collective '" + std::string(op) +
           "' (expected all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all or barrier)");
  }

  bool collective(std::string_view, CapturedRecord& rec) {
    Fields f(j_, line_, "coll");
    colls_.push_back(static_cast<int32_t>(r_.records.size()));
    rec.kind = CapturedKind::coll;
    const std::string_view op = f.str("op");
    rec.coll = collective_kind(f, op);
    rec.a = group_ref(f);
    const CapturedGroup& g = p_.groups[static_cast<size_t>(r_.groups[static_cast<size_t>(rec.a)])];
    const auto members = static_cast<int64_t>(g.ranks.size());
    rec.stream = stream_ref(f);
    rec.name = name(f);
    rec.source = site_ref(f);
    r_.coll_origins.push_back(origin(f, rec));
    if (rec.coll == CollectiveKind::barrier) return true;
    rec.dtype = dtype(f);
    rec.n = f.integer("count", 0, CaptureLimits::kMaxLiveBytes);
    rec.reduce = reduce_op(f, op, rec.coll);
    const bool rooted = rec.coll == CollectiveKind::broadcast || rec.coll == CollectiveKind::reduce;
    rec.b = static_cast<int32_t>(f.integer("root", 0, rooted ? members - 1 : 0));
    if (rec.coll == CollectiveKind::all_to_all && rec.n % members != 0) {
      f.fail("all_to_all of " + std::to_string(rec.n) + " elements on " + std::to_string(members) +
             " ranks: the count must be a multiple of the group size");
    }
    collective_ranges(f, op, rec, members);
    return true;
  }

  ReduceOp reduce_op(const Fields& f, std::string_view op, CollectiveKind kind) const {
    const std::string_view reduce = f.str("reduce");
    static constexpr std::pair<std::string_view, ReduceOp> kReduce[] = {{"sum", ReduceOp::sum},
                                                                        {"avg", ReduceOp::avg},
                                                                        {"product", ReduceOp::product},
                                                                        {"min", ReduceOp::min},
                                                                        {"max", ReduceOp::max}};
    for (const auto& [n, r] : kReduce) {
      if (n == reduce) return r;
    }
    if (reduce != "none")
      f.fail("unknown reduce '" + std::string(reduce) + "' (expected sum, avg, product, min, max or none)");
    if (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter ||
        kind == CollectiveKind::reduce)
      f.fail(std::string(op) + " needs a reduce op, not 'none'");
    return ReduceOp::sum;
  }

  // `in` and `out`: a range each, or (format version 2) a list of ranges, one per member in
  // group-rank order, for the side a list form passes as a list: all_gather's `out`,
  // reduce_scatter's `in`. Each keeps exactly the bytes the collective touches.
  void collective_ranges(const Fields& f, std::string_view op, CapturedRecord& rec, int64_t members) {
    const int64_t in_numel = rec.coll == CollectiveKind::reduce_scatter ? rec.n * members : rec.n;
    const int64_t out_numel = rec.coll == CollectiveKind::all_gather ? rec.n * members : rec.n;
    rec.first = static_cast<uint32_t>(r_.ranges.size());
    for (const auto& [key, numel] : {std::pair{"in", in_numel}, std::pair{"out", out_numel}}) {
      const Value& v = f.need(key, Type::array);
      const bool list = v.count > 0 && j_.element(v, 0).type == Type::array;
      const bool may =
          version_ >= 2 && ((rec.coll == CollectiveKind::all_gather && key == std::string_view("out")) ||
                            (rec.coll == CollectiveKind::reduce_scatter && key == std::string_view("in")));
      if (list && !may) {
        f.fail(std::string("'") + key + "' of " + std::string(op) +
               " must be one range [buf, offset, bytes]" +
               (version_ < 2 ? " (a list of ranges needs format version 2)" : ""));
      }
      if (list && v.count != members) {
        f.fail(std::string("'") + key + "' lists " + std::to_string(v.count) +
               (v.count == 1 ? " range" : " ranges") + ", but its group has " + std::to_string(members) +
               " members (one range each)");
      }
      const uint32_t parts = list ? v.count : 1;
      count_ranges(f, parts);
      for (uint32_t i = 0; i < parts; ++i)
        r_.ranges.push_back(
            collective_range(f, list ? j_.element(v, i) : v, key, op, rec, numel / parts, list));
      (key == std::string_view("in") ? rec.reads : rec.writes) = static_cast<uint16_t>(parts);
    }
  }

  CapturedRange collective_range(const Fields& f, const Value& v, const char* key, std::string_view op,
                                 const CapturedRecord& rec, int64_t numel, bool part) const {
    const int64_t es = dtype_bytes(rec.dtype);
    const CapturedRange x = range(f, v, key);
    if (x.offset % es != 0) {
      f.fail(std::string("'") + key + "' starts at byte " + std::to_string(x.offset) +
             ", not a multiple of " + std::to_string(es) + " (the size of " +
             std::string(to_string(rec.dtype)) + ")");
    }
    if (x.bytes < numel * es) {
      f.fail(std::string(op) + " of count " + std::to_string(rec.n) + " needs " + std::to_string(numel * es) +
             " bytes of " + (part ? "each range of '" : "'") + key + "', whose range holds " +
             std::to_string(x.bytes));
    }
    return {x.offset, numel * es, x.buf};
  }

  // Where the tensor a collective reads was made (format version 2: `from` [site, n, of], the
  // n-th of the `of` buffers the rank had allocated at that site's line by then, or `param`, a
  // parameter's name). Version 1 put it in
  // the name (" of the tensor from FILE:LINE"): taken from there, and the name is the rest.
  CapturedOrigin origin(const Fields& f, CapturedRecord& rec) {
    CapturedOrigin o;
    if (version_ < 2) {
      static constexpr std::string_view kFrom = " of the tensor from ";
      const std::string_view n = p_.strings[static_cast<size_t>(rec.name)];
      if (const size_t at = n.find(kFrom); at != std::string_view::npos) {
        o.where = intern(strings_, p_.strings, n.substr(at + kFrom.size()));
        rec.name = intern(strings_, p_.strings, std::string(n.substr(0, at)));
      }
      return o;
    }
    if (f.has("param")) {
      o.where = name(f, "param");
      o.parameter = true;
      return o;
    }
    if (!f.has("from")) return o;
    const Value& v = f.need("from", Type::array);
    int64_t x[3] = {-1, -1, -1};
    for (uint32_t i = 0; i < 3 && v.count == 3; ++i) {
      if (j_.element(v, i).type == Type::integer) x[i] = j_.element(v, i).i;
    }
    if (x[0] < 0 || x[1] < 0 || x[2] <= x[1]) {
      f.fail(
          "field 'from' of coll must be [site, n, of]: the n-th (from 0) of the `of` buffers the rank "
          "had allocated at that site's line by then");
    }
    if (x[0] >= static_cast<int64_t>(sites_.size()))
      f.fail("site " + std::to_string(x[0]) + " is used before its site record defines it");
    o.where =
        intern(strings_, p_.strings, p_.sources[static_cast<size_t>(sites_[static_cast<size_t>(x[0])])]);
    o.nth = x[1];
    o.of = x[2];
    return o;
  }

  // A digest (docs/capture-format.md, "Values"): kept beside the records, never issued.
  bool value(std::string_view, CapturedRecord&) {
    Fields f(j_, line_, "value");
    CapturedValue v;
    v.position = static_cast<int32_t>(r_.records.size());
    const std::string_view of = f.str("of");
    v.source = site_ref(f);
    if (of == "coll_in" || of == "coll_out") {
      v.of = of == "coll_in" ? CapturedValue::Of::coll_in : CapturedValue::Of::coll_out;
      const int64_t c = f.integer("coll", 0, INT32_MAX);
      if (c >= static_cast<int64_t>(colls_.size()))
        f.fail("a value of collective " + std::to_string(c) + ", which no coll record before it defines");
      v.record = colls_[static_cast<size_t>(c)];
    } else if (of == "param" || of == "grad") {
      v.of = of == "param" ? CapturedValue::Of::param : CapturedValue::Of::grad;
      v.tensor = name(f, "tensor");
      v.step = static_cast<int32_t>(f.integer("step", 0, INT32_MAX));
      const std::string_view when = f.str("when");
      if (when != "before" && when != "after") f.fail("field 'when' of value must be before or after");
      v.after = when == "after";
    } else if (of == "loss") {
      v.of = CapturedValue::Of::loss;
    } else {
      f.fail("unknown value of '" + std::string(of) + "' (expected coll_in, coll_out, param, grad or loss)");
    }
    const std::string_view h = f.str("h");
    if (h.size() != 16 ||
        std::from_chars(h.data(), h.data() + h.size(), v.hash, 16).ptr != h.data() + h.size())
      f.fail("field 'h' of value must be 16 hexadecimal digits");
    v.elements = f.integer("n", 0, INT64_MAX);
    v.sum = fraction(f, "s");
    v.abs_sum = fraction(f, "a");
    v.uniform = f.need("u", Type::boolean).b;
    if (f.has("r")) v.range = value_range(f);
    if (f.has("taken")) {  // written later than taken (CUDA): it stands where it was taken
      const int64_t taken = f.integer("taken", 0, records_ - 1);  // up to this record's number
      v.position = static_cast<int32_t>(issued_before(taken));
    }
    r_.values.push_back(v);
    return false;
  }
  // The bytes a value's tensor occupied when it was taken: a buffer defined before, whatever
  // became of it since (the record may be written after its free).
  CapturedRange value_range(const Fields& f) const {
    const Value& v = f.need("r", Type::array);
    int64_t x[3] = {-1, -1, -1};
    for (uint32_t i = 0; i < 3 && v.count == 3; ++i) {
      const Value& e = f.json().element(v, i);
      if (e.type == Type::integer) x[i] = e.i;
    }
    if (x[0] < 0 || x[0] >= static_cast<int64_t>(sizes_.size()) || x[1] < 0 || x[2] < 0 ||
        x[2] > sizes_[static_cast<size_t>(x[0])] - x[1])
      f.fail("field 'r' of value must be [buf, offset, bytes] inside a buffer defined before it");
    return {x[1], x[2], static_cast<int32_t>(x[0])};
  }
  // A number (null where the program's value was not finite: NaN).
  static double fraction(const Fields& f, std::string_view key) {
    const Value* v = f.json().find(key);
    if (v && v->type == Type::null) return std::numeric_limits<double>::quiet_NaN();
    if (v && v->type == Type::integer) return static_cast<double>(v->i);
    return f.need(key, Type::number).x;
  }

  CapturedProgram& p_;
  CapturedRank& r_;
  int rank_;
  Interned& strings_;
  Interned& sources_;
  std::map<std::string, std::pair<int32_t, std::string>>& group_where_;
  JsonLine j_;
  int64_t line_ = 1;
  int64_t records_ = 0;
  std::vector<int32_t> colls_;  // the file's coll records, in order: their index in r_.records
  // The file's records (numbered from 0) that are not issued: definitions, values, buffers from
  // before the capture. Record n follows n - (those before n) issued ones.
  std::vector<int64_t> dropped_;
  int64_t issued_before(int64_t n) const {
    return n - (std::lower_bound(dropped_.begin(), dropped_.end(), n) - dropped_.begin());
  }
  std::vector<int32_t> sites_;                        // site id -> index in p_.sources
  std::unordered_map<int64_t, int32_t> event_index_;  // event id -> its dense number
  std::vector<int64_t> sizes_;                        // buffer id -> bytes
  std::vector<uint8_t> live_;
  int64_t live_bytes_ = 0;
  int32_t thread_ = 0;  // the host thread issuing the records read so far
  int version_ = 1;     // the file's format version
  int64_t* ranges_total_ = nullptr;
};

Header read_header(Lines& lines, const std::string& file, int file_rank) {
  std::string_view line;
  if (!lines.next(line)) throw Refusal{1, "an empty file (expected the header line)"};
  if (line.size() > CaptureLimits::kMaxLineBytes) throw Refusal{1, "a header line past the line limit"};
  JsonLine j;
  if (std::string e = j.parse(line); !e.empty()) throw Refusal{1, e};
  Fields f(j, 1, "the header");
  if (!f.has("shardcheck_capture")) f.fail("not a capture header: no 'shardcheck_capture' version");
  const int64_t version = f.need("shardcheck_capture", Type::integer).i;
  if (version != 1 && version != 2) {
    f.fail("capture format version " + std::to_string(version) +
           " is not one this shardcheck reads (it reads versions 1 and 2)");
  }
  Header h;
  h.version = static_cast<int>(version);
  h.world_size = static_cast<int>(f.integer("world_size", 1, CaptureLimits::kMaxRanks));
  h.rank = static_cast<int>(f.integer("rank", 0, CaptureLimits::kMaxRanks - 1));
  if (h.rank != file_rank) {
    f.fail("the header says rank " + std::to_string(h.rank) + " but the file is named for rank " +
           std::to_string(file_rank));
  }
  if (f.has("allocator")) {  // torch.cuda.get_allocator_backend()
    const std::string_view a = f.str("allocator");
    h.allocator_name = a;
    if (a == "cudaMallocAsync") {
      h.allocator = Allocator::stream_ordered;
    } else if (a != "native") {
      f.fail("allocator '" + std::string(a) + "' is not one the checker models (native, cudaMallocAsync)");
    }
  }
  if (const Value* d = j.find("device"); d && d->type == Type::string) h.cpu = f.str("device") == "cpu";
  (void)file;
  return h;
}

// Every rank's header, before any body is read, so that the folder's shape is refused first:
// sets the world size and returns the first file's path.
Expected<std::string> read_headers(const std::string& dir, const std::map<int, std::string>& files,
                                   CapturedProgram& p) {
  std::string first_file, first_allocator;
  for (const auto& [r, path] : files) {
    Lines lines(path);
    if (!lines.ok()) return Error(path + ": " + lines.error());
    try {
      const Header h = read_header(lines, path, r);
      if (first_file.empty()) {
        p.world_size = h.world_size;
        p.allocator = h.allocator;
        p.frees_seen = !h.cpu && h.allocator == Allocator::caching;
        first_allocator = h.allocator_name;
        first_file = path;
      } else if (h.world_size != p.world_size) {
        throw Refusal{1, "world_size is " + std::to_string(h.world_size) + " here but " +
                             std::to_string(p.world_size) + " in " + first_file};
      } else if (h.allocator != p.allocator) {
        throw Refusal{
            1, "allocator is '" + h.allocator_name + "' here but '" + first_allocator + "' in " + first_file};
      }
      if (r >= p.world_size) {
        throw Refusal{1,
                      "rank " + std::to_string(r) + " is outside world_size " + std::to_string(p.world_size)};
      }
    } catch (const Refusal& e) {
      return Error(path + ":" + std::to_string(e.line) + ": " + e.what);
    }
  }
  for (int r = 0; r < p.world_size; ++r) {
    if (!files.count(r)) {
      return Error(first_file + ":1: world_size is " + std::to_string(p.world_size) + " but " + dir +
                   " has no rank-" + std::to_string(r) + ".jsonl");
    }
  }
  return first_file;
}

// Where a collective's tensor was made tells apart ranks that exchange different tensors at one
// position of a group (a collective_swap). That holds only for the lines whose tensors every
// member of the group carries at some position, under the same name: ranks that run different
// code (pipeline stages) make their tensors at different lines. An origin whose line some member
// never carries under that name is dropped (not compared).
void generalize_one_sided_origins(CapturedProgram& p) {
  using Key = std::pair<int32_t, int32_t>;               // name, where
  std::map<int32_t, std::map<int, std::set<Key>>> used;  // group -> rank -> what it carries
  const auto each_coll = [&p](auto&& fn) {
    for (size_t r = 0; r < p.ranks.size(); ++r) {
      CapturedRank& rank = p.ranks[r];
      size_t k = 0;
      for (const CapturedRecord& rec : rank.records) {
        if (rec.kind == CapturedKind::coll)
          fn(static_cast<int>(r), rank.groups[static_cast<size_t>(rec.a)], rec, rank.coll_origins[k++]);
      }
    }
  };
  each_coll([&](int r, int32_t group, const CapturedRecord& rec, const CapturedOrigin& o) {
    std::set<Key>& mine = used[group][r];  // every member that issues on the group counts
    if (o.where != 0) mine.insert({rec.name, o.where});
  });
  const auto shared = [&used](int32_t group, const Key& key) {
    for (const auto& [other, keys] : used[group]) {
      if (!keys.count(key)) return false;
    }
    return true;
  };
  each_coll([&](int, int32_t group, const CapturedRecord& rec, CapturedOrigin& o) {
    if (o.where != 0 && !shared(group, {rec.name, o.where})) o = CapturedOrigin{};
  });
}

}  // namespace

int64_t CapturedProgram::file_records() const {
  int64_t n = 0;
  for (const auto& r : ranks) n += r.file_records;
  return n;
}

int64_t CapturedProgram::records() const {
  int64_t n = 0;
  for (const auto& r : ranks) n += static_cast<int64_t>(r.records.size());
  return n;
}

namespace {

// The file and line a Python syntax error names at the end of its message, "invalid syntax
// (train.py, line 3)", as "train.py:3"; "" when the message is not one.
std::string syntax_error_place(const std::string& why) {
  static constexpr std::string_view kKinds[] = {"raised SyntaxError", "raised IndentationError",
                                                "raised TabError"};
  const bool syntax = std::any_of(std::begin(kKinds), std::end(kKinds),
                                  [&](std::string_view k) { return why.rfind(k, 0) == 0; });
  const size_t open = why.rfind(" (");
  const size_t comma = why.rfind(", line ");
  if (!syntax || why.empty() || why.back() != ')' || open == std::string::npos ||
      comma == std::string::npos || comma < open)
    return "";
  const std::string line = why.substr(comma + 7, why.size() - 1 - (comma + 7));
  if (line.empty() || line.find_first_not_of("0123456789") != std::string::npos) return "";
  return why.substr(open + 2, comma - open - 2) + ":" + line;
}

// Where a rank stopped, after its reason. A site with no frame of the program on the stack
// (`<torch>:0`) is no place in it: a syntax error is placed at the line its message names, and
// the program never started; any other stop says that no line of the program was running.
std::string stop_place(const std::string& why, const std::string& site) {
  if (site != "<torch>:0") return " at " + site;
  if (const std::string at = syntax_error_place(why); !at.empty())
    return " at " + at + ": the program did not start";
  return ", outside the program's own code (no line of it was running)";
}

}  // namespace

std::string CapturedProgram::partial() const {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const CapturedRank& k = ranks[r];
    if (k.partial.empty()) continue;
    out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + k.partial;
    if (k.partial_source >= 0 && static_cast<size_t>(k.partial_source) < sources.size())
      out += stop_place(k.partial, sources[static_cast<size_t>(k.partial_source)]);
  }
  // Every rank finished and none recorded anything: nothing was checked, which is no verdict of
  // clean (the work ran on a device the capture did not follow, or in processes it did not start).
  if (out.empty() && records() == 0)
    out =
        "nothing was recorded: no operator, allocation or collective on any rank (work on a device "
        "the capture did not follow, or in processes it did not start)";
  return out;
}

bool is_capture_dir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (rank_of_file(e.path().filename().string()) >= 0) return true;
  }
  return false;
}

Expected<CapturedProgram> load_captured_program(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error(dir + ": not a folder");
  std::map<int, std::string> files;  // rank -> path
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const int r = rank_of_file(name);
    if (r < 0) continue;
    const std::string path = dir + "/" + name;
    if (auto [it, fresh] = files.emplace(r, path); !fresh) {
      const auto& [a, b] = std::minmax(it->second, path);
      return Error(b + ":1: rank " + std::to_string(r) + " has two files: " + a + " and " + b);
    }
  }
  if (ec) return Error(dir + ": " + ec.message());
  if (files.empty()) return Error(dir + ": no rank-<R>.jsonl files (docs/capture-format.md)");
  CapturedProgram p;
  p.dir = dir;
  p.strings.emplace_back();
  // Every header first: the folder's shape is refused before any body is read.
  Expected<std::string> first = read_headers(dir, files, p);
  if (!first) return first.error();
  Interned strings, sources;
  strings.emplace("", 0);
  std::map<std::string, std::pair<int32_t, std::string>> group_where;
  int64_t total = 0, ranges = 0;
  p.ranks.resize(static_cast<size_t>(p.world_size));
  for (const auto& [r, path] : files) {
    CapturedRank& rank = p.ranks[static_cast<size_t>(r)];
    rank.file = path;
    Lines lines(path);
    if (!lines.ok()) return Error(path + ": " + lines.error());
    RankLoader loader(p, rank, r, strings, sources, group_where);
    try {
      loader.load(lines, &total, &ranges);
    } catch (const Refusal& e) {
      return Error(path + ":" + std::to_string(e.line) + ": " + e.what);
    }
    // Room reserved past the end is never touched; only a large excess is given back (a copy).
    const auto fit = [](auto& v) {
      if (v.capacity() > v.size() + v.size() / 8) v.shrink_to_fit();
    };
    fit(rank.records);
    fit(rank.ranges);
  }
  generalize_one_sided_origins(p);
  return p;
}

}  // namespace shardcheck::core
