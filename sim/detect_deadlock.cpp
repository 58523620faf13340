// Reports deadlock. When nothing can run but work remains, it builds the wait-for graph (hosts
// waiting on syncs, streams waiting on events, collectives and p2p calls waiting for peers)
// with Boost.Graph and reports its cycle, or the chain that ends at something that never comes.
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <map>
#include <set>

#include "sim/world_state.hpp"

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
}  // namespace

std::string World::describe_head(int rank, int stream) {
  const Stream& s = ranks_[rank]->streams[stream];
  if (s.queue.empty()) return "(idle)";
  return op_text(s.queue.front().id);
}

// Participant `v` of a deadlock, waiting for `next` (why[{v, next}] says for what).
core::DeadlockDetail::Node World::deadlock_node(int v, int next,
                                                const std::map<std::pair<int, int>, std::string>& why) {
  core::DeadlockDetail::Node n;
  const auto [rank, s] = rank_stream(v);
  const auto reason = why.find({v, next});
  n.rank = rank;
  n.where = s < 0 ? "host" : ranks_[n.rank]->streams[s].name;
  n.op = s < 0 ? "waiting for " + (reason != why.end() ? reason->second : std::string("its peers"))
               : describe_head(n.rank, s);
  if (s >= 0 && !ranks_[n.rank]->streams[s].queue.empty())
    n.source = source_line(ranks_[n.rank]->streams[s].queue.front().id);
  n.waits_for = reason != why.end() ? reason->second : "";
  return n;
}

// The wait-for graph: an edge from each stuck participant to what it waits for, and why.
struct World::WaitGraph {
  explicit WaitGraph(int participants) : g(participants) {}
  Graph g;
  std::map<std::pair<int, int>, std::string> why;  // edge -> what the waiter waits for
  bool mismatch_involved = false;
  void edge(int from, int to, std::string reason) {
    boost::add_edge(from, to, g);
    why.emplace(std::pair{from, to}, std::move(reason));
  }
};

void World::add_host_waits(int r, WaitGraph& g) {
  const Host& h = ranks_[r]->host;
  if (h.status != Host::Status::parked || host_ready(r)) return;
  for (uint32_t rec : h.wait_records) {
    if (!records_[rec].executed) {
      g.edge(host_participant(r), participant(records_[rec].rank, records_[rec].stream),
             "a host sync on stream '" + ranks_[r]->streams[records_[rec].stream].name + "'");
    }
  }
  if (h.wait_stream >= 0) g.edge(host_participant(r), participant(r, h.wait_stream), "its last launch");
}

void World::add_stream_waits(int r, int s, WaitGraph& g) {
  const Stream& st = ranks_[r]->streams[s];
  if (st.queue.empty() || stream_ready(r, s)) return;
  const Op& op = st.queue.front();
  const int self = participant(r, s);
  if (op.kind == OpKind::wait) {
    const Record& rec = records_[op.record];
    g.edge(self, participant(rec.rank, rec.stream),
           op_text(rec.op) + " on stream '" + ranks_[rec.rank]->streams[rec.stream].name + "'");
  } else if (op.kind == OpKind::collective) {
    add_collective_waits(self, op, g);
  } else if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    add_p2p_waits(r, self, op, g);
  }
}

void World::add_collective_waits(int self, const Op& op, WaitGraph& g) {
  Group& grp = groups_[op.group];
  if (op.instance != grp.first) {
    // Behind an earlier collective of the same communicator.
    const Instance& earlier = grp.at(grp.first);
    g.mismatch_involved |= earlier.mismatch;
    for (size_t m = 0; m < grp.members.size(); ++m) {
      const int peer = grp.members[m];
      if (!earlier.members[m].issued) {
        g.edge(self, host_participant(peer),
               "rank " + std::to_string(peer) + " to issue collective #" + std::to_string(grp.first) +
                   " of group '" + grp.name + "' (it runs first)");
      } else if (ranks_[peer]->streams[earlier.members[m].stream].executed != earlier.members[m].position) {
        g.edge(self, participant(peer, earlier.members[m].stream),
               "collective #" + std::to_string(grp.first) + " of group '" + grp.name + "' (" +
                   op_text(earlier.members[m].op) + " on rank " + std::to_string(peer) +
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
      g.edge(self, host_participant(peer),
             "rank " + std::to_string(peer) + " to issue collective #" + std::to_string(op.instance) +
                 " of group '" + grp.name + "'");
    } else if (ranks_[peer]->streams[inst.members[m].stream].executed != inst.members[m].position) {
      g.edge(self, participant(peer, inst.members[m].stream),
             "rank " + std::to_string(peer) + "'s stream '" +
                 ranks_[peer]->streams[inst.members[m].stream].name + "' to reach " +
                 op_text(inst.members[m].op));
    }
  }
}

void World::add_p2p_waits(int r, int self, const Op& op, WaitGraph& g) {
  const bool send = op.kind == OpKind::send;
  const int peer = op.p2p().peer;
  Channel& ch = channel_of(r, op);
  const auto& pair = ch.at(op.instance);
  const auto& other = send ? pair.second : pair.first;
  if (!other.issued) {
    g.edge(self, host_participant(peer),
           "rank " + std::to_string(peer) + " to issue the matching " + (send ? "recv" : "send"));
  } else {
    g.edge(self, participant(peer, other.stream),
           "rank " + std::to_string(peer) + "'s stream '" + ranks_[peer]->streams[other.stream].name +
               "' to reach " + op_text(other.op));
  }
}

// The graph's cycle, or else the chain of waits from the first stuck participant to what will
// never come.
core::DeadlockDetail World::wait_chain(const WaitGraph& wg) {
  const Graph& g = wg.g;
  std::vector<Vertex> pred(participants_), cycle;
  for (int v = 0; v < participants_; ++v) pred[v] = v;
  CycleFinder vis;
  vis.pred = &pred;
  vis.cycle = &cycle;
  boost::depth_first_search(g, boost::visitor(vis));

  core::DeadlockDetail d;
  auto node = [&](int v, int next) { return deadlock_node(v, next, wg.why); };
  if (!cycle.empty()) {
    for (size_t i = 0; i < cycle.size(); ++i) {
      d.cycle.push_back(node(static_cast<int>(cycle[i]), static_cast<int>(cycle[(i + 1) % cycle.size()])));
    }
    return d;
  }
  d.is_cycle = false;
  int v = -1;
  for (int x = 0; x < participants_ && v < 0; ++x) {
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

core::Finding World::deadlock_finding(core::DeadlockDetail d) const {
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
  if (sources_seen_) {
    f.explanation +=
        "\nIn PyTorch: issue torch.distributed collectives in the same order on every rank of a group, "
        "and pair point-to-point calls so that every send meets a recv its peer has posted (for example "
        "even ranks send first and odd ranks receive first, or post both with dist.batch_isend_irecv).";
  }
  f.key = "deadlock" + key;
  f.detail = std::move(d);
  f.seed = options_.seed;
  return f;
}

void World::report_deadlock() {
  WaitGraph g(participants_);
  for (int r = 0; r < ranks(); ++r) {
    add_host_waits(r, g);
    for (int s = 0; s < num_streams(r); ++s) add_stream_waits(r, s, g);
  }
  if (g.mismatch_involved || mismatch_seen_) return;  // the mismatch finding already explains the hang
  core::add_finding(findings_, deadlock_finding(wait_chain(g)));
}

}  // namespace shardcheck::sim
