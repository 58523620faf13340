// Loading and validating training scenarios.
#include "core/scenario/training_scenario.hpp"

#include <cmath>

#include "core/scenario/yaml_reader.hpp"

namespace shardcheck::core {

namespace {

Status model_limits_exceeded(const TrainingConfig& c, const ModelLayout& layout, const Mesh& mesh) {
  using L = TrainingLimits;
  const int64_t params = layout.num_logical_elements();
  if (params > L::kMaxParameters) {
    return fail("the model has " + std::to_string(params) + " parameters; the limit is 2^22 (" +
                std::to_string(L::kMaxParameters) + ")");
  }
  // Each factor is at most 2^16 (layers 2^8, micro_batch_size 2^10): no product overflows.
  const ModelConfig& m = c.model;
  const int64_t rows = m.seq * c.micro_batch_size;
  const int64_t per_row = 2 * m.vocab + 12 * m.hidden * m.layers;
  // Every rank holds its microbatch's activations at once; a pipeline may hold all of them.
  const int64_t in_flight = mesh.size_or_one("pp") > 1 ? c.microbatches : 1;
  const int64_t copies = mesh.world_size() * in_flight;  // at most 1024 * 256
  if (rows > L::kMaxActivationElements / per_row / copies) {
    return fail(
        "one microbatch keeps seq * micro_batch_size * (2 * vocab + 12 * hidden * layers) = " +
        std::to_string(rows) + " * " + std::to_string(per_row) + " activation elements, on each of " +
        std::to_string(mesh.world_size()) + " ranks" +
        (in_flight > 1 ? " for each of " + std::to_string(in_flight) + " microbatches in the pipeline" : "") +
        "; the limit is 2^26 (" + std::to_string(L::kMaxActivationElements) + ") in all");
  }
  return {};
}

Status reference_limit_exceeded(const TrainingConfig& c, const ModelLayout& layout, bool with_reference) {
  using L = TrainingLimits;
  const int64_t params = layout.num_logical_elements();
  if (!with_reference || c.steps <= L::kMaxReferenceParameterSteps / params) return {};
  return fail("the single-rank reference keeps every step's weights and gradients: " +
              std::to_string(params) + " parameters * " + std::to_string(c.steps) +
              " steps exceeds the limit of 2^24 (" + std::to_string(L::kMaxReferenceParameterSteps) +
              "); take fewer steps, a smaller model or `reference: none`");
}

// Past 64 ranks, the length of the run is bounded too (TrainingLimits::kMaxWideMeshWork).
Status wide_mesh_limit_exceeded(const TrainingConfig& c, int ranks) {
  using L = TrainingLimits;
  if (ranks <= L::kMaxRanksUnbounded) return {};
  // ranks <= 2^10, layers <= 2^8, microbatches <= 2^8, steps < 2^14: no product overflows.
  const int64_t work = int64_t{ranks} * c.model.layers * c.microbatches * c.steps;
  if (work <= L::kMaxWideMeshWork) return {};
  return fail("past " + std::to_string(L::kMaxRanksUnbounded) +
              " ranks, ranks * layers * microbatches * steps = " + std::to_string(ranks) + " * " +
              std::to_string(c.model.layers) + " * " + std::to_string(c.microbatches) + " * " +
              std::to_string(c.steps) + " = " + std::to_string(work) + " exceeds the limit of 2^14 (" +
              std::to_string(L::kMaxWideMeshWork) + "); take fewer ranks, layers, microbatches or steps");
}

Status judge_limit_exceeded(const TrainingConfig& c, const ModelLayout& layout, int ranks) {
  using L = TrainingLimits;
  const int64_t per_step = layout.num_logical_elements() * ranks;  // at most 2^22 * 2^10
  if (c.steps <= L::kMaxJudgedParameterSteps / per_step) return {};
  return fail("the training judge keeps what every rank holds after every step: " +
              std::to_string(layout.num_logical_elements()) + " parameters * " + std::to_string(c.steps) +
              " steps * " + std::to_string(ranks) + " ranks exceeds the limit of 2^25 (" +
              std::to_string(L::kMaxJudgedParameterSteps) + "); take fewer steps, ranks or a smaller model");
}

class Parser {
 public:
  explicit Parser(const YamlReader& y) : y_(y) {}

