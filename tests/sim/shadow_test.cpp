// Shadow memory: happens-before checks per byte range, history across lifetimes, and
// definedness tracking, with interval coalescing keeping the map small.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/base/rng.hpp"
#include "sim/shadow.hpp"

using namespace shardcheck::sim;

namespace {
VectorClock clock_with(size_t n, std::initializer_list<std::pair<size_t, uint32_t>> entries) {
  VectorClock c(n);
  for (auto [p, v] : entries) {
    for (uint32_t i = 0; i < v; ++i) c.tick(p);
  }
  return c;
}
}  // namespace

TEST_CASE("unordered write after read conflicts, ordered one does not", "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  const VectorClock a = clock_with(4, {{1, 1}});
  s.access(100, 200, {1, 1, 7, 0}, Access::read, a, out);
  REQUIRE(out.empty());
  // Participant 2 has not seen participant 1's epoch 1: conflict naming op 7.
  s.access(150, 160, {2, 1, 8, 0}, Access::write, clock_with(4, {{2, 1}}), out);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].prior.op == 7);
  REQUIRE(out[0].prior_kind == Access::read);
  out.clear();
  // Participant 3 has seen participant 1 up to 1 and participant 2 up to 1: ordered.
  s.access(100, 200, {3, 1, 9, 0}, Access::write, clock_with(4, {{1, 1}, {2, 1}, {3, 1}}), out);
  REQUIRE(out.empty());
}

TEST_CASE("reads of the same participant never conflict and reads do not conflict with reads",
          "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  s.access(0, 64, {1, 1, 1, 0}, Access::write, clock_with(3, {{1, 1}}), out);
  s.access(0, 64, {1, 2, 2, 0}, Access::read, clock_with(3, {{1, 2}}), out);
  REQUIRE(out.empty());
  s.access(0, 64, {2, 1, 3, 0}, Access::read, clock_with(3, {{1, 2}, {2, 1}}), out);
  s.access(0, 64, {1, 3, 4, 0}, Access::read, clock_with(3, {{1, 3}}), out);
  REQUIRE(out.empty());
}

TEST_CASE("history survives a new lifetime, which starts undefined when first touched", "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  s.access(0, 128, {1, 1, 1, 0}, Access::write, clock_with(3, {{1, 1}}), out);
  Shadow::Ranges undef;
  s.undefined(0, 128, 0, undef);
  REQUIRE(undef.empty());
  // For lifetime 1 (a later allocation of the block) nothing has been written yet.
  s.undefined(0, 256, 1, undef);
  REQUIRE(undef == Shadow::Ranges{{0, 256}});
  // The new lifetime's first write from another participant still meets the old write.
  s.access(0, 64, {2, 1, 2, 1}, Access::write, clock_with(3, {{2, 1}}), out);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].prior.lifetime == 0);
  undef.clear();
  s.undefined(0, 128, 1, undef);
  REQUIRE(undef == Shadow::Ranges{{64, 128}});
  // The old lifetime's bytes [64, 128) are still its own: an in-flight reader sees them.
  undef.clear();
  s.undefined(64, 128, 0, undef);
  REQUIRE(undef.empty());
}

TEST_CASE("a read by a newer lifetime leaves the old lifetime's bytes defined", "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  Shadow::Ranges started;
  s.access(0, 128, {1, 1, 1, 0}, Access::write, clock_with(3, {{1, 1}}), out);
  // Lifetime 1 (the block handed to a new buffer, after the write) only reads: no byte changes.
  s.access(0, 128, {2, 1, 2, 1}, Access::read, clock_with(3, {{1, 1}, {2, 1}}), out, &started);
  REQUIRE(out.empty());
  REQUIRE(started.empty());
  // Its read is of never-written bytes, for lifetime 1.
  Shadow::Ranges undef;
  s.undefined(0, 128, 1, undef);
  REQUIRE(undef == Shadow::Ranges{{0, 128}});
  // A later, correctly ordered read of lifetime 0 still sees the bytes its write defined.
  undef.clear();
  s.undefined(0, 128, 0, undef);
  REQUIRE(undef.empty());
  s.access(0, 128, {1, 2, 3, 0}, Access::read, clock_with(3, {{1, 2}}), out);
  REQUIRE(out.empty());
  // Lifetime 1's first write ends lifetime 0 and meets its unordered read.
  s.access(0, 64, {2, 2, 4, 1}, Access::write, clock_with(3, {{1, 1}, {2, 2}}), out, &started);
  REQUIRE(started == Shadow::Ranges{{0, 64}});
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].prior.op == 3);
  undef.clear();
  s.undefined(0, 128, 1, undef);
  REQUIRE(undef == Shadow::Ranges{{64, 128}});
}

TEST_CASE("equal neighbouring intervals coalesce", "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  const VectorClock c = clock_with(2, {{1, 1}});
  for (uint64_t a = 0; a < 4096; a += 64) s.access(a, a + 64, {1, 1, 5, 0}, Access::write, c, out);
  REQUIRE(s.intervals() == 1);
  s.set_defined(100, 200, false);
  REQUIRE(s.intervals() == 3);
  s.set_defined(100, 200, true);
  REQUIRE(s.intervals() == 1);
}

namespace {

// The shadow's semantics byte by byte, with no intervals: what Shadow must agree with however
// it splits, merges and buckets its ranges.
struct ByteModel {
  struct Cell {
    AccessRec write;
    Access write_kind = Access::write;
    std::vector<AccessRec> reads;
    uint32_t lifetime = 0;
    bool defined = false;
    bool touched = false;
    bool operator==(const Cell& o) const {
      return write == o.write && write_kind == o.write_kind && reads == o.reads && lifetime == o.lifetime &&
             defined == o.defined && touched == o.touched;
    }
  };
  std::vector<Cell> bytes;
  explicit ByteModel(size_t n) : bytes(n) {}

