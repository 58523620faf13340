// The NCCL backend on several GPUs, one rank per GPU, in one process:
//  1. per-step losses of every strategy and DistOpt under NCCL against the device-local
//     communicator (all ranks on GPU 0, members added in rank order) and the simulator, in
//     exact mode (must be bitwise equal), fp32 and bf16 mixed precision. The tolerance is
//     derived, not chosen: the same runs on the device-local communicator with members added
//     in descending rank order show how far reduction order alone moves the losses;
//  2. bus bandwidth (nccl-tests' definition) of every collective size each strategy issues
//     in a step of TinyLM (hidden 1024, 8 layers), timed on its own;
//  3. step time per strategy against DistOpt with overlapped communication (the median of 7
//     steps after 2 warm-up steps, each ending with the device synchronized, with the fastest
//     and slowest), the same step with communication left out, which gives the communication
//     time left exposed and how much of it overlaps compute, and the step without overlap.
//   gpu_multi [--out DIR] [--steps N] [--modes exact,fp32,bf16] [--sections losses,steps]
//             [--strategies distopt,optim,...]   (writes gpu_multi.json)
// --sections picks section 1 ("losses") and/or sections 2 and 3 ("steps"), so that one
// machine session can be split over several calls; --strategies limits either to some.
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "bench/gpu/support.hpp"
#include "core/base/atomic_file.hpp"
#include "gpu/check.hpp"
#include "gpu/nccl_check.hpp"
#include "run/training_run.hpp"

using namespace shardcheck;
using nlohmann::ordered_json;

namespace {

struct Mode {
  const char* name;
  core::DType param;
  bool exact;
};
constexpr Mode kModes[] = {
    {"exact", core::DType::f32, true}, {"fp32", core::DType::f32, false}, {"bf16", core::DType::bf16, false}};

core::TrainingConfig small_config(core::Strategy s, const Mode& m, int steps) {
  core::TrainingConfig c = bench::tinylm_config(s);
  c.model = {256, 128, 2, 64, true, 1234};
  c.precision.param = m.param;
  c.precision.exact = m.exact;
  c.steps = steps;
  return c;
}

std::vector<double> on_simulator(core::TrainingConfig c, std::vector<core::Axis> axes) {
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::create(axes).value());
  run::TrainingState st;
  st.scenario.mesh = mesh;
  st.scenario.reference = "none";
  st.setup = core::make_training_setup(c, mesh).value();
  sim::Options so;
  so.ranks = mesh->world_size();
  return run::run_training(st, so).losses;
}

int64_t dtype_size(core::DType t) { return core::dtype_bytes(t); }

// nccl-tests: algbw = S / t with S the larger of the two buffers (all-gather: output,
// reduce-scatter: input); busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for all-gather
// and reduce-scatter, 1 for broadcast.
double size_bytes(const gpu::CollectiveSample& c) {
  return static_cast<double>(std::max(c.in_numel, c.out_numel) * dtype_size(c.dtype));
}
double bus_factor(core::CollectiveKind k, int n) {
  switch (k) {
    case core::CollectiveKind::all_reduce:
      return 2.0 * (n - 1) / n;
    case core::CollectiveKind::all_gather:
    case core::CollectiveKind::reduce_scatter:
      return static_cast<double>(n - 1) / n;
    case core::CollectiveKind::broadcast:
    case core::CollectiveKind::reduce:
    case core::CollectiveKind::all_to_all:
    case core::CollectiveKind::barrier:
      return 1.0;
  }
  return 1.0;
}

// Communicators and streams over the first n GPUs, made once per n.
struct Clique {
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
};
Clique& clique(int n) {
  static std::map<int, Clique> cliques;
  Clique& c = cliques[n];
  if (c.comms.empty()) {
    std::vector<int> devs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) devs[i] = i;
    c.comms.resize(n);
    c.streams.resize(n);
    SC_NCCL_CHECK(ncclCommInitAll(c.comms.data(), n, devs.data()));
    for (int d = 0; d < n; ++d) {
      SC_CUDA_CHECK(cudaSetDevice(d));
      SC_CUDA_CHECK(cudaStreamCreateWithFlags(&c.streams[d], cudaStreamNonBlocking));
    }
    SC_CUDA_CHECK(cudaSetDevice(0));
  }
  return c;
}