  TrainingScenario scenario(const YAML::Node& root) {
    TrainingScenario s;
    s.file = y_.file();
    y_.keys(root,
            {"kind", "name", "description", "mesh", "model", "data", "strategy", "precision", "microbatches",
             "micro_batch_size", "steps", "optimizer", "streams", "mutations", "schedule", "reference",
             "expect", "gradient_divisor", "allocator"},
            "a training scenario");
    for (const char* k : {"name", "mesh", "model", "strategy", "steps"})
      y_.require(root, k, "a training scenario");
    s.name = y_.str(root["name"], "name");
    if (root["description"]) s.description = y_.text(root["description"], "description");
    mesh(root["mesh"], s);
    model(root["model"], s.config.model);
    if (root["data"]) data(root["data"], s.config);
    strategy(root["strategy"], s);
    s.place_line = root["strategy"].Mark().line + 1;
    if (root["precision"]) precision(root["precision"], s.config.precision);
    TrainingConfig& c = s.config;
    if (root["microbatches"])
      c.microbatches = static_cast<int>(
          y_.integer(root["microbatches"], "microbatches", 1, TrainingLimits::kMaxMicrobatches));
    if (root["micro_batch_size"])
      c.micro_batch_size = static_cast<int>(
          y_.integer(root["micro_batch_size"], "micro_batch_size", 1, TrainingLimits::kMaxMicroBatchSize));
    c.steps = static_cast<int>(y_.integer(root["steps"], "steps", 1, TrainingLimits::kMaxSteps));
    if (root["gradient_divisor"]) {
      c.gradient_divisor = y_.real(root["gradient_divisor"], "gradient_divisor");
      if (!(c.gradient_divisor > 0)) y_.fail(root["gradient_divisor"], "gradient_divisor must be positive");
    }
    if (root["optimizer"]) optimizer(root["optimizer"], c.optimizer);
    if (root["streams"]) {
      y_.map(root["streams"], "streams");
      y_.keys(root["streams"], {"unified_comm", "overlap", "bucket_size"}, "streams");
      if (root["streams"]["unified_comm"])
        c.unified_comm = y_.boolean(root["streams"]["unified_comm"], "streams.unified_comm");
      if (root["streams"]["overlap"]) c.overlap = y_.boolean(root["streams"]["overlap"], "streams.overlap");
      if (root["streams"]["bucket_size"]) {
        c.bucket_size =
            y_.integer(root["streams"]["bucket_size"], "streams.bucket_size", 1, int64_t{1} << 40);
        if (!c.overlap)
          y_.fail(root["streams"]["bucket_size"],
                  "streams.bucket_size sizes DistOpt's overlapped buckets: it needs streams.overlap: true");
      }
    }
    if (root["mutations"]) mutations(root["mutations"], c.mutations);
    if (!mutation_nodes_.empty()) s.place_line = mutation_nodes_.front().second.Mark().line + 1;
    if (root["schedule"]) s.schedule = read_schedule(y_, root["schedule"]);
    if (root["allocator"]) allocator(root["allocator"], s);
    if (root["reference"]) {
      s.reference = y_.str(root["reference"], "reference");
      if (s.reference != "single_rank" && s.reference != "none")
        y_.fail(root["reference"], "reference is single_rank or none");
    }
    if (root["expect"]) {
      s.expect = read_expectation(y_, root["expect"]);
    } else {
      s.expect.given = false;
    }
    check(root, s);
    return s;
  }

 private:
  void mesh(const YAML::Node& n, TrainingScenario& s) {
    y_.map(n, "mesh");
    std::vector<Axis> axes;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string name = y_.str(it->first, "a mesh axis");
      axes.push_back(
          {name, static_cast<int>(y_.integer(it->second, "a mesh axis size", 1, TrainingLimits::kMaxRanks))});
    }
    auto m = Mesh::create(axes);
    if (!m) y_.fail(n, m.error().message());
    if (m->world_size() > TrainingLimits::kMaxRanks)
      y_.fail(n, "training scenarios run at most " + std::to_string(TrainingLimits::kMaxRanks) + " ranks");
    s.mesh = std::make_shared<const Mesh>(std::move(m).value());
  }

  void model(const YAML::Node& n, ModelConfig& m) {
    y_.map(n, "model");
    y_.keys(n, {"vocab", "hidden", "layers", "seq", "tied_embeddings", "init_seed"}, "model");
    if (n["vocab"]) m.vocab = y_.integer(n["vocab"], "model.vocab", 2, ModelLayout::kMaxDim);
    if (n["hidden"]) m.hidden = y_.integer(n["hidden"], "model.hidden", 1, ModelLayout::kMaxDim);
    if (n["layers"]) m.layers = y_.integer(n["layers"], "model.layers", 1, ModelLayout::kMaxLayers);
    if (n["seq"]) m.seq = y_.integer(n["seq"], "model.seq", 1, ModelLayout::kMaxDim);
    if (n["tied_embeddings"]) m.tied = y_.boolean(n["tied_embeddings"], "model.tied_embeddings");
    if (n["init_seed"])
      m.init_seed = static_cast<uint64_t>(y_.integer(n["init_seed"], "model.init_seed", 0, INT64_MAX));
  }

