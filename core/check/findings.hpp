// Findings: what a detector or oracle reports. Kinds have stable names (docs/semantics.md §4) used in
// scenario `expect:` lists and JSON reports. Each finding carries a one-line summary, a
// longer explanation, a key that identifies "the same bug" across ranks, steps and
// schedules (for reporting each once), and structured detail for the report pictures.
//   Finding f{.kind = FindingKind::stream_race, .summary = "rank 0: ...", .key = key};
//   add_finding(list, f);                    // or counts it, when its key is already there
//   to_string(f.kind) == "stream_race"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace shardcheck::core {

enum class FindingKind : uint8_t {
  stream_race,
  collective_mismatch,
  collective_swap,
  deadlock,
  grad_norm_miscount,
  layout_mismatch,
  uninitialized_read,
  numerics_divergence,
  replica_divergence,
  double_reduction,
  missing_reduction,
  divisor_mismatch,
};
inline constexpr int kFindingKinds = 12;

// Who finds a kind: the simulator's detectors on every run (sim/detect_*.cpp), the training
// judge on training runs, the judge against the single-rank reference, or the value checks of a
// captured program (core/scenario/captured_values.hpp; they also report replica_divergence and
// grad_norm_miscount, which the judge finds on training runs: the from_captured_values column).
enum class FoundBy : uint8_t { detector, training, reference, values };

// Everything a consumer needs to know of a kind, in one row per kind (kFindingKindTable): a
// new kind is one row here plus its detector, and tests/run/finding_kinds_test.cpp fails when
// a consumer misses it.
struct FindingKindInfo {
  FindingKind kind;
  std::string_view name;    // as scenario files, reports and SARIF spell it
  std::string_view family;  // the detector family: sim/detect_<family>.cpp, or the judge
  FoundBy found_by;
  bool shows_in_values;  // a difference in values (on hardware, a run whose values differ)
  bool values_may_miss;  // values on hardware may not show it even when it is there
  bool drawn_by_curves;  // loss curves against the reference can show it
  // The value checks of a captured program report it (core/scenario/captured_values.hpp), so
  // a capture's run shows it once, the same in every schedule.
  bool from_captured_values;
  std::string_view meaning;  // one sentence: SARIF's rule text, docs/findings.md's table
};

extern const FindingKindInfo kFindingKindTable[kFindingKinds];
const FindingKindInfo& info(FindingKind k);

std::string_view to_string(FindingKind k);
std::optional<FindingKind> parse_finding_kind(std::string_view s);
// Every kind's name in table order, as a message offers them: "stream_race, ... or divisor_mismatch".
std::string finding_kind_names();

// One access to device memory, as a race report names it.
// A line of the user's program that an operation came from (a captured program's Python
// line); empty for programs that name none. SARIF and the other outputs read it as data.
struct SourceLine {
  std::string file;
  int line = 0;
  bool known() const { return line > 0; }
  friend bool operator==(const SourceLine&, const SourceLine&) = default;
};

struct AccessSite {
  int rank = 0;
  std::string stream;
  std::string op;      // e.g. "reduce_scatter 'grad'" or "kernel 'next_forward'"
  int64_t step = 0;    // scheduler step at which it executed
  uint32_t op_id = 0;  // index in the run's operation table
  std::string buffer;
  int lifetime = 1;      // which lifetime of the memory block (1 = first allocation)
  uint64_t address = 0;  // start of the block
  int64_t byte_begin = 0;
  int64_t byte_end = 0;
  bool write = false;
  SourceLine source;  // where the program issued the operation, when it says
};

struct RaceDetail {
  AccessSite first;      // earlier in the schedule
  AccessSite second;     // the one not ordered after it
  bool reuse = false;    // different lifetimes of one block: allocator reuse
  SourceLine allocated;  // a reuse race: where the second's buffer was allocated
  SourceLine freed;      // and where the first's was freed
  std::string missing_edge;
  std::vector<std::string> fixes;
};

struct CollectiveDetail {
  std::string group;
  int64_t index = 0;  // k-th collective of the group
  struct PerRank {
    int rank = 0;
    std::string stream;
    std::string fingerprint;
    std::string tag;
    SourceLine source;        // where this rank issued it, when the program says
    std::string origin = {};  // where the tensor it carries was made ("" when not known)
  };
  std::vector<PerRank> ranks;
  // The later collectives of the same group in the same run that diverge because this one
  // did (every rank issues what follows it shifted): this finding's consequences, counted
  // and listed here rather than reported as findings of their own.
  struct Later {
    int64_t index = 0;  // its k in the group's sequence
    FindingKind kind = FindingKind::collective_mismatch;
    std::string what;  // what the ranks issued, e.g. "all_gather 'b' on rank 0; all_gather 'a' on rank 1"
  };
  static constexpr size_t kMaxListed = 64;
  int64_t consequences = 0;  // how many; `later` lists the first kMaxListed
  std::vector<Later> later;
};