// One collective of this size on the first `c.members` GPUs, alone: seconds per call, the
// slowest GPU's mean over 20 calls after 5 warm-ups (one thread drives every GPU with NCCL
// group calls, as nccl-tests does in its single-process mode).
double time_alone(const gpu::CollectiveSample& c) {
  const int n = c.members;
  Clique& q = clique(n);
  const size_t in_bytes = static_cast<size_t>(c.in_numel * dtype_size(c.dtype)),
               out_bytes = static_cast<size_t>(c.out_numel * dtype_size(c.dtype));
  std::vector<void*> in(n), out(n);
  std::vector<cudaEvent_t> start(n), stop(n);
  for (int d = 0; d < n; ++d) {
    SC_CUDA_CHECK(cudaSetDevice(d));
    SC_CUDA_CHECK(cudaMalloc(&in[d], std::max<size_t>(in_bytes, 1)));
    SC_CUDA_CHECK(cudaMalloc(&out[d], std::max<size_t>(out_bytes, 1)));
    SC_CUDA_CHECK(cudaMemset(in[d], 0, in_bytes));  // zeros: finite, and bandwidth does not depend on values
    SC_CUDA_CHECK(cudaEventCreate(&start[d]));
    SC_CUDA_CHECK(cudaEventCreate(&stop[d]));
  }
  const ncclDataType_t t = gpu::nccl_type(c.dtype);
  const ncclRedOp_t op = c.reduce == core::ReduceOp::avg ? ncclAvg : ncclSum;
  auto issue = [&] {
    SC_NCCL_CHECK(ncclGroupStart());
    for (int d = 0; d < n; ++d) {
      ncclComm_t comm = q.comms[d];
      cudaStream_t s = q.streams[d];
      switch (c.kind) {
        case core::CollectiveKind::all_gather:
          SC_NCCL_CHECK(ncclAllGather(in[d], out[d], c.in_numel, t, comm, s));
          break;
        case core::CollectiveKind::reduce_scatter:
          SC_NCCL_CHECK(ncclReduceScatter(in[d], out[d], c.out_numel, t, op, comm, s));
          break;
        case core::CollectiveKind::all_reduce:
          SC_NCCL_CHECK(ncclAllReduce(in[d], out[d], c.out_numel, t, op, comm, s));
          break;
        case core::CollectiveKind::broadcast:
          SC_NCCL_CHECK(ncclBroadcast(in[d], out[d], c.out_numel, t, 0, comm, s));
          break;
        case core::CollectiveKind::reduce:
        case core::CollectiveKind::all_to_all:
        case core::CollectiveKind::barrier:
          break;  // not measured
      }
    }
    SC_NCCL_CHECK(ncclGroupEnd());
  };
  constexpr int kWarm = 5, kIters = 20;
  for (int i = 0; i < kWarm; ++i) issue();
  for (int d = 0; d < n; ++d) {
    SC_CUDA_CHECK(cudaSetDevice(d));
    SC_CUDA_CHECK(cudaEventRecord(start[d], q.streams[d]));
  }
  for (int i = 0; i < kIters; ++i) issue();
  double worst = 0;
  for (int d = 0; d < n; ++d) {
    SC_CUDA_CHECK(cudaSetDevice(d));
    SC_CUDA_CHECK(cudaEventRecord(stop[d], q.streams[d]));
  }
  for (int d = 0; d < n; ++d) {
    SC_CUDA_CHECK(cudaEventSynchronize(stop[d]));
    float ms = 0;
    SC_CUDA_CHECK(cudaEventElapsedTime(&ms, start[d], stop[d]));
    worst = std::max(worst, ms * 1e-3 / kIters);
  }
  for (int d = 0; d < n; ++d) {
    SC_CUDA_CHECK(cudaSetDevice(d));
    SC_CUDA_CHECK(cudaFree(in[d]));
    SC_CUDA_CHECK(cudaFree(out[d]));
    SC_CUDA_CHECK(cudaEventDestroy(start[d]));
    SC_CUDA_CHECK(cudaEventDestroy(stop[d]));
  }
  SC_CUDA_CHECK(cudaSetDevice(0));
  return worst;
}

