// Reports deadlock. When nothing can run but work remains, it builds the wait-for graph (hosts
// waiting on syncs, streams waiting on events, collectives and p2p calls waiting for peers)
// with Boost.Graph and reports its cycle, or the chain that ends at something that never comes.
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <map>
#include <set>

#include "sim/detector.hpp"

namespace shardcheck::sim {

namespace {
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;
using Edge = boost::graph_traits<Graph>::edge_descriptor;

struct CycleFinder : boost::default_dfs_visitor {
  std::vector<Vertex>* pred;
  std::vector<Vertex>* cycle;
  void tree_edge(Edge e, const Graph& g) { (*pred)[boost::target(e, g)] = boost::source(e, g); }
  void back_edge(Edge e, const Graph& g) {
    if (!cycle->empty()) return;
    const Vertex u = boost::source(e, g), v = boost::target(e, g);
    std::vector<Vertex> path{u};
    for (Vertex x = u; x != v; x = (*pred)[x]) {
      if ((*pred)[x] == x) return;  // v is not an ancestor along tree edges; not our cycle
      path.push_back((*pred)[x]);
    }
    cycle->assign(path.rbegin(), path.rend());
  }
};
std::string describe_head(const WorldView& w, int rank, int stream) {
  const Stream& s = w.stream(rank, stream);
  if (s.queue.empty()) return "(idle)";
  return w.op_text(s.queue.front().id);
}

// Participant `v` of a deadlock, waiting for `next` (why[{v, next}] says for what).
core::DeadlockDetail::Node deadlock_node(const WorldView& w, int v, int next,
                                         const std::map<std::pair<int, int>, std::string>& why) {
  core::DeadlockDetail::Node n;
  const auto [rank, s] = w.rank_stream(v);
  const auto reason = why.find({v, next});
  n.rank = rank;
  n.where = s < 0 ? "host" : w.rank(n.rank).streams[s].name;
  n.op = s < 0 ? "waiting for " + (reason != why.end() ? reason->second : std::string("its peers"))
               : describe_head(w, n.rank, s);
  if (s >= 0 && !w.rank(n.rank).streams[s].queue.empty())
    n.source = w.source_line(w.rank(n.rank).streams[s].queue.front().id);
  n.waits_for = reason != why.end() ? reason->second : "";
  return n;
}

// The wait-for graph: an edge from each stuck participant to what it waits for, and why.
struct WaitGraph {
  explicit WaitGraph(int participants) : g(participants) {}
  Graph g;
  std::map<std::pair<int, int>, std::string> why;  // edge -> what the waiter waits for
  bool mismatch_involved = false;
  void edge(int from, int to, std::string reason) {
    boost::add_edge(from, to, g);
    why.emplace(std::pair{from, to}, std::move(reason));
  }
};

void add_host_waits(const WorldView& w, int r, WaitGraph& g) {
  const Host& h = w.rank(r).host;
  if (h.status != Host::Status::parked || w.host_ready(r)) return;
  for (uint32_t rec : h.wait_records) {
    if (!w.record(rec).executed) {
      const Stream& s = w.rank(w.record(rec).rank).streams[w.record(rec).stream];
      std::string reason = "a host sync on stream '" + s.name + "'";
      // In a captured program, what the sync waits for first (a transfer's wait(): its transfer).
      if (w.sources_seen() && !s.queue.empty() && s.queue.front().kind != OpKind::record)
        reason += ", behind " + w.op_text(s.queue.front().id);
      g.edge(w.host_participant(r), w.participant(w.record(rec).rank, w.record(rec).stream), reason);
    }
  }
  if (h.wait_stream >= 0) g.edge(w.host_participant(r), w.participant(r, h.wait_stream), "its last launch");
}

void add_collective_waits(const WorldView& w, int self, const Op& op, WaitGraph& g);
void add_p2p_waits(const WorldView& w, int r, int self, const Op& op, WaitGraph& g);

void add_stream_waits(const WorldView& w, int r, int s, WaitGraph& g) {
  const Stream& st = w.rank(r).streams[s];
  if (st.queue.empty() || w.stream_ready(r, s)) return;
  const Op& op = st.queue.front();
  const int self = w.participant(r, s);
  if (op.kind == OpKind::wait) {
    const Record& rec = w.record(op.record);
    g.edge(self, w.participant(rec.rank, rec.stream),
           w.op_text(rec.op) + " on stream '" + w.rank(rec.rank).streams[rec.stream].name + "'");
  } else if (op.kind == OpKind::collective) {
    add_collective_waits(w, self, op, g);
  } else if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    add_p2p_waits(w, r, self, op, g);
  }
}

void add_collective_waits(const WorldView& w, int self, const Op& op, WaitGraph& g) {
  const Group& grp = w.group(op.group);
  if (op.instance != grp.first) {
    // Behind an earlier collective of the same communicator.
    const Instance& earlier = grp.at(grp.first);
    g.mismatch_involved |= earlier.mismatch;
    for (size_t m = 0; m < grp.members.size(); ++m) {
      const int peer = grp.members[m];
      if (!earlier.members[m].issued) {
        g.edge(self, w.host_participant(peer),
               "rank " + std::to_string(peer) + " to issue collective #" + std::to_string(grp.first) +
                   " of group '" + grp.name + "' (it runs first)");
      } else if (w.rank(peer).streams[earlier.members[m].stream].executed != earlier.members[m].position) {
        g.edge(self, w.participant(peer, earlier.members[m].stream),
               "collective #" + std::to_string(grp.first) + " of group '" + grp.name + "' (" +
                   w.op_text(earlier.members[m].op) + " on rank " + std::to_string(peer) +
                   "), which the communicator runs first");
      }
    }
    return;
  }
  const Instance& inst = grp.at(op.instance);
  g.mismatch_involved |= inst.mismatch;
  for (size_t m = 0; m < grp.members.size(); ++m) {
    const int peer = grp.members[m];
    if (!inst.members[m].issued) {
      g.edge(self, w.host_participant(peer),
             "rank " + std::to_string(peer) + " to issue collective #" + std::to_string(op.instance) +
                 " of group '" + grp.name + "'");
    } else if (w.rank(peer).streams[inst.members[m].stream].executed != inst.members[m].position) {
      g.edge(self, w.participant(peer, inst.members[m].stream),
             "rank " + std::to_string(peer) + "'s stream '" +
                 w.rank(peer).streams[inst.members[m].stream].name + "' to reach " +
                 w.op_text(inst.members[m].op));
    }
  }
}

void add_p2p_waits(const WorldView& w, int r, int self, const Op& op, WaitGraph& g) {
  const bool send = op.kind == OpKind::send;
  const int peer = op.p2p().peer;
  const Channel& ch = w.channel_of(r, op);
  const auto& pair = ch.at(op.instance);
  const auto& other = send ? pair.second : pair.first;
  if (!other.issued) {
    g.edge(self, w.host_participant(peer),
           "rank " + std::to_string(peer) + " to issue the matching " + (send ? "recv" : "send"));
  } else {
    g.edge(self, w.participant(peer, other.stream),
           "rank " + std::to_string(peer) + "'s stream '" + w.rank(peer).streams[other.stream].name +
               "' to reach " + w.op_text(other.op));
  }
}

// The graph's cycle, or else the chain of waits from the first stuck participant to what will
// never come.
core::DeadlockDetail wait_chain(const WorldView& w, const WaitGraph& wg) {
  const Graph& g = wg.g;
  std::vector<Vertex> pred(w.participants()), cycle;
  for (int v = 0; v < w.participants(); ++v) pred[v] = v;
  CycleFinder vis;
  vis.pred = &pred;
  vis.cycle = &cycle;
  boost::depth_first_search(g, boost::visitor(vis));

  core::DeadlockDetail d;
  auto node = [&](int v, int next) { return deadlock_node(w, v, next, wg.why); };
  if (!cycle.empty()) {
    for (size_t i = 0; i < cycle.size(); ++i) {
      d.cycle.push_back(node(static_cast<int>(cycle[i]), static_cast<int>(cycle[(i + 1) % cycle.size()])));
    }
    return d;
  }
  d.is_cycle = false;
  int v = -1;
  for (int x = 0; x < w.participants() && v < 0; ++x) {
    if (boost::out_degree(x, g) > 0) v = x;
  }
  std::set<int> seen;
  while (v >= 0 && !seen.count(v)) {
    seen.insert(v);
    int next = -1;
    auto [it, end] = boost::adjacent_vertices(v, g);
    if (it != end) next = static_cast<int>(*it);
    d.cycle.push_back(node(v, next));
    v = next;
  }
  if (v >= 0 && d.cycle.back().waits_for.empty())
    d.cycle.back().waits_for = "(finished: it will never issue it)";
  if (d.cycle.empty()) {
    // Stuck with no waits recorded: a host parked on an event nothing will record.
    core::DeadlockDetail::Node n;
    n.where = "host";
    n.op = "stuck with no runnable work";
    d.cycle.push_back(n);
  }
  return d;
}

core::Finding deadlock_finding(const WorldView& w, core::DeadlockDetail d) {
  core::Finding f;
  f.kind = core::FindingKind::deadlock;
  std::string chain, key;
  for (const auto& n : d.cycle) {
    chain += "\n  rank " + std::to_string(n.rank) + " " + n.where + ": " + n.op +
             (n.waits_for.empty() ? "" : "\n      waits for " + n.waits_for);
    key += "|" + n.where + ":" + n.op;
  }
  f.summary = d.is_cycle
                  ? "deadlock: " + std::to_string(d.cycle.size()) + " waiters form a cycle; nothing can run"
                  : "deadlock: work waits for something that will never come";
  f.explanation =
      f.summary + chain +
      (d.is_cycle ? "\nEach waits for the next and the last for the first. Issue collectives and p2p calls "
                    "in one order on every rank, or put them on separate streams."
                  : "");
  if (w.sources_seen()) {
    f.explanation +=
        "\nIn PyTorch: issue torch.distributed collectives in the same order on every rank of a group, "
        "and pair point-to-point calls so that every send meets a recv its peer has posted (for example "
        "even ranks send first and odd ranks receive first, or post both with dist.batch_isend_irecv).";
  }
  f.key = "deadlock" + key;
  f.detail = std::move(d);
  f.seed = w.options().seed;
  return f;
}

class DeadlockDetector final : public Detector {
 public:
  unsigned hooks() const override { return on_end; }

  // Nothing can run but work remains, and the run was not cut short.
  void end(const WorldView& w, const RunEnd& e, Findings& out) override {
    if (e.done || !e.whole) return;
    WaitGraph g(w.participants());
    for (int r = 0; r < w.ranks(); ++r) {
      add_host_waits(w, r, g);
      for (int s = 0; s < w.num_streams(r); ++s) add_stream_waits(w, r, s, g);
    }
    if (g.mismatch_involved || w.diverged()) return;  // the mismatch finding already explains the hang
    core::add_finding(out, deadlock_finding(w, wait_chain(w, g)));
  }
};

}  // namespace

std::unique_ptr<Detector> make_deadlock_detector() { return std::make_unique<DeadlockDetector>(); }

}  // namespace shardcheck::sim
