// Case descriptions and their scenario files. The YAML written here must load with the
// scenario loaders unchanged and reproduce the run the property judged: same mesh (axis
// order included), model, data, precision, optimizer, allocator and schedule seed.
#include "properties/cases.hpp"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

namespace shardcheck::properties {

namespace {

// The shortest decimal that reads back as the same double.
std::string real(double v) {
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  // YAML reads "1" as an integer; the loader wants a real for lr and friends.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string shapes_text(const std::vector<core::Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? "," : "") + core::to_string(shapes[i]);
  return s;
}

// A folded YAML block: every line indented, so any text is safe inside it.
std::string block(const std::string& text) {
  std::string out = ">\n";
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += "  " + line + "\n";
  return out;
}

}  // namespace

std::vector<core::Axis> TrainingCase::axes() const {
  std::vector<core::Axis> a;
  if (pp > 1) a.push_back({"pp", pp});
  if (two_dimensional()) {
    a.push_back({"dp_outer", dp_outer});
    a.push_back({"dp_inner", dp_inner});
  } else {
    a.push_back({"dp", dp});
  }
  if (vpp > 1) a.push_back({"vpp", vpp});
  return a;
}

std::shared_ptr<const core::Mesh> TrainingCase::mesh() const {
  return std::make_shared<const core::Mesh>(core::Mesh::create(axes()).value());
}

sim::Options TrainingCase::sim_options() const {
  sim::Options o;
  o.ranks = world_size();
  o.policy = policy;
  o.seed = schedule_seed;
  o.pct_depth = pct_depth;
  o.allocator = core::Allocator::caching;
  o.reuse = reuse_earliest ? core::PoolReuse::earliest : core::PoolReuse::best_fit;
  return o;
}

std::vector<core::Shape> LayoutCase::unique_shapes() const {
  std::vector<core::Shape> out;
  std::set<int> seen;  // only to skip repeats; never iterated
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (seen.insert(ids[i]).second) out.push_back(shapes[i]);
  }
  return out;
}

std::string describe_precision(const core::Precision& p) {
  std::string s = p.exact ? "exact " : "mixed ";
  s += p.param == core::DType::bf16 ? "bf16 params" : "fp32 params";
  if (p.grad == core::DType::bf16) s += ", bf16 grads";
  return s;
}

std::string describe(const TrainingCase& c) {
  const core::TrainingConfig& t = c.config;
  std::ostringstream o;
  o << core::to_string(t.strategy) << " on " << core::Mesh::create(c.axes()).value().describe() << ", model V"
    << t.model.vocab << " H" << t.model.hidden << " L" << t.model.layers << " S" << t.model.seq
    << (t.model.tied ? " tied" : " untied") << ", " << describe_precision(t.precision) << ", "
    << t.microbatches << " microbatches of " << t.micro_batch_size << ", " << t.steps << " steps, "
    << (t.optimizer.kind == core::OptimizerConfig::Kind::adam ? "adam" : "sgd") << " lr " << t.optimizer.lr
    << " clip " << t.optimizer.clip_grad << (t.unified_comm ? ", unified comm" : "")
    << (t.overlap ? ", overlap" : "") << ", schedule " << sim::to_string(c.policy) << " seed "
    << c.schedule_seed << (c.reuse_earliest ? ", reuse earliest" : "");
  if (t.mutations.any()) {
    o << ", mutations [";
    const auto list = t.mutations.list();
    for (size_t i = 0; i < list.size(); ++i) o << (i ? ", " : "") << core::to_string(list[i]);
    o << "]";
  }
  return o.str();
}

std::string layout_command(const LayoutCase& c) {
  return "shardcheck layout --shapes " + shapes_text(c.unique_shapes()) + " --ranks " +
         std::to_string(c.ranks);
}

std::string describe(const LayoutCase& c) {
  std::ostringstream o;
  o << "shapes " << shapes_text(c.shapes);
  bool tied = false;
  for (size_t i = 0; i < c.ids.size(); ++i) tied |= c.ids[i] != static_cast<int>(i);
  if (tied) {
    o << " (ids";
    for (int id : c.ids) o << " " << id;
    o << ")";
  }
  o << " over " << c.ranks << " ranks";
  if (c.outer > 1) o << " as " << c.outer << "x" << c.ranks / c.outer;
  return o.str();
}