  static bool ordered(const AccessRec& prior, const AccessRec& cur, const VectorClock& clock) {
    return prior.participant == kNoParticipant || prior.participant == cur.participant ||
           clock.covers(prior.participant, prior.epoch);
  }
  static void note(std::vector<Shadow::Conflict>& out, const AccessRec& prior, Access kind) {
    for (const auto& c : out) {
      if (c.prior.op == prior.op && c.prior.lifetime == prior.lifetime) return;
    }
    out.push_back({prior, kind});
  }
  void access(uint64_t a, uint64_t b, const AccessRec& cur, Access kind, const VectorClock& clock,
              std::vector<Shadow::Conflict>& conflicts, std::vector<bool>& started) {
    for (uint64_t i = a; i < b; ++i) {
      Cell& c = bytes[i];
      c.touched = true;
      if (cur.lifetime > c.lifetime && kind != Access::read) {
        c.lifetime = cur.lifetime;
        c.defined = false;
        started[i] = true;
      }
      if (!ordered(c.write, cur, clock)) note(conflicts, c.write, c.write_kind);
      if (kind == Access::read) {
        auto it = std::find_if(c.reads.begin(), c.reads.end(),
                               [&](const AccessRec& r) { return r.participant == cur.participant; });
        if (it != c.reads.end()) {
          *it = cur;
        } else {
          c.reads.push_back(cur);
        }
        continue;
      }
      for (const AccessRec& r : c.reads) {
        if (!ordered(r, cur, clock)) note(conflicts, r, Access::read);
      }
      c.reads.clear();
      c.write = cur;
      c.write_kind = kind;
      if (kind == Access::write) c.defined = true;
    }
  }
  void set_defined(uint64_t a, uint64_t b, bool d) {
    for (uint64_t i = a; i < b; ++i) {
      bytes[i].touched = true;
      bytes[i].defined = d;
    }
  }
  Shadow::Ranges undefined(uint64_t a, uint64_t b, uint32_t lifetime) const {
    Shadow::Ranges out;
    for (uint64_t i = a; i < b; ++i) {
      const Cell& c = bytes[i];
      if (c.touched && c.defined && c.lifetime >= lifetime) continue;
      if (!out.empty() && out.back().second == i) {
        ++out.back().second;
      } else {
        out.emplace_back(i, i + 1);
      }
    }
    return out;
  }
  // Maximal runs of touched bytes in one state: the fewest intervals that can hold them.
  size_t runs() const {
    size_t n = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i].touched && (i == 0 || !(bytes[i] == bytes[i - 1]))) ++n;
    }
    return n;
  }
};

}  // namespace

TEST_CASE("the shadow agrees with a byte-by-byte model under random accesses", "[sim][shadow]") {
  // Five participants (reads past the two inline ones), lifetimes that grow, whole-range,
  // partial, gap-filling and neighbouring accesses, over enough distinct states to need many
  // buckets (up to about 250 intervals); every conflict list, started range, definedness
  // answer and interval count compared.
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    shardcheck::core::Rng rng(seed);
    constexpr uint64_t kBytes = 6144, kGrain = 16;
    Shadow s;
    ByteModel m(kBytes);
    uint32_t epochs[5] = {};
    uint32_t lifetime = 0;
    for (uint32_t op = 1; op <= 4000; ++op) {
      const uint64_t a = rng.uniform(kBytes / kGrain) * kGrain;
      const uint64_t len = (1 + rng.uniform(rng.bernoulli(0.2) ? 64 : 6)) * kGrain;
      const uint64_t b = std::min(kBytes, a + len);
      if (rng.bernoulli(0.05)) ++lifetime;
      const uint32_t p = static_cast<uint32_t>(rng.uniform(5));
      VectorClock clock(8);
      for (uint32_t q = 0; q < 5; ++q) {
        const uint32_t seen = q == p ? ++epochs[q] : static_cast<uint32_t>(rng.uniform(epochs[q] + 1));
        for (uint32_t t = 0; t < seen; ++t) clock.tick(q);
      }
      const AccessRec cur{p, epochs[p], op, static_cast<uint32_t>(rng.uniform(lifetime + 1))};
      const uint64_t what = rng.uniform(20);
      if (what == 0) {
        const bool d = rng.bernoulli(0.5);
        s.set_defined(a, b, d);
        m.set_defined(a, b, d);
      } else if (what == 1) {
        const uint32_t l = static_cast<uint32_t>(rng.uniform(lifetime + 1));
        Shadow::Ranges got;
        s.undefined(a, b, l, got);
        REQUIRE(got == m.undefined(a, b, l));
      } else {
        const Access kind = what < 12 ? Access::read : what < 19 ? Access::write : Access::free;
        std::vector<Shadow::Conflict> got, want;
        Shadow::Ranges started;
        std::vector<bool> want_started(kBytes, false);
        s.access(a, b, cur, kind, clock, got, &started);
        m.access(a, b, cur, kind, clock, want, want_started);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          REQUIRE(got[i].prior == want[i].prior);
          REQUIRE(got[i].prior_kind == want[i].prior_kind);
        }
        std::vector<bool> got_started(kBytes, false);
        for (const auto& [x, y] : started) {
          for (uint64_t i = x; i < y; ++i) got_started[i] = true;
        }
        REQUIRE(got_started == want_started);
      }
      REQUIRE(s.intervals() == m.runs());
    }
    Shadow::Ranges all;
    s.undefined(0, kBytes, 0, all);
    REQUIRE(all == m.undefined(0, kBytes, 0));
  }
}