using Key = std::tuple<int, int, int, int64_t, int64_t, int,
                       std::string>;  // kind, dtype, reduce, in, out, members, group
Key key_of(const gpu::CollectiveSample& c) {
  return {static_cast<int>(c.kind),
          static_cast<int>(c.dtype),
          static_cast<int>(c.reduce),
          c.in_numel,
          c.out_numel,
          c.members,
          c.group};
}

// The collectives rank 0 issues in one step (steady state): those of a 3-step run less those
// of a 1-step run, halved.
std::vector<std::pair<gpu::CollectiveSample, int>> per_step_collectives(const core::TrainingConfig& c,
                                                                        const std::vector<core::Axis>& axes) {
  gpu::GpuOptions o;
  o.comm = gpu::CommMode::nccl;
  o.skip_communication = true;
  o.record_collectives = true;
  std::map<Key, std::pair<gpu::CollectiveSample, int>> counts;
  for (const auto& s : bench::train(c, axes, 3, o).collectives) {
    auto& e = counts[key_of(s)];
    e.first = s;
    e.second++;
  }
  for (const auto& s : bench::train(c, axes, 1, o).collectives) counts[key_of(s)].second--;
  std::vector<std::pair<gpu::CollectiveSample, int>> out;
  for (auto& [k, v] : counts) {
    if (v.second > 0) out.emplace_back(v.first, v.second / 2);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach a log file even if the run is cut short
  std::string out = std::getenv("OUT") ? std::getenv("OUT") : "out/gpu";
  int steps = 100;
  std::string modes = "exact,fp32,bf16", sections = "losses,steps", strategies;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--modes") && i + 1 < argc)
      modes = argv[++i];  // which precision modes the loss section runs
    if (!std::strcmp(argv[i], "--sections") && i + 1 < argc) sections = argv[++i];
    if (!std::strcmp(argv[i], "--strategies") && i + 1 < argc) strategies = argv[++i];
  }
  auto listed = [](const std::string& list, std::string_view item) {
    return ("," + list + ",").find("," + std::string(item) + ",") != std::string::npos;
  };
  auto wanted = [&](int mi) { return listed(modes, kModes[mi].name); };
  auto strategy_wanted = [&](core::Strategy s) {
    return strategies.empty() || s == core::Strategy::distopt || listed(strategies, core::to_string(s));
  };
  const int devices = gpu::usable_devices();
  const int n = std::min(devices, 8) & ~1;
  if (n < 2) {
    std::fprintf(stderr, "gpu_multi: needs 2 or more GPUs, found %d\n", devices);
    return 2;
  }
  int version = 0;
  SC_NCCL_CHECK(ncclGetVersion(&version));
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  ordered_json j;
  cudaDeviceProp prop;
  SC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  j["device"] = prop.name;
  j["gpus"] = n;
  j["nccl_version"] = version;
  j["NCCL_NVLS_ENABLE"] = nvls ? nvls : "(unset)";
  std::printf("%d x %s, NCCL %d, NCCL_NVLS_ENABLE=%s\n", n, prop.name, version, nvls ? nvls : "(unset)");

  // 1. Losses. The simulator's runs (fewer steps: its kernels are CPU loops) go in parallel
  // threads while the GPUs train.
  const int sim_steps = std::min(steps, 10);
  std::map<std::pair<int, int>, std::future<std::vector<double>>> sim;
  const bool do_losses = listed(sections, "losses"), do_steps = listed(sections, "steps");
  for (int mi = 0; mi < 3 && do_losses; ++mi) {
    if (!wanted(mi)) continue;
    for (size_t si = 0; si < std::size(bench::kAllStrategies); ++si) {
      const core::Strategy s = bench::kAllStrategies[si];
      if (!strategy_wanted(s)) continue;
      sim[{mi, static_cast<int>(si)}] = std::async(
          std::launch::async, on_simulator, small_config(s, kModes[mi], sim_steps), bench::mesh_for(s, n));
    }
  }
  ordered_json losses = ordered_json::array();
  bool all_within = true;
  if (do_losses)
    std::printf(
        "\nlosses over %d steps (simulator: first %d), TinyLM vocab 256 hidden 128 layers 2 seq 64, %d "
        "ranks\n",
        steps, sim_steps, n);
  if (do_losses)
    std::printf("%-19s %-5s %-9s %-11s %-11s %-11s %-11s %s\n", "strategy", "mode", "step0 eq", "nccl-local",
                "order only", "tolerance", "nccl-sim", "verdict");
  for (int mi = 0; mi < 3 && do_losses; ++mi) {
    if (!wanted(mi)) continue;
    const Mode& m = kModes[mi];
    for (size_t si = 0; si < std::size(bench::kAllStrategies); ++si) {
      const core::Strategy s = bench::kAllStrategies[si];
      if (!strategy_wanted(s)) continue;
      const auto axes = bench::mesh_for(s, n);
      const core::TrainingConfig c = small_config(s, m, steps);
      gpu::GpuOptions o;
      o.comm = gpu::CommMode::nccl;
      const std::vector<double> nccl = bench::train(c, axes, steps, o).losses;
      o.comm = gpu::CommMode::local;
      const std::vector<double> local = bench::train(c, axes, steps, o).losses;
      o.reverse_reduction = true;
      const std::vector<double> reversed = bench::train(c, axes, steps, o).losses;
      const std::vector<double> on_sim = sim[{mi, static_cast<int>(si)}].get();
      const std::vector<double> local_head(local.begin(),
                                           local.begin() + std::min<size_t>(local.size(), on_sim.size()));
      const double d_local = bench::max_abs_delta(nccl, local),
                   d_order = bench::max_abs_delta(local, reversed);
      const double d_sim = bench::max_abs_delta(nccl, on_sim),
                   d_kernels = bench::max_abs_delta(local_head, on_sim);
      // Exact mode: grid-rounded contributions sum exactly in any order, so NCCL must equal
      // the device-local run bit for bit. Otherwise NCCL's ring and tree orders are other
      // reduction orders: their differences may be a few times those of one reordering.
      const double tolerance = m.exact ? 0.0 : 4.0 * d_order;
      const bool step0 = !nccl.empty() && !local.empty() && nccl[0] == local[0];
      const bool within = step0 && d_local <= tolerance && (!m.exact || d_sim <= d_kernels);
      all_within &= within;
      std::printf("%-19s %-5s %-9s %-11.3g %-11.3g %-11.3g %-11.3g %s\n",
                  std::string(core::to_string(s)).c_str(), m.name, step0 ? "yes" : "NO", d_local, d_order,
                  tolerance, d_sim, within ? "within" : "OUTSIDE");
      losses.push_back({{"strategy", core::to_string(s)},
                        {"mode", m.name},
                        {"ranks", n},
                        {"steps", steps},
                        {"step0_bitwise_equal", step0},
                        {"max_abs_nccl_vs_local", d_local},
                        {"max_abs_local_vs_reversed_order", d_order},
                        {"tolerance", tolerance},
                        {"max_abs_nccl_vs_sim", d_sim},
                        {"max_abs_local_vs_sim", d_kernels},
                        {"sim_steps", on_sim.size()},
                        {"within", within},
                        {"final_loss_nccl", nccl.back()},
                        {"final_loss_local", local.back()}});
    }
  }
  j["losses"] = losses;
  auto save = [&] {
    if (auto made = core::make_dirs(out); !made)
      std::fprintf(stderr, "gpu_multi: %s\n", made.message().c_str());
    if (auto w = core::write_file_atomic(out + "/gpu_multi.json", j.dump(2)); !w)
      std::fprintf(stderr, "gpu_multi: %s\n", w.message().c_str());
  };
  save();  // each section is kept as soon as it is done

  // 2 and 3. Collective sizes, their bus bandwidth alone, step time, exposed communication.
  ordered_json bw = ordered_json::array(), st = ordered_json::array();
  double distopt_s = 0;
  if (do_steps)
    std::printf(
        "\nTinyLM vocab 8192 hidden 1024 layers 8 seq 1024, micro-batch 2 x 4, bf16, %d ranks on %d GPUs "
        "(NCCL)\n",
        n, n);
  for (core::Strategy s : bench::kAllStrategies) {
    if (!do_steps || !strategy_wanted(s)) continue;
    // Overlapped as FSDP2 and Megatron run it; the same program without overlap is timed too.
    core::TrainingConfig c = bench::tinylm_config(s);
    c.overlap = true;
    const auto axes = bench::mesh_for(s, n);
    const std::string name(core::to_string(s));
    double comm_alone = 0;
    std::printf(
        "\n%s: collectives per step on rank 0 (a group of 1 member is a local copy: busbw 0)\n  %-15s %-5s "
        "%-9s %7s %12s %6s %10s %10s %10s\n",
        name.c_str(), "kind", "dtype", "group", "members", "bytes", "count", "us each", "algbw GB/s",
        "busbw GB/s");
    for (const auto& [c0, count] : per_step_collectives(c, axes)) {
      const double t = time_alone(c0), bytes = size_bytes(c0);
      const double algbw = bytes / t / 1e9, busbw = algbw * bus_factor(c0.kind, c0.members);
      comm_alone += count * t;
      std::printf("  %-15s %-5s %-9s %7d %12.0f %6d %10.1f %10.1f %10.1f\n",
                  std::string(core::to_string(c0.kind)).c_str(),
                  std::string(core::to_string(c0.dtype)).c_str(), c0.group.c_str(), c0.members, bytes, count,
                  1e6 * t, algbw, busbw);
      bw.push_back({{"strategy", name},
                    {"kind", core::to_string(c0.kind)},
                    {"dtype", core::to_string(c0.dtype)},
                    {"group", c0.group},
                    {"members", c0.members},
                    {"bytes", bytes},
                    {"per_step", count},
                    {"seconds", t},
                    {"algbw_gbs", algbw},
                    {"busbw_gbs", busbw}});
    }
    gpu::GpuOptions o;
    o.comm = gpu::CommMode::nccl;
    const bench::StepTime with = bench::step_time(c, axes, o);
    o.skip_communication = true;
    const bench::StepTime without = bench::step_time(c, axes, o);
    o.skip_communication = false;
    core::TrainingConfig plain = c;
    plain.overlap = false;
    const bench::StepTime serial = bench::step_time(plain, axes, o);
    const double full = with.median, compute = without.median;
    if (s == core::Strategy::distopt) distopt_s = full;
    const double exposed = std::max(0.0, full - compute);
    const double overlap = comm_alone > 0 ? std::clamp(1.0 - exposed / comm_alone, 0.0, 1.0) : 1.0;
    std::printf(
        "  step %.2f ms [%.2f, %.2f] (%.3f x DistOpt); without communication %.2f ms [%.2f, %.2f]; "
        "communication alone %.2f ms; exposed %.2f ms; "
        "overlapped %.0f%%; without overlap %.2f ms [%.2f, %.2f]\n",
        1e3 * full, 1e3 * with.min, 1e3 * with.max, full / distopt_s, 1e3 * compute, 1e3 * without.min,
        1e3 * without.max, 1e3 * comm_alone, 1e3 * exposed, 100 * overlap, 1e3 * serial.median,
        1e3 * serial.min, 1e3 * serial.max);
    j["bus_bandwidth"] = bw;
    st.push_back({{"strategy", name},
                  {"ranks", n},
                  {"ms_per_step", 1e3 * full},
                  {"ms_per_step_min", 1e3 * with.min},
                  {"ms_per_step_max", 1e3 * with.max},
                  {"ratio_to_distopt", full / distopt_s},
                  {"ms_without_communication", 1e3 * compute},
                  {"ms_without_communication_min", 1e3 * without.min},
                  {"ms_without_communication_max", 1e3 * without.max},
                  {"ms_communication_alone", 1e3 * comm_alone},
                  {"ms_exposed", 1e3 * exposed},
                  {"overlap", overlap},
                  {"ms_per_step_no_overlap", 1e3 * serial.median},
                  {"ms_per_step_no_overlap_min", 1e3 * serial.min},
                  {"ms_per_step_no_overlap_max", 1e3 * serial.max}});
    j["step_time"] = st;
    save();
  }
  j["bus_bandwidth"] = bw;
  j["step_time"] = st;
  j["all_losses_within_tolerance"] = all_within;

  save();
  std::printf("\nresults: %s/gpu_multi.json; every loss comparison within tolerance: %s\n", out.c_str(),
              all_within ? "yes" : "NO");
  return all_within ? 0 : 1;
}