std::string training_scenario_yaml(const TrainingCase& c, const std::string& name,
                                   const std::string& description, const std::string& expect) {
  const core::TrainingConfig& t = c.config;
  std::ostringstream y;
  y << "kind: training\nname: " << name << "\ndescription: " << block(description);
  y << "mesh: {";
  const auto axes = c.axes();
  for (size_t i = 0; i < axes.size(); ++i) y << (i ? ", " : "") << axes[i].name << ": " << axes[i].size;
  y << "}\n";
  y << "model: {vocab: " << t.model.vocab << ", hidden: " << t.model.hidden << ", layers: " << t.model.layers
    << ", seq: " << t.model.seq << ", tied_embeddings: " << (t.model.tied ? "true" : "false")
    << ", init_seed: " << t.model.init_seed << "}\n";
  y << "data: {source: markov, order: 1, seed: " << t.data_seed << "}\n";
  y << "strategy: " << core::to_string(t.strategy) << "\n";
  const core::Precision& p = t.precision;
  y << "precision: {exact: " << (p.exact ? "true" : "false")
    << ", param: " << (p.param == core::DType::bf16 ? "bf16" : "fp32")
    << ", main: fp32, grad: " << (p.grad == core::DType::bf16 ? "bf16" : "fp32") << "}\n";
  y << "microbatches: " << t.microbatches << "\nmicro_batch_size: " << t.micro_batch_size
    << "\nsteps: " << t.steps << "\n";
  if (t.gradient_divisor > 0) y << "gradient_divisor: " << real(t.gradient_divisor) << "\n";
  const core::OptimizerConfig& o = t.optimizer;
  y << "optimizer: {kind: " << (o.kind == core::OptimizerConfig::Kind::adam ? "adam" : "sgd")
    << ", lr: " << real(o.lr) << ", betas: [" << real(o.beta1) << ", " << real(o.beta2)
    << "], eps: " << real(o.eps) << ", weight_decay: " << real(o.weight_decay)
    << ", clip_grad: " << real(o.clip_grad) << "}\n";
  y << "streams: {unified_comm: " << (t.unified_comm ? "true" : "false")
    << ", overlap: " << (t.overlap ? "true" : "false") << "}\n";
  y << "allocator: {model: caching, reuse: " << (c.reuse_earliest ? "earliest" : "best_fit") << "}\n";
  y << "mutations: [";
  bool first = true;
  // Only mutations that change the case are forced on (suite.cpp), so the loader, which
  // refuses the others, accepts every one written here.
  for (core::Mutation m : t.mutations.list()) {
    y << (first ? "" : ", ") << core::to_string(m);
    first = false;
  }
  y << "]\n";
  y << "schedule: {policy: " << sim::to_string(c.policy) << ", depth: " << c.pct_depth
    << ", seed: " << c.schedule_seed << ", runs: 1}\n";
  y << "reference: single_rank\nexpect: " << expect << "\n";
  return y.str();
}

std::string layout_scenario_yaml(const LayoutCase& c, const std::string& name,
                                 const std::string& description) {
  const std::vector<core::Shape> shapes = c.unique_shapes();
  const core::GlobalLayout l = core::GlobalLayout::create(shapes, c.ranks).value();
  auto ranges = [&](const char* buffer) {
    std::string s = "[";
    for (int t = 0; t < l.num_tensors(); ++t) {
      s += std::string(t ? ", " : "") + "{buffer: " + buffer +
           ", offset: " + std::to_string(l.tensor(t).offset * 4) +
           ", bytes: " + std::to_string(l.tensor(t).numel * 4) + "}";
    }
    return s + "]";
  };
  std::ostringstream y;
  y << "kind: trace\nname: " << name << "\ndescription: " << block(description);
  y << "ranks: " << c.ranks << "\nstreams: [compute]\ngroups: {dp: [";
  for (int r = 0; r < c.ranks; ++r) y << (r ? ", " : "") << r;
  y << "]}\nallocator: caching\nschedule: {policy: random, seed: 1, runs: 1}\nprogram:\n";
  y << "  # The group buffer (layout " << shapes_text(shapes) << ", " << l.size()
    << " elements): every tensor written, gaps and padding never.\n";
  y << "  - alloc: {buffer: full, bytes: " << l.size() * 4 << ", stream: compute}\n";
  y << "  - kernel: {name: write_tensors, stream: compute, writes: " << ranges("full") << "}\n";
  y << "  - alloc: {buffer: shard, bytes: " << l.size() / c.ranks * 4 << ", stream: compute}\n";
  y << "  - collective: {op: reduce_scatter, group: dp, stream: compute, input: full, output: shard, dtype: "
       "f32, reduce: sum, tag: grad}\n";
  y << "  - alloc: {buffer: gathered, bytes: " << l.size() * 4 << ", stream: compute}\n";
  y << "  - collective: {op: all_gather, group: dp, stream: compute, input: shard, output: gathered, dtype: "
       "f32, tag: weights}\n";
  y << "  - kernel: {name: read_tensors, stream: compute, reads: " << ranges("gathered") << "}\n";
  y << "expect: {findings: []}\n";
  return y.str();
}

}  // namespace shardcheck::properties
