// Measurements of the CUDA backend on one GPU, all in one process so every ratio compares
// runs made side by side: the dense bf16 GEMM peak and copy bandwidth of this card; TinyLM
// (hidden 1024, 8 layers, bf16, 4 ranks on the device-local communicator) step time of each
// strategy and of DistOpt; GEMM throughput inside a step against the same GEMM shapes run
// alone; model FLOPs utilisation; loss agreement with DistOpt over 500 steps and with the
// simulator in fp32; and the one-rank step time that the PyTorch peer is compared with.
//   gpu_measure [--out DIR] [--quick] [--sections one_rank,steps,agreement]   (writes gpu_measure.json)
// --sections runs some of the three parts (the card's GEMM peak and copy bandwidth are always
// measured: MFU needs the peak), so `make gpu-bench` can repeat the timed parts three times
// and run the long agreement part once.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/gpu/support.hpp"
#include "core/base/atomic_file.hpp"
#include "core/base/rng.hpp"
#include "core/train/trainer.hpp"
#include "gpu/blas.hpp"
#include "gpu/check.hpp"
#include "gpu/runtime.hpp"
#include "run/training_run.hpp"

using namespace shardcheck;
using bench::max_abs_delta;
using bench::mesh_for;
using nlohmann::ordered_json;

namespace {

// A GEMM of one shape on its own: median milliseconds of 20 launches after 5 warm-ups.
double plain_gemm_ms(gpu::Blas& blas, const core::kernel::Gemm& g, core::DType ta, core::DType tb,
                     core::DType tc) {
  const int64_t na = g.m * g.k, nb = g.k * g.n, nc = g.m * g.n;
  std::vector<void*> bufs(3);
  const int64_t sizes[] = {na * core::dtype_bytes(ta), nb * core::dtype_bytes(tb),
                           nc * core::dtype_bytes(tc)};
  core::Rng rng(99);
  for (int i = 0; i < 3; ++i) {
    SC_CUDA_CHECK(cudaMalloc(&bufs[i], static_cast<size_t>(sizes[i])));
    std::vector<uint16_t> host(static_cast<size_t>(sizes[i]) / 2);
    for (auto& h : host) h = core::to_bf16(static_cast<float>(0.5 * rng.normal()));  // never zeros
    SC_CUDA_CHECK(cudaMemcpy(bufs[i], host.data(), static_cast<size_t>(sizes[i]), cudaMemcpyHostToDevice));
  }
  cudaStream_t s;
  SC_CUDA_CHECK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  SC_CUDA_CHECK(cudaEventCreate(&e0));
  SC_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> times;
  for (int i = 0; i < 25; ++i) {
    SC_CUDA_CHECK(cudaEventRecord(e0, s));
    blas.gemm({bufs[0], na, ta}, {bufs[1], nb, tb}, {bufs[2], nc, tc}, g, s);
    SC_CUDA_CHECK(cudaEventRecord(e1, s));
    SC_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    SC_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 5) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  for (void* p : bufs) SC_CUDA_CHECK(cudaFree(p));
  SC_CUDA_CHECK(cudaStreamDestroy(s));
  return times[times.size() / 2];
}

double copy_bandwidth_gbs() {
  const size_t bytes = size_t{2} << 30;
  void *a, *b;
  SC_CUDA_CHECK(cudaMalloc(&a, bytes));
  SC_CUDA_CHECK(cudaMalloc(&b, bytes));
  SC_CUDA_CHECK(cudaMemset(a, 0x3c, bytes));
  cudaEvent_t e0, e1;
  SC_CUDA_CHECK(cudaEventCreate(&e0));
  SC_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> times;
  for (int i = 0; i < 8; ++i) {
    SC_CUDA_CHECK(cudaEventRecord(e0));
    SC_CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    SC_CUDA_CHECK(cudaEventRecord(e1));
    SC_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms;
    SC_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  SC_CUDA_CHECK(cudaFree(a));
  SC_CUDA_CHECK(cudaFree(b));
  return 2.0 * bytes / (times[times.size() / 2] * 1e-3) / 1e9;  // bytes read plus written
}

// Model FLOPs of one step: 6 per token per matrix parameter (forward 2, backward 4).
double model_flops(const core::TrainingConfig& c, int dp) {
  const double H = static_cast<double>(c.model.hidden), L = static_cast<double>(c.model.layers),
               V = static_cast<double>(c.model.vocab);
  const double tokens = static_cast<double>(dp) * c.microbatches * c.micro_batch_size * c.model.seq;
  return 6.0 * tokens * (L * 8.0 * H * H + V * H);
}

// One rank: the figures the PyTorch peer is compared with.
void one_rank_section(ordered_json& j, gpu::Blas& blas, double peak) {
  // One rank: the number the PyTorch peer is compared with; where its time goes (device time
  // per kernel, host time issuing it); GEMMs inside the step against the same shapes alone.
  const core::TrainingConfig one = bench::tinylm_config(core::Strategy::no_shard);
  const bench::StepTime one_t = bench::step_time(one, {{"dp", 1}}, {});
  const double one_s = one_t.median;
  gpu::GpuOptions profiled;
  profiled.profile_kernels = true;
  const bench::Timed prof = bench::train(one, {{"dp", 1}}, 2, profiled);
  const gpu::KernelProfile& kp = prof.profile;
  double plain_ms = 0;
  for (const auto& sh : kp.shapes) plain_ms += sh.launches * plain_gemm_ms(blas, sh.gemm, sh.a, sh.b, sh.c);
  const double inside = kp.gemm_flops / (kp.gemm_milliseconds * 1e-3) / 1e12,
               alone = kp.gemm_flops / (plain_ms * 1e-3) / 1e12;
  double device_ms = 0, host_ms = 0;
  for (const auto& k : kp.kernels) device_ms += k.milliseconds, host_ms += k.host_milliseconds;
  j["one_rank"] = {{"ms_per_step", 1e3 * one_s},
                   {"ms_per_step_min", 1e3 * one_t.min},
                   {"ms_per_step_max", 1e3 * one_t.max},
                   {"model_flops_per_step", model_flops(one, 1)},
                   {"mfu", model_flops(one, 1) / one_s / (peak * 1e12)},
                   {"gemm_tflops_inside_step", inside},
                   {"gemm_tflops_same_shapes_alone", alone},
                   {"gemm_launches", kp.gemm_launches},
                   {"gemm_shapes", kp.shapes.size()},
                   {"gemm_share_of_step", kp.gemm_milliseconds * 1e-3 / 2 / one_s},
                   {"kernel_device_ms_per_step", device_ms / 2},
                   {"launch_host_ms_per_step", host_ms / 2}};
  std::printf(
      "\none rank (no_shard): %.2f ms/step, MFU %.1f%%\nGEMMs inside the step: %.1f TFLOP/s; the same %zu "
      "shapes alone: %.1f TFLOP/s\n",
      1e3 * one_s, 100 * j["one_rank"]["mfu"].get<double>(), inside, kp.shapes.size(), alone);
  std::printf("per step: kernels %.2f ms on the device, %.2f ms of host time issuing them (profiled run)\n",
              device_ms / 2, host_ms / 2);
  std::printf("  %-28s %8s %12s %12s\n", "kernel", "launches", "device ms", "host ms");
  ordered_json kernels = ordered_json::array();
  for (const auto& k : kp.kernels) {
    if (kernels.size() < 16)
      std::printf("  %-28s %8lld %12.3f %12.3f\n", k.name.c_str(), static_cast<long long>(k.launches / 2),
                  k.milliseconds / 2, k.host_milliseconds / 2);
    kernels.push_back({{"name", k.name},
                       {"launches_per_step", k.launches / 2},
                       {"device_ms_per_step", k.milliseconds / 2},
                       {"host_ms_per_step", k.host_milliseconds / 2}});
  }
  j["one_rank"]["kernels"] = kernels;
}

// Step time of every strategy, 4 ranks on the device-local communicator, without and with
// overlapped communication (TrainingConfig::overlap).
void steps_section(ordered_json& j, double peak, bool quick) {
  const auto& all = bench::kAllStrategies;
  ordered_json steps = ordered_json::array();
  double distopt_s = 0;
  std::printf("\n%-20s %12s %10s %8s %16s\n", "strategy (4 ranks)", "ms/step", "vs distopt", "MFU",
              "overlap: ms/step");
  for (core::Strategy s : all) {
    if (quick && s != core::Strategy::distopt && s != core::Strategy::optim_grads_params) continue;
    core::TrainingConfig c = bench::tinylm_config(s);
    const double sec = bench::step_seconds(c, mesh_for(s, 4), {});
    c.overlap = true;
    const double overlapped = bench::step_seconds(c, mesh_for(s, 4), {});
    if (s == core::Strategy::distopt) distopt_s = sec;
    const double mfu = model_flops(c, 4) / sec / (peak * 1e12);
    std::printf("%-20s %12.2f %10.3f %7.1f%% %16.2f\n", std::string(core::to_string(s)).c_str(), 1e3 * sec,
                sec / distopt_s, 100 * mfu, 1e3 * overlapped);
    steps.push_back({{"strategy", core::to_string(s)},
                     {"ms_per_step", 1e3 * sec},
                     {"ratio_to_distopt", sec / distopt_s},
                     {"mfu", mfu},
                     {"ms_per_step_overlap", 1e3 * overlapped}});
  }
  j["tinylm"] = {{"vocab", 8192},         {"hidden", 1024},    {"layers", 8}, {"seq", 1024},
                 {"micro_batch_size", 2}, {"microbatches", 4}, {"ranks", 4}};
  j["step_time"] = steps;
}

// Loss agreement with DistOpt and with the simulator.
void agreement_section(ordered_json& j, bool quick) {
  const auto& all = bench::kAllStrategies;
  // Loss agreement with DistOpt over 500 steps (a smaller TinyLM), mixed precision and exact.
  ordered_json agree = ordered_json::array();
  for (bool exact : {false, true}) {
    core::TrainingConfig base = bench::tinylm_config(core::Strategy::distopt);
    base.model = {512, 256, 4, 128, true, 1234};
    base.precision.exact = exact;
    if (exact) base.precision.param = core::DType::f32;
    const int n = quick ? 50 : 500;
    const std::vector<double> ref = bench::train(base, {{"dp", 4}}, n, {}).losses;
    for (core::Strategy s : all) {
      if (s == core::Strategy::distopt || (quick && s != core::Strategy::optim_grads_params)) continue;
      core::TrainingConfig c = base;
      c.strategy = s;
      const std::vector<double> l = bench::train(c, mesh_for(s, 4), n, {}).losses;
      const double d = max_abs_delta(l, ref);
      std::printf("%-20s %s %d steps: max |delta loss| vs DistOpt = %.3g\n",
                  std::string(core::to_string(s)).c_str(), exact ? "exact" : "bf16 ", n, d);
      agree.push_back({{"strategy", core::to_string(s)},
                       {"exact", exact},
                       {"steps", n},
                       {"max_abs_delta_loss", d},
                       {"final_loss", l.back()},
                       {"distopt_final_loss", ref.back()}});
    }
  }
  j["against_distopt"] = agree;

  // Against the simulator in fp32 (not exact): the same TinyLM, GPU kernels vs CPU kernels.
  core::TrainingConfig f32 = bench::tinylm_config(core::Strategy::optim);
  f32.model = {64, 64, 2, 16, true, 1234};
  f32.precision.param = core::DType::f32;
  f32.steps = 12;
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::data_parallel(2));
  run::TrainingState st;
  st.scenario.mesh = mesh;
  st.scenario.reference = "none";
  st.setup = core::make_training_setup(f32, mesh).value();
  sim::Options so;
  so.ranks = 2;
  const run::TrainingRun on_sim = run::run_training(st, so);
  const std::vector<double> on_gpu = bench::train(f32, {{"dp", 2}}, 12, {}).losses;
  const double dsim = max_abs_delta(on_gpu, on_sim.losses);
  std::printf("optim fp32, 12 steps: max |delta loss| GPU vs simulator = %.3g\n", dsim);
  j["against_simulator_fp32"] = {{"strategy", "optim"}, {"steps", 12}, {"max_abs_delta_loss", dsim}};
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach a log file even if the run is cut short
  std::string out = std::getenv("OUT") ? std::getenv("OUT") : "out/gpu";
  bool quick = false;
  std::string sections = "one_rank,steps,agreement";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--sections") && i + 1 < argc) sections = argv[++i];
  }
  const auto listed = [&](const char* name) {
    return ("," + sections + ",").find(std::string(",") + name + ",") != std::string::npos;
  };
  if (gpu::usable_devices() == 0) {
    std::fprintf(stderr, "gpu_measure: no CUDA device\n");
    return 2;
  }
  ordered_json j;
  cudaDeviceProp prop;
  SC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  j["device"] = prop.name;
  j["multiprocessors"] = prop.multiProcessorCount;
  j["sections"] = sections;
  j["quick"] = quick;
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // The card's ceilings, measured here.
  gpu::Blas blas;
  core::kernel::Gemm big;
  big.m = big.n = big.k = 8192;
  const double peak_ms = plain_gemm_ms(blas, big, core::DType::bf16, core::DType::bf16, core::DType::bf16);
  const double peak = 2.0 * 8192.0 * 8192 * 8192 / (peak_ms * 1e-3) / 1e12;
  j["bf16_gemm_8192_tflops"] = peak;
  j["copy_gbs"] = copy_bandwidth_gbs();
  std::printf("dense bf16 GEMM 8192^3: %.1f TFLOP/s; device copy %.0f GB/s\n", peak,
              j["copy_gbs"].get<double>());
  auto save = [&] {
    if (auto made = core::make_dirs(out); !made)
      std::fprintf(stderr, "gpu_measure: %s\n", made.message().c_str());
    (void)core::write_file_atomic(out + "/gpu_measure.json", j.dump(2));
  };

  if (listed("one_rank")) one_rank_section(j, blas, peak);
  save();
  if (listed("steps")) steps_section(j, peak, quick);
  save();
  if (listed("agreement")) agreement_section(j, quick);
  save();
  std::printf("\nresults: %s/gpu_measure.json\n", out.c_str());
  return 0;
}