struct DeadlockDetail {
  struct Node {
    int rank = 0;
    std::string where;  // "host" or the stream name
    std::string op;     // what it is stuck on
    std::string waits_for;
    SourceLine source;  // where the program issued what it is stuck on, when it says
  };
  std::vector<Node> cycle;  // each waits for the next; the last for the first
  bool is_cycle = true;     // false: a chain ending at something that will never come
};

struct NormDetail {
  double expected = 0;
  double reported = 0;
  struct Param {
    std::string name;
    int counted = 0;  // times counted by the implementation (1 is right)
  };
  std::vector<Param> params;
  int step = -1;      // the training step whose norm it is (-1: unknown)
  int rank = 0;       // the rank that reported it
  SourceLine source;  // a captured program's: the line that sums it over the ranks
};

struct ElementDetail {  // numerics, replica and layout findings
  int step = 0;
  std::string tensor;
  int64_t element = 0;
  int rank = 0;
  int other_rank = -1;
  double expected = 0;
  double actual = 0;
  std::string note;
  SourceLine source;  // an uninitialized read: where the program issued the reader
};

using FindingDetail =
    std::variant<std::monostate, RaceDetail, CollectiveDetail, DeadlockDetail, NormDetail, ElementDetail>;

// One finding per code site: where a detector keys a finding by the program's lines (a captured
// program: the two accesses' lines of a race, the reader's of an uninitialized read), every
// instance at those lines (other tensors, streams, iterations of a loop, ranks, read or write) is
// one finding, and its spread says what it covers. Empty for findings keyed otherwise.
struct Spread {
  std::vector<uint64_t> instances;    // sorted, distinct: a hash of each instance's own key
  std::vector<int> ranks;             // sorted, distinct
  std::vector<std::string> streams;   // sorted, distinct
  std::vector<std::string> symptoms;  // other findings of the same root, folded under this one
  bool empty() const { return instances.empty(); }
};

struct Finding {
  FindingKind kind = FindingKind::stream_race;
  std::string summary;      // one line
  std::string explanation;  // several lines: what, why it matters, how to fix
  std::string key;          // same key = same bug
  FindingDetail detail;
  uint64_t seed = 0;  // schedule seed of the first run that found it
  int64_t occurrences = 1;
  // The operation it concerns, as an index in the run's operation table (AccessSite::op_id),
  // where a detector knows one that its detail does not name; -1 otherwise. A timeline
  // places the finding there.
  int64_t op = -1;
  Spread spread;
};

// Adds `f` unless a finding with the same key is present, in which case it counts it (and
// joins their spreads). Linear in the list: for a few findings; lists that grow long (a run's,
// an exploration's) are FindingLists.
void add_finding(std::vector<Finding>& list, Finding f);

// Findings in the order first found, added as add_finding adds them but in constant expected
// time, through an index of each finding's kind and key: n findings merge in O(n), where a
// search of the list made it O(n^2). A finding's kind and key must not change once added.
class FindingList {
 public:
  void add(Finding f);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  Finding& operator[](size_t i) { return items_[i]; }
  const Finding& operator[](size_t i) const { return items_[i]; }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  const std::vector<Finding>& items() const { return items_; }
  std::vector<Finding> take() && { return std::move(items_); }

 private:
  std::vector<Finding> items_;
  std::unordered_map<std::string, size_t> index_;  // kind and key -> position in items_
};
inline void add_finding(FindingList& list, Finding f) { list.add(std::move(f)); }
// Every finding of `more` added to `list`, as add_finding would one by one, in O(|list| + |more|).
void add_findings(std::vector<Finding>& list, std::vector<Finding> more);

// Joins `from` into `into` (the union of each list).
void join_spread(Spread& into, const Spread& from);

// A spread of one instance: `instance_key` names the instance (hashed), the rest where it is.
Spread spread_of(const std::string& instance_key, int rank, std::vector<std::string> streams);

// Folds each uninitialized_read that a stream_race of the list explains (the same reader line and
// tensor, the race's other access a write of it: in the schedules where the read ran first, it
// read bytes not yet written) under that race, as a symptom. Order-independent.
void fold_symptoms(std::vector<Finding>& list);

// The lines that say what a finding of one code site covers ("" when it has no spread), each
// starting with two spaces and ending in a newline.
std::string spread_text(const Finding& f);

}  // namespace shardcheck::core