  void data(const YAML::Node& n, TrainingConfig& c) {
    y_.map(n, "data");
    y_.keys(n, {"source", "order", "seed"}, "data");
    if (n["source"] && y_.str(n["source"], "data.source") != "markov")
      y_.fail(n["source"], "the data source is markov");
    if (n["order"] && y_.integer(n["order"], "data.order", 1, 1) != 1)
      y_.fail(n["order"], "the Markov source has order 1");
    if (n["seed"]) c.data_seed = static_cast<uint64_t>(y_.integer(n["seed"], "data.seed", 0, INT64_MAX));
  }

  void strategy(const YAML::Node& n, TrainingScenario& s) {
    const std::string name = y_.str(n, "strategy");
    auto st = parse_strategy(name);
    if (!st) y_.fail(n, "unknown strategy '" + name + "' (expected " + strategy_names() + ")");
    s.config.strategy = *st;
    strategy_node_ = n;
  }

  DType dtype(const YAML::Node& n, const char* what) {
    auto d = parse_dtype(y_.str(n, what));
    if (!d || (*d != DType::f32 && *d != DType::bf16))
      y_.fail(n, std::string(what) + " is fp32 or bf16, not '" + n.Scalar() + "'");
    return *d;
  }

  void precision(const YAML::Node& n, Precision& p) {
    y_.map(n, "precision");
    y_.keys(n, {"param", "main", "grad", "exact"}, "precision");
    if (n["exact"]) p.exact = y_.boolean(n["exact"], "precision.exact");
    if (p.exact) p.param = DType::f32;  // exact mode defaults to fp32 model weights
    if (n["param"]) p.param = dtype(n["param"], "precision.param");
    if (n["main"]) p.main = dtype(n["main"], "precision.main");
    if (n["grad"]) p.grad = dtype(n["grad"], "precision.grad");
    if (p.main != DType::f32) y_.fail(n["main"], "main weights are fp32");
    if (p.exact && p.grad != DType::f32) y_.fail(n["grad"], "exact mode accumulates gradients in fp32");
  }

  void optimizer(const YAML::Node& n, OptimizerConfig& o) {
    y_.map(n, "optimizer");
    y_.keys(n, {"kind", "lr", "betas", "eps", "weight_decay", "clip_grad"}, "optimizer");
    if (n["kind"]) {
      const std::string k = y_.str(n["kind"], "optimizer.kind");
      if (k == "adam")
        o.kind = OptimizerConfig::Kind::adam;
      else if (k == "sgd")
        o.kind = OptimizerConfig::Kind::sgd;
      else
        y_.fail(n["kind"], "optimizer kind is adam or sgd, not '" + k + "'");
    }
    auto positive = [&](const char* key, double& out, bool allow_zero) {
      if (!n[key]) return;
      out = y_.real(n[key], key);
      if (!(out > 0 || (allow_zero && out == 0)) || !std::isfinite(out))
        y_.fail(n[key],
                std::string("optimizer.") + key + " must be " + (allow_zero ? "non-negative" : "positive"));
    };
    positive("lr", o.lr, false);
    positive("eps", o.eps, false);
    positive("weight_decay", o.weight_decay, true);
    positive("clip_grad", o.clip_grad, true);
    if (n["betas"]) {
      y_.seq(n["betas"], "optimizer.betas");
      if (n["betas"].size() != 2) y_.fail(n["betas"], "optimizer.betas has two values");
      o.beta1 = y_.real(n["betas"][0], "optimizer.betas");
      o.beta2 = y_.real(n["betas"][1], "optimizer.betas");
      if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
        y_.fail(n["betas"], "optimizer.betas lie in [0, 1)");
    }
  }

  void mutations(const YAML::Node& n, Mutations& m) {
    y_.seq(n, "mutations");
    for (const auto& item : n) {
      const std::string name = y_.str(item, "mutations");
      auto mu = parse_mutation(name);
      if (!mu) y_.fail(item, "unknown mutation '" + name + "' (see `shardcheck list`)");
      m.add(*mu);
      mutation_nodes_.emplace_back(*mu, item);
    }
  }

  void allocator(const YAML::Node& n, TrainingScenario& s) {
    if (n.IsMap()) {
      y_.keys(n, {"model", "reuse"}, "allocator");
      y_.require(n, "model", "allocator");
      if (n["reuse"]) {
        const auto reuse = parse_reuse(y_.str(n["reuse"], "allocator.reuse"));
        if (!reuse) y_.fail(n["reuse"], "allocator reuse is best_fit or earliest");
        s.reuse = *reuse;
      }
    }
    const YAML::Node model = n.IsMap() ? n["model"] : n;
    const std::string name = y_.str(model, "allocator");
    const auto allocator = parse_allocator(name);
    if (!allocator) y_.fail(model, "unknown allocator '" + name + "'");
    s.allocator = *allocator;
  }

