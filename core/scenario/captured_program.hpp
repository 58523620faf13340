// Captured programs (docs/capture-format.md): a folder of rank-<R>.jsonl files that record a
// real PyTorch program's device work per rank. The loader streams every file once, checks
// everything the format says a reader must refuse, and keeps each rank's records compact
// (fixed-size records, interned names and sites, ranges side by side); the interpreter issues
// them on any Runtime, naming every operation's Python line through Runtime::set_source.
//   Expected<CapturedProgram> p = load_captured_program("capture/");
//   if (!p) { std::cerr << p.error().message(); return 2; }   // "capture/rank-1.jsonl:812: ..."
//   world.run([&](Runtime& rt) { return run_captured_program(rt, *p); });
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.hpp"
#include "core/base/task.hpp"
#include "core/check/findings.hpp"
#include "core/runtime/allocator.hpp"
#include "core/runtime/runtime.hpp"

namespace shardcheck::core {

// Bounds on what a captured program may hold, checked while loading (docs/limits.md).
// Simulated memory of a captured program is address space only (a shadow-only run), so its
// bound is far above the trace scenarios' 4 GiB.
struct CaptureLimits {
  static constexpr int kMaxRanks = 64;
  static constexpr int64_t kMaxRecordsPerRank = 4'000'000;
  static constexpr int64_t kMaxRecords = 16'000'000;  // summed over the ranks
  static constexpr int kMaxStreams = 64;              // per rank: sim::Options::kMaxStreamsPerRank
  static constexpr int kMaxGroups = 1024;
  static constexpr int64_t kMaxLiveBytes = int64_t{192} << 30;    // allocated at once, per rank
  static constexpr int64_t kMaxDeviceBytes = int64_t{256} << 30;  // simulated address space per rank
  static constexpr int kMaxRangesPerOp = 4096;                    // reads plus writes of one record
  static constexpr int64_t kMaxRanges = 64'000'000;               // ranges summed over the ranks
  static constexpr int64_t kMaxIds = 16'000'000;                  // events, buffers and sites per rank
  static constexpr size_t kMaxLineBytes = size_t{1} << 20;
  static constexpr int64_t kMaxAddress = (int64_t{1} << 56) - 1;  // an alloc's `addr`
  static constexpr int kMaxThreads = 1024;                        // host threads per rank
};

enum class CapturedKind : uint8_t {
  alloc,
  free,
  op,
  record_stream,
  event_record,
  event_wait,
  event_sync,
  stream_sync,
  device_sync,
  coll,
  send,
  recv,
  host_thread,  // the records after it, up to the next one, are issued by host thread `a`
  host_signal,
  host_wait,
};

// A byte range of a buffer lifetime.
struct CapturedRange {
  int64_t offset = 0;
  int64_t bytes = 0;
  int32_t buf = 0;
};

// One record, fixed-size. Fields by kind:
//   alloc: buf, stream, n = bytes, first = its device address's index in CapturedRank::addresses
//          (kNoAddress: none recorded) (pre allocations are in CapturedRank::pre, not here)
//   free, record_stream: buf (record_stream: stream)
//   op: name, stream, ranges [first, first + reads) read, then `writes` written
//   event_record, event_wait: event, stream; event_sync: event; stream_sync: stream
//   coll: a = group, b = root, stream, dtype, coll, reduce, name, n = count, ranges: `reads` of in
//         then `writes` of out (one each, or one per member for a list form's list), each exactly
//         the bytes the collective touches (none for a barrier); where its tensor was made:
//         CapturedRank::coll_origins
//   send, recv: a = peer, b = group, stream, dtype, name, n = count, ranges: the buffer
//   host_thread: a = thread (0: the program's main thread), name (its name, "" if none);
//   host_signal, host_wait: a = signal
struct CapturedRecord {
  CapturedKind kind = CapturedKind::op;
  DType dtype = DType::u8;
  CollectiveKind coll = CollectiveKind::all_reduce;
  ReduceOp reduce = ReduceOp::sum;
  int32_t stream = 0;
  int32_t source = -1;  // index into CapturedProgram::sources, -1: none
  int32_t a = 0;        // buf, event, group (coll), peer (send, recv)
  int32_t b = 0;        // root (coll), group (send, recv)
  int32_t name = 0;     // index into CapturedProgram::strings
  uint32_t first = 0;   // first range
  uint16_t reads = 0;
  uint16_t writes = 0;
  int64_t n = 0;
};

// A digest of what a tensor held at a point of the program (a `value` record): the input of a
// collective as it was about to be read, its output once written, or a parameter or its
// gradient at an optimizer step, or a loss a backward started from.
// Not issued by the interpreter: the value checks (captured_values.hpp) compare them across ranks.
struct CapturedValue {
  enum class Of : uint8_t { coll_in, coll_out, param, grad, loss };
  Of of = Of::coll_in;
  bool after = false;             // param: after the optimizer step (else before it)
  bool uniform = false;           // every 32-bit word (or byte) of it the same, such as zeros
  int32_t record = -1;            // coll_in, coll_out: its collective, an index into CapturedRank::records
  int32_t position = 0;           // the records before it in its file (where it was written)
  int32_t tensor = 0;             // param, grad: its name, an index into CapturedProgram::strings
  int32_t step = 0;               // param, grad: the optimizer's step, from 0
  int32_t source = -1;            // index into CapturedProgram::sources
  CapturedRange range{0, 0, -1};  // grad: the bytes it occupied (buf -1: not said)
  uint64_t hash = 0;              // of its bytes
  int64_t elements = 0;
  double sum = 0;      // of its elements, NaN when not finite
  double abs_sum = 0;  // of their absolute values, NaN when not finite
};

// Where the tensor a coll record reads was made (docs/capture-format.md: `from`, `param`):
// `where` (an index into CapturedProgram::strings, 0: not known) is "file:line" of its allocation,
// the n-th (`nth`, -1: not said) of the `of` tensors the rank had made there by the collective,
// or the name of a parameter.
struct CapturedOrigin {
  int32_t where = 0;
  int64_t nth = -1;
  int64_t of = -1;
  bool parameter = false;
};

struct CapturedRank {
  std::string file;                     // DIR/rank-R.jsonl
  std::vector<std::string> streams;     // names by id, unique within the rank; 0 is the default
  std::vector<int32_t> groups;          // group id in this file -> CapturedProgram::groups index
  std::vector<CapturedRecord> records;  // what the interpreter issues: allocations, operations, ...
  std::vector<CapturedRange> ranges;
  // Device addresses of the alloc records that carry one (`addr`), in file order.
  static constexpr uint32_t kNoAddress = UINT32_MAX;
  std::vector<uint64_t> addresses;
  std::vector<CapturedValue> values;         // in file order
  std::vector<CapturedOrigin> coll_origins;  // one per coll record, in file order
  // The op records with a `scale` (the number an operator multiplies its tensor by), as (record
  // index, scale), by record index. Not issued: the value checks follow gradients' weights with it.
  std::vector<std::pair<int32_t, double>> scales;
  int64_t file_records = 0;  // the records of its file (what its end record counts)
  // Buffers that existed before the capture ("pre": true): allocated, written and ordered
  // before the first record.
  struct Pre {
    int32_t buf = 0;
    int32_t stream = 0;
    int32_t source = -1;
    int64_t bytes = 0;
    uint64_t address = 0;  // 0: not recorded
  };
  std::vector<Pre> pre;
  int32_t buffers = 0;             // buffer ids 0 .. buffers-1
  int32_t events = 0;              // events, numbered 0 .. events-1 in the order of their first use
  std::vector<int64_t> event_ids;  // each event's id in the capture, by its number
  int64_t peak_live_bytes = 0;
  // Why the rank did not finish ("" when it did): its end record's `partial` (an exception, a
  // signal, a hang past the timeout), or a file cut before its end record. Where, when known.
  std::string partial;
  int32_t partial_source = -1;  // index into CapturedProgram::sources
};

struct CapturedGroup {
  std::string name;
  std::vector<int> ranks;  // global ranks, ascending
};

struct CapturedProgram {
  std::string dir;
  int world_size = 0;
  // The allocator the ranks ran under (the header's `allocator`): caching for torch's native
  // one, stream_ordered for cudaMallocAsync.
  Allocator allocator = Allocator::caching;
  // The device reported every free where it happened (CUDA's caching allocator; not CPU tensors
  // nor cudaMallocAsync, whose frees the capture finds later): a buffer is one tensor's storage.
  bool frees_seen = true;
  std::vector<CapturedRank> ranks;
  std::vector<CapturedGroup> groups;
  std::vector<std::string> strings;      // operator and collective names, tags; 0 is ""
  std::vector<std::string> sources;      // "train.py:31": a site's file and line
  std::vector<SourceLine> source_lines;  // the same, as data, index for index
  int64_t records() const;               // interpreter records, summed over the ranks
  int64_t file_records() const;          // the files' records, summed over the ranks
  // "rank 1: raised ValueError: ... at train.py:31; rank 2: ..." for the ranks that did not
  // finish; "" when every rank did and recorded something (an empty capture checked nothing).
  std::string partial() const;
};

// True when `path` is a folder holding at least one rank-*.jsonl file.
bool is_capture_dir(const std::string& path);

// Loads and checks a capture folder; errors read `DIR/rank-R.jsonl:LINE: message`.
Expected<CapturedProgram> load_captured_program(const std::string& dir);

// Issues rank rt.rank()'s records on `rt`.
Task<> run_captured_program(Runtime& rt, const CapturedProgram& program);

}  // namespace shardcheck::core
