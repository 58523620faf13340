// A hand-built report for the reports/ tests: four scenarios holding one finding of every
// detail type (a race with its timeline, a deadlock cycle and chain, two collective
// mismatches, a norm miscount, four element findings) and one compare result.
//   const reports::Report r = sample_report();
#pragma once

#include <cmath>

#include "reports/report_model.hpp"

namespace shardcheck::testing {

inline core::TraceLog sample_trace() {
  core::TraceLog log;
  log.ranks = 2;
  log.title = "reuse-race seed 7";
  for (int r = 0; r < 2; ++r) {
    log.threads.push_back({r, 0, "host"});
    log.threads.push_back({r, 1, "compute"});
    log.threads.push_back({r, 2, "rs"});
  }
  for (int step = 0; step < 24; ++step) {
    const int tid = 1 + step % 2;
    log.slices.push_back({.rank = 0,
                          .tid = tid,
                          .ts_us = step,
                          .name = tid == 1 ? "kernel 'backward'" : "reduce_scatter 'grad'",
                          .category = tid == 1 ? "kernel" : "collective",
                          .op = static_cast<uint32_t>(step)});
  }
  return log;
}

inline core::Finding race_finding() {
  core::RaceDetail d;
  d.first = {0, "rs", "reduce_scatter 'grad'", 9, 9, "grad", 1, 0x1000, 0, 4096, false, {}};
  d.second = {0, "compute", "kernel 'next_forward'", 14, 14, "act", 2, 0x1000, 0, 4096, true, {}};
  d.reuse = true;
  d.missing_edge =
      "no happens-before edge from reduce_scatter 'grad' on 'rs' to kernel 'next_forward' on 'compute'";
  d.fixes = {"call record_stream('grad', 'rs') before freeing 'grad'",
             "make 'compute' wait for 'rs' before the free"};
  core::Finding f;
  f.kind = core::FindingKind::stream_race;
  f.summary = "rs read of grad races with compute write of act (block reuse)";
  f.explanation =
      "The block of grad was reused for act while <b>not bold</b> & still in use.\n"
      "  missing: an edge\nSee https://github.com/NVIDIA/Megatron-LM/pull/6187 for the upstream fix.";
  f.key = "race|grad|act";
  f.detail = d;
  f.seed = 7;
  f.occurrences = 3;
  return f;
}

inline core::Finding deadlock_finding(bool cycle) {
  core::DeadlockDetail d;
  d.is_cycle = cycle;
  d.cycle = {
      {0, "host", "sync on stream 'rs'", "rank 0 rs", {}},
      {0, "rs", "all_gather 'w1' on dp", "rank 1 rs to issue all_gather 'w1'", {}},
      {1, "rs", "all_gather 'w2' on dp", cycle ? "rank 0 host" : "(finished: it will never issue it)", {}}};
  core::Finding f;
  f.kind = core::FindingKind::deadlock;
  f.summary = cycle ? "deadlock: 3 waiters form a cycle; nothing can run"
                    : "deadlock: work waits for something that will never come";
  f.explanation = f.summary + "\n  rank 0 host: sync";
  f.key = cycle ? "dl|cycle" : "dl|chain";
  f.detail = d;
  f.seed = 11;
  return f;
}

inline core::Finding collective_finding(core::FindingKind kind, int ranks) {
  core::CollectiveDetail d;
  d.group = "dp";
  d.index = 4;
  for (int r = 0; r < ranks; ++r) {
    const bool odd = r == ranks - 1;  // the last rank issues something else
    d.ranks.push_back(
        {r,
         "ag",
         odd ? "all_gather bf16 64->256 on dp [0,1,2,3]" : "all_gather bf16 128->512 on dp [0,1,2,3]",
         odd ? "post_step.group1" : "post_step.group0",
         {}});
  }
  core::Finding f;
  f.kind = kind;
  f.summary = std::string(core::to_string(kind)) + " in group dp at collective #4";
  f.explanation = "Ranks issued different collectives.";
  f.key = "coll|" + std::to_string(ranks);
  f.detail = d;
  f.seed = 3;
  return f;
}

inline core::Finding norm_finding() {
  core::NormDetail d;
  d.expected = 5;
  d.reported = 7.0710678;
  d.params = {
      {"embedding.weight", 1}, {"output.weight (shared)", 2}, {"layers.0.fc1.weight", 1}, {"unused.bias", 0}};
  core::Finding f;
  f.kind = core::FindingKind::grad_norm_miscount;
  f.summary = "gradient norm 7.071 instead of 5";
  f.explanation = "The shared copy of the tied embedding was counted.";
  f.key = "norm";
  f.detail = d;
  f.seed = 1;
  return f;
}

inline core::Finding element_finding(core::FindingKind kind, int other_rank, double actual) {
  core::ElementDetail d{2,      "layers.1.fc1.weight",        17, 1, other_rank, 0.25,
                        actual, "first element that differs", {}};
  core::Finding f;
  f.kind = kind;
  f.summary = std::string(core::to_string(kind)) + " at layers.1.fc1.weight[17]";
  f.explanation = "Values differ.";
  f.key = "el|" + std::string(core::to_string(kind));
  f.detail = d;
  f.seed = 1;
  return f;
}

inline reports::CompareData sample_compare() {
  reports::CompareData c;
  c.against = "distopt";
  c.series = {{"optim_grads_params", {4.2, 3.9, 3.5, 3.1}}, {"distopt", {4.2, 3.9, 3.52, 3.2}}};
  c.max_abs_diff = 0.1;
  c.max_rel_diff = 0.03125;
  c.bitwise_equal = false;
  c.first_divergent = "step 2, tensor layers.1.fc1.weight, element 17";
  c.achievable_loss = 2.5;
  return c;
}

inline reports::Report sample_report() {
  using core::FindingKind;
  reports::Report r;
  r.title = "shardcheck report <sample>";
  r.command = "shardcheck run scenarios/trace/reuse-race.yaml --report out";
  r.complete = false;
  r.incomplete_reason = "interrupted by SIGINT";
  r.stopped = reports::Report::kInterrupted;

  reports::ScenarioResult race;
  race.name = "reuse-race";
  race.file = "scenarios/trace/reuse-race.yaml";
  race.kind = "trace";
  race.description = "A gradient block is reused while a collective still reads it.";
  race.expected = "stream_race";
  race.found = {FindingKind::stream_race, FindingKind::deadlock};
  race.met = true;
  race.schedules = 12;
  race.seconds = 0.25;
  race.policy = "pct";
  race.findings = {race_finding(), deadlock_finding(true)};
  race.finding_traces = {sample_trace(), core::TraceLog{}};
  r.scenarios.push_back(race);

  reports::ScenarioResult order;
  order.name = "post-step-order";
  order.file = "scenarios/training/post-step-order.yaml";
  order.kind = "training";
  order.expected = "collective_mismatch";
  order.found = {FindingKind::collective_mismatch, FindingKind::collective_swap, FindingKind::deadlock};
  order.met = false;
  order.schedules = 200;
  order.seconds = 3.5;
  order.findings = {collective_finding(FindingKind::collective_mismatch, 4),
                    collective_finding(FindingKind::collective_swap, 2), deadlock_finding(false)};
  r.scenarios.push_back(order);

  reports::ScenarioResult numerics;
  numerics.name = "tied-norm";
  numerics.file = "scenarios/training/tied-norm.yaml";
  numerics.kind = "training";
  numerics.expected = "grad_norm_miscount (allow numerics_divergence)";
  numerics.found = {FindingKind::grad_norm_miscount, FindingKind::layout_mismatch,
                    FindingKind::uninitialized_read, FindingKind::numerics_divergence,
                    FindingKind::replica_divergence};
  numerics.met = true;
  numerics.schedules = 1;
  numerics.seconds = 1.0;
  numerics.findings = {norm_finding(), element_finding(FindingKind::numerics_divergence, -1, 0.5),
                       element_finding(FindingKind::replica_divergence, 2, 0.26),
                       element_finding(FindingKind::layout_mismatch, 3, 0.75),
                       element_finding(FindingKind::uninitialized_read, -1, std::nan(""))};
  r.scenarios.push_back(numerics);

  reports::ScenarioResult compare;
  compare.name = "compare-distopt";
  compare.file = "scenarios/training/zero3.yaml";
  compare.kind = "training";
  compare.expected = "clean";
  compare.met = true;
  compare.schedules = 1;
  compare.seconds = 12.0;
  compare.compare = sample_compare();
  r.scenarios.push_back(compare);
  return r;
}

}  // namespace shardcheck::testing