  // Cross-field checks: the mesh fits the strategy, the model fits the pipeline, and every
  // mutation can change what this run does.
  void check(const YAML::Node& root, const TrainingScenario& s) {
    const Mesh& m = *s.mesh;
    const TrainingConfig& c = s.config;
    const bool two_d = is_two_dimensional(c.strategy);
    if (two_d && !m.find_axis("dp_outer"))
      y_.fail(strategy_node_,
              std::string(to_string(c.strategy)) + " needs a mesh with dp_outer and dp_inner");
    if (!two_d && m.find_axis("dp_outer"))
      y_.fail(strategy_node_, std::string(to_string(c.strategy)) +
                                  " runs on a 'dp' axis, not dp_outer/dp_inner (use " +
                                  two_dimensional_strategy_names() + ")");
    if (!two_d && !m.find_axis("dp")) {
      y_.fail(root["mesh"], std::string(to_string(c.strategy)) +
                                " needs a 'dp' axis in the mesh (dp: 1 for a single data-parallel rank)");
    }
    auto layout = ModelLayout::create(c.model, m.size_or_one("pp"), m.virtual_stages());
    if (!layout) y_.fail(root["model"], layout.error().message());
    if (const Status why = model_limits_exceeded(c, *layout, m); !why) y_.fail(root["model"], why.message());
    if (const Status why = reference_limit_exceeded(c, *layout, s.reference != "none"); !why)
      y_.fail(root["steps"], why.message());
    if (const Status why = judge_limit_exceeded(c, *layout, m.world_size()); !why)
      y_.fail(root["steps"], why.message());
    if (const Status why = wide_mesh_limit_exceeded(c, m.world_size()); !why)
      y_.fail(root["mesh"], why.message());
    const int pp = m.size_or_one("pp"), vpp = m.virtual_stages();
    if (vpp > 1 && c.microbatches % pp != 0) {
      y_.fail(
          root["microbatches"] ? root["microbatches"] : root,
          "interleaved pipelining needs microbatches to be a multiple of pp (" + std::to_string(pp) + ")");
    }
    if (const int64_t dp = m.world_size() / pp;
        c.precision.exact && dp * c.microbatches > TrainingLimits::kMaxExactContributions) {
      y_.fail(root["microbatches"] ? root["microbatches"] : root["mesh"],
              "exact mode keeps sums exact only while data-parallel ranks x microbatches is at most " +
                  std::to_string(TrainingLimits::kMaxExactContributions) +
                  " (this file: " + std::to_string(dp) + " x " + std::to_string(c.microbatches) + " = " +
                  std::to_string(dp * c.microbatches) + ")");
    }
    // A mutation that cannot change this run would let it report clean for a bug it never had.
    for (const auto& [mu, node] : mutation_nodes_) {
      if (const Status why = mutation_unmet_need(mu, c, m); !why) y_.fail(node, why.message());
    }
  }

  const YamlReader& y_;
  YAML::Node strategy_node_;
  std::vector<std::pair<Mutation, YAML::Node>> mutation_nodes_;  // each entry of `mutations:`
};

}  // namespace

Status training_limits_exceeded(const TrainingConfig& c, const Mesh& mesh, bool with_reference) {
  auto layout = ModelLayout::create(c.model, mesh.size_or_one("pp"), mesh.virtual_stages());
  if (!layout) return fail(layout.error().message());
  if (mesh.world_size() > TrainingLimits::kMaxRanks)
    return fail("more than " + std::to_string(TrainingLimits::kMaxRanks) + " ranks");
  if (c.steps < 1 || c.steps > TrainingLimits::kMaxSteps)
    return fail("steps must be between 1 and " + std::to_string(TrainingLimits::kMaxSteps));
  if (auto why = model_limits_exceeded(c, *layout, mesh); !why) return why;
  if (auto why = reference_limit_exceeded(c, *layout, with_reference); !why) return why;
  if (auto why = judge_limit_exceeded(c, *layout, mesh.world_size()); !why) return why;
  return wide_mesh_limit_exceeded(c, mesh.world_size());
}

namespace {

Expected<TrainingScenario> parse(YamlReader& y, const YAML::Node& root) {
  return read_training_scenario(y, root);
}

}  // namespace

TrainingScenario read_training_scenario(const YamlReader& y, const YAML::Node& root) {
  if (!root["kind"] || y.str(root["kind"], "kind") != "training")
    y.fail(root["kind"] ? root["kind"] : root, "expected 'kind: training'");
  return Parser(y).scenario(root);
}

Expected<TrainingScenario> load_training_scenario(const std::string& path) {
  return YamlReader::parse_file<TrainingScenario>(path, std::nullopt, parse);
}

Expected<TrainingScenario> parse_training_scenario(const std::string& text, const std::string& path) {
  return YamlReader::parse_file<TrainingScenario>(path, text, parse);
}

}  // namespace shardcheck::core
