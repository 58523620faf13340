// What the bytes of a captured program carry, from how they were made (docs/findings.md, "The
// rules of the value checks"). The walk issues every rank's records in file order, in lockstep
// across ranks: a collective or a transfer completes once every party has reached it, so what it
// writes on each rank is made from what every party passed in. For every byte range it keeps a
// ValueFact:
//  - terms: the ranks whose loss terms (data) the bytes carry. A rank's data carries its own
//    rank; parameters carry none; an operator's output carries what its inputs do; a collective's
//    output what the inputs that reach it do (an all_to_all's chunk the rank's that sent it).
//  - same: the ranks known to hold this very value, by how it was made: the members of an
//    all_reduce, all_gather or broadcast that wrote it, carried through operators of replicated
//    inputs; a constant fill on every rank.
//  - weight: the factor each contribution was multiplied by since the operator that computed it
//    (a gradient as autograd made it has weight 1): scalings of an existing buffer by a number
//    (the `scale` of an op record), an average's 1/N, a sum's contributions each kept.
//  - the sum or average over a group whose output the bytes are, carried through copies,
//    scalings and elementwise operators of one size whose every input came from it.
//   ValueFlow flow(program);
//   flow.walk([&](int rank, size_t i, const RankFlow& at) { ... at.read(range) ... });
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/base/function_ref.hpp"
#include "core/scenario/captured_program.hpp"

namespace shardcheck::core {

using RankMask = uint64_t;  // a set of ranks: CaptureLimits::kMaxRanks is 64
inline constexpr RankMask rank_bit(int r) { return RankMask{1} << r; }
std::vector<int> ranks_of(RankMask m);

// The weights the contributions of a range were multiplied by: every one of them lies in
// [lo, hi]; NaN where some weight is not known.
struct Weight {
  double lo = 1, hi = 1;
  bool known() const { return !std::isnan(lo) && !std::isnan(hi); }
  bool single() const { return known() && lo == hi; }
  static Weight unknown() {
    const double n = std::numeric_limits<double>::quiet_NaN();
    return {n, n};
  }
};

struct ValueFact {
  RankMask terms = 0;
  RankMask same = 0;
  Weight weight;
  int32_t reduction = -1;  // record (on this rank) of the sum or average whose output these bytes are
  int32_t via = -1;        // the last operator that carried them from it (-1: its own output)
  int32_t step = -1;       // the optimizer steps the rank had begun when the reduction ran
  // The factor applied since the reduction's output (NaN: not known), and the weight there.
  double post = 1;
  double at_reduction = std::numeric_limits<double>::quiet_NaN();
  int32_t scaled_at = -1;  // record (on this rank) of the last scaling that changed the weight
  // The last sum or average over a group that anything these bytes were computed from came out
  // of (through any operator), for findings to name.
  int32_t origin = -1;
  // A sum over ranks that added up copies of one value, each of them carrying the same ranks'
  // losses (a value reduced twice): its record on this rank, how many copies it added, and the
  // reduction the copies came out of (`origin` there).
  int32_t doubled_at = -1;
  int32_t doubled_from = -1;
  int copies = 0;
};

// One rank's facts, by buffer and byte range.
class RankFlow {
 public:
  RankFlow(const CapturedProgram& p, int rank);
  // What is known of the bytes of `r` (merged over the pieces it covers).
  ValueFact read(const CapturedRange& r) const;
  // The pieces of `r`, with offsets from its start.
  struct Piece {
    int64_t lo = 0, hi = 0;
    ValueFact fact;
  };
  std::vector<Piece> pieces(const CapturedRange& r) const;
  void write(const CapturedRange& r, const ValueFact& f);
  void write_pieces(const CapturedRange& r, const std::vector<Piece>& pieces);
  // A collective's input (its `reads` ranges, a list form's one per member, one after the other)
  // and output; their bytes.
  std::vector<Piece> coll_input(const CapturedRecord& rec) const;
  void coll_output(const CapturedRecord& rec, const std::vector<Piece>& pieces);
  int64_t coll_bytes(const CapturedRecord& rec, bool input) const;
  ValueFact read_input(const CapturedRecord& rec) const;
  // The optimizer steps begun before record i (from the parameters' value records).
  int32_t steps_before(size_t i) const;
  bool is_parameter(int32_t buf) const { return params_.count(buf) != 0; }
  int rank() const { return rank_; }
  // What an operator reads: its size in bytes and what is known of it.
  struct Operand {
    int64_t bytes = 0;
    ValueFact fact;
  };

 private:
  friend class ValueFlow;
  ValueFact fallback(int32_t buf) const;
  void op(const CapturedRecord& rec, size_t index);
  ValueFact made(std::string_view name, size_t index, const CapturedRange& out,
                 const std::vector<Operand>& in, double scale) const;

  struct Span {
    int64_t lo = 0, hi = 0;
    ValueFact fact;
  };
  const CapturedProgram& p_;
  const CapturedRank& r_;
  int rank_;
  std::unordered_map<int32_t, std::vector<Span>> spans_;  // by buffer, sorted, disjoint
  std::set<int32_t> params_, pre_, fresh_;                // fresh: allocated since the last op
  std::vector<int32_t> steps_;                            // positions where optimizer steps began
};

class ValueFlow {
 public:
  explicit ValueFlow(const CapturedProgram& p);
  ~ValueFlow();
  // Calls at(rank, i, flow) before record i of each rank is issued (i == records.size(): after
  // the last), ranks advancing in lockstep. Collectives that can never complete (ranks that
  // disagree, a partial capture) are completed with the parties that reached them.
  void walk(FunctionRef<void(int, size_t, const RankFlow&)> at);

 private:
  struct Pending;
  bool advance(int rank, FunctionRef<void(int, size_t, const RankFlow&)> at);
  bool arrive(int rank, size_t index);
  bool receive(int rank, size_t index);
  void complete(std::pair<int32_t, int64_t> key);
  std::vector<RankFlow::Piece> output(const Pending& pd, size_t m, const CapturedRecord& rec,
                                      int64_t bytes) const;
  int copies_summed(const Pending& pd) const;
  bool force_one();

  const CapturedProgram& p_;
  std::vector<std::unique_ptr<RankFlow>> flows_;
  std::vector<size_t> next_;
  std::vector<std::map<int32_t, int64_t>> issued_;  // rank -> group -> collectives reached
  std::map<std::pair<int32_t, int64_t>, std::unique_ptr<Pending>> pending_;
  std::map<std::tuple<int, int, int32_t>, std::vector<std::vector<RankFlow::Piece>>> sent_;
  std::map<std::tuple<int, int, int32_t>, size_t> received_;
  std::set<std::pair<int, size_t>> waiting_;  // (rank, record) reached and not yet completed
  // Per rank: record -> the digest of a collective's input (hash; 0 where it was one repeated value).
  std::vector<std::map<int32_t, uint64_t>> input_digests_;
};

}  // namespace shardcheck::core
