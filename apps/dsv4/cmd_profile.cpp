// `dsv4 profile`: per-kernel profile of one prefill and N decode steps of the CUDA backend,
// in-process, on dummy weights of a config (--load-format dummy --model-config FILE
// [--num-layers N]) or a checkpoint (--model DIR).
//
// Method: the HBM bandwidth is measured first by a 1 GiB device-to-device copy (bytes read +
// written); a warm-up runs; the decode steps are timed once without profiling (median wall
// time per step, every forward returns after the device finished), then once more with the
// kernel profiler on (CUDA events around every launch, gpu/profiler.h). Bytes per kernel
// come from each launcher's own accounting. A step at --batch B is one batched
// GpuModel::decode() of the B sequences, launched eagerly for those two passes; then (unless
// --disable-cuda-graph) the same steps replay a captured CUDA graph, timed by wall clock and by
// CUDA events on the model's stream around each decode() (input upload, replay, logits download).
// Then, when libcupti loads (unless --no-cupti), --steps more graph replays are traced with CUPTI
// kernel records and printed as a per-kernel table too (graph_kernel_rows below).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/dsv4/commands.h"
#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/cupti_trace.h"
#include "gpu/gpu_model.h"
#include "gpu/profiler.h"
#include "model/model_config.h"

namespace {

using namespace dsv4;
using Clock = std::chrono::steady_clock;

struct ProfileArgs {
  std::string model_dir, load_format = "auto", model_config;
  int num_layers = 0, batch = 1, steps = 16, warmup = 2, top = 12, tp = 1, rank = 0;
  int64_t context = 512;
  bool by_shape = false, disable_cuda_graph = false, no_cupti = false;
  uint64_t seed = 1234;
  std::string context_fill = "prefill";  // "prefill" | "random" (GpuModel::fill_for_benchmark)
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void print_table(const char* title, const std::vector<gpu::prof::KernelStat>& rows, double hbm_gbs, int steps,
                 size_t limit) {
  double total_us = 0;
  for (const auto& r : rows) total_us += r.us;
  std::printf("\n%s\n", title);
  // CUPTI tables also give each kernel's median and longest single execution.
  const bool per_call = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.max_call_us > 0; });
  std::printf("%-30s %-28s %7s %11s %9s %7s %12s %9s %7s%s\n", "kernel", "shape", "calls", "total us", "us/step",
              "share", "bytes", "GB/s", "% HBM", per_call ? "  med/call  max/call" : "");
  double bytes_sum = 0;
  size_t shown = 0;
  for (const auto& r : rows) {
    bytes_sum += r.bytes;
    if (shown++ >= limit) continue;
    const double gbs = r.us > 0 ? r.bytes / (r.us * 1e-6) / 1e9 : 0;
    std::printf("%-30s %-28s %7lld %11.1f %9.1f %6.1f%% %12.4g %9.1f %6.1f%%", r.kernel.c_str(),
                r.shape.empty() ? "-" : r.shape.c_str(), static_cast<long long>(r.calls), r.us, r.us / steps,
                total_us > 0 ? 100.0 * r.us / total_us : 0.0, r.bytes, gbs, 100.0 * gbs / hbm_gbs);
    if (per_call) std::printf("  %8.2f  %8.2f", r.median_call_us, r.max_call_us);
    std::printf("\n");
  }
  if (rows.size() > limit) std::printf("(%zu more rows)\n", rows.size() - limit);
  const double gbs = total_us > 0 ? bytes_sum / (total_us * 1e-6) / 1e9 : 0;
  std::printf("%-30s %-28s %7s %11.1f %9.1f %6.1f%% %12.4g %9.1f %6.1f%%\n", "all kernels", "-", "", total_us,
              total_us / steps, 100.0, bytes_sum, gbs, 100.0 * gbs / hbm_gbs);
}

// How the ranks met at the all-reduce kernels of the traced replays (kernel_attribution.h).
void print_collective_sync(const std::vector<gpu::prof::KernelRecord>& records) {
  for (const char* name : {"one_shot_all_reduce", "AllReduce"}) {
    for (const auto& c : gpu::prof::collective_sync(records, name)) {
      std::printf("all-reduce sync (%s) device %u: %lld calls, mean span %.2f us = wait for the last rank %.2f + "
                  "after its arrival %.2f (median %.2f)\n",
                  name, c.device, static_cast<long long>(c.calls), c.mean_span_us, c.mean_wait_us,
                  c.mean_after_last_us, c.median_after_last_us);
    }
  }
}

// Where the ranks' steps differ: per launcher, µs per step on every rank, the rows whose spread
// (max − min over ranks) is largest first. A rank that is slower before a collective makes its
// peers wait there, so the collective's own row is left out.
void print_rank_imbalance(const std::vector<gpu::prof::Attribution>& ranks, int steps) {
  const int tp = static_cast<int>(ranks.size());
  std::map<std::string, std::vector<double>> per_rank;  // launcher -> us/step per rank
  for (int r = 0; r < tp; ++r) {
    for (const auto& row : ranks[r].rows) {
      auto& v = per_rank[row.kernel];
      v.resize(static_cast<size_t>(tp), 0.0);
      v[static_cast<size_t>(r)] = row.us / steps;
    }
  }
  std::vector<std::pair<double, std::string>> order;
  std::vector<double> total(static_cast<size_t>(tp), 0.0);
  for (const auto& [name, v] : per_rank) {
    if (name.rfind("all_reduce", 0) == 0) continue;
    for (int r = 0; r < tp; ++r) total[r] += v[r];
    order.emplace_back(*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end()), name);
  }
  std::sort(order.rbegin(), order.rend());
  std::printf("\nranks compared (CUDA graph replay, us per step, collectives left out):\n%-30s", "kernel");
  for (int r = 0; r < tp; ++r) std::printf("  rank %d us", r);
  std::printf("  max-min\n%-30s", "all other kernels");
  for (int r = 0; r < tp; ++r) std::printf(" %10.1f", total[r]);
  std::printf(" %8.1f\n", *std::max_element(total.begin(), total.end()) - *std::min_element(total.begin(), total.end()));
  for (size_t i = 0; i < std::min<size_t>(order.size(), 8); ++i) {
    std::printf("%-30s", order[i].second.c_str());
    for (double us : per_rank[order[i].second]) std::printf(" %10.1f", us);
    std::printf(" %8.1f\n", order[i].first);
  }
}

// Per-kernel rows of `a.steps` CUDA-graph replays from CUPTI kernel records, attributed to
// launcher names (gpu/kernel_attribution.h): one eager step with the profiler and CUPTI external
// correlation on maps kernel functions to launchers and gives their bytes per step; then the
// decode graph is captured again with CUPTI attached, warmed up, and `a.steps` replays are
// traced. `step(mode)` runs one decode step of the batch.
std::vector<gpu::prof::KernelStat> traced_graph_rows(gpu::GpuModel& m, const ProfileArgs& a,
                                                     const std::function<void(gpu::GpuModel::DecodeMode)>& step) {
  using Mode = gpu::GpuModel::DecodeMode;
  gpu::cupti::KernelTrace trace;
  trace.start();
  gpu::prof::reset();
  gpu::prof::set_enabled(true);
  trace.set_correlation(true);
  step(Mode::kEager);
  trace.set_correlation(false);
  gpu::prof::set_enabled(false);
  gpu::prof::reset();
  // Launches are logged on rank 0's thread only (peer ranks' threads are muted); every rank runs
  // the same kernels in the same order, so rank 0's eager records name every rank's kernels.
  const auto map = gpu::prof::build_kernel_map(trace.take(a.tp > 1 ? 0 : -1), trace.launches());
  const auto tc = Clock::now();
  step(Mode::kAuto);  // captures the graph (and sizes its workspace) under CUPTI
  const double capture_ms = seconds_since(tc) * 1e3;
  for (int i = 0; i < a.warmup; ++i) step(Mode::kAuto);
  (void)trace.take();  // the warm-up replays
  for (int i = 0; i < a.steps; ++i) step(Mode::kAuto);
  std::vector<gpu::prof::KernelRecord> records = trace.stop(-1);
  // One attribution per rank (tensor parallel) or of every record (one GPU).
  std::vector<gpu::prof::Attribution> ranks;
  if (a.tp > 1) {
    print_collective_sync(records);
    for (int r = 0; r < a.tp; ++r) {
      std::vector<gpu::prof::KernelRecord> mine;
      for (const auto& k : records)
        if (k.device == static_cast<uint32_t>(r)) mine.push_back(k);
      ranks.push_back(gpu::prof::attribute(std::move(mine), map, a.steps));
    }
    print_rank_imbalance(ranks, a.steps);
  } else {
    ranks.push_back(gpu::prof::attribute(std::move(records), map, a.steps));
  }
  const gpu::prof::Attribution& att = ranks[a.tp > 1 ? static_cast<size_t>(a.rank) : 0];
  if (trace.dropped_records() > 0) {
    std::printf("warning: CUPTI dropped %lld activity records: the graph replay table undercounts\n",
                static_cast<long long>(trace.dropped_records()));
  }
  double kernel_us = 0;
  for (const auto& r : att.rows) kernel_us += r.us;
  std::printf("CUDA graph replay traced with CUPTI (%s; graph recaptured in %.1f ms): %lld kernel records in %d "
              "replays (%lld from graph nodes), %.0f us of kernel time per step; launcher names from one eager step "
              "(%zu launches, %zu kernel functions); %d function(s) ran a different number of times per step than "
              "eagerly, %d never ran eagerly (shown by function name)\n",
              gpu::cupti::describe().c_str(), capture_ms, static_cast<long long>(att.records), a.steps,
              static_cast<long long>(att.graph_records), kernel_us / a.steps, trace.launches().size(),
              map.occurrences.size(), att.mismatched_functions, att.unmapped_functions);
  return att.rows;
}

// traced_graph_rows after dropping the graph captured so far (no graph outlives CUPTI's attach);
// empty, with one line saying why, when libcupti cannot be loaded or the trace fails.
std::vector<gpu::prof::KernelStat> graph_kernel_rows(gpu::GpuModel& m, const ProfileArgs& a,
                                                     const std::function<void(gpu::GpuModel::DecodeMode)>& step) {
  m.enable_decode_graphs(a.batch);  // drops the graph captured above, before CUPTI attaches
  std::string why;
  if (!gpu::cupti::load(&why)) {
    std::printf("CUPTI not available (%s): no per-kernel table for the graph replay, step time only\n",
                why.c_str());
    return {};
  }
  try {
    return traced_graph_rows(m, a, step);
  } catch (const std::exception& e) {  // the rest of the profile is still worth printing
    gpu::prof::set_enabled(false);
    gpu::prof::reset();
    std::printf("CUPTI trace of the graph replay failed (%s): no per-kernel table for it\n", e.what());
    return {};
  }
}

void profile(const ProfileArgs& a) {
  DSV4_CHECK(gpu::has_cuda_device(), "no CUDA device: `dsv4 profile` needs a visible NVIDIA GPU");
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress stays visible when the run is cut short
  DSV4_CHECK(a.batch >= 1 && a.steps >= 1 && a.context >= 1 && a.warmup >= 0, "bad --batch/--steps/--context");
  DSV4_CHECK(a.rank >= 0 && a.rank < std::max(a.tp, 1), "--rank ", a.rank, " needs a rank of --tp ", a.tp);
  // Positions: warm-up and steps of the eager, profiled, graph and CUPTI passes (+ slack).
  const int64_t max_len = a.context + 3 * a.warmup + 4 * a.steps + 24;
  gpu::GpuModelOptions go{.max_seq_len = max_len, .tp_size = a.tp};
  std::unique_ptr<gpu::GpuModel> m;
  std::string source;
  const auto t_load = Clock::now();
  if (a.load_format == "dummy") {
    std::string path = a.model_config.empty() && !a.model_dir.empty() ? a.model_dir + "/config.json" : a.model_config;
    DSV4_CHECK(!path.empty(), "--load-format dummy needs --model-config FILE (or --model DIR with a config.json)");
    const auto cfg = gpu::prof::with_num_layers(model::ModelConfig::from_file(path), a.num_layers);
    m = gpu::GpuModel::dummy(cfg, a.seed, go);
    source = "dummy weights of " + path;
  } else {
    DSV4_CHECK(a.load_format == "auto", "unknown --load-format '", a.load_format, "' (auto | dummy)");
    DSV4_CHECK(!a.model_dir.empty(), "give --model DIR, or --load-format dummy --model-config FILE");
    DSV4_CHECK(a.num_layers <= 0, "--num-layers needs --load-format dummy");
    m = gpu::GpuModel::load(a.model_dir, go);
    source = a.model_dir;
  }
  const double load_s = seconds_since(t_load);
  const auto& cfg = m->config();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("dsv4 profile | device %s | %s | %d layers (+%d MTP, not run) | tp %d | weights %.2f GiB on GPU 0, "
              "loaded in %.1f s\n",
              prop.name, source.c_str(), cfg.num_hidden_layers, cfg.num_nextn_predict_layers, a.tp,
              m->weights().total_bytes / double(1 << 30), load_s);
  const double hbm = gpu::prof::measure_copy_bandwidth_gbs();
  std::printf("HBM bandwidth (1 GiB device-to-device copy, read + written): %.0f GB/s\n", hbm);
  std::printf("batch %d, context %lld: each step is one batched decode() of the %d sequence(s); kernel timing: CUDA "
              "events around every launch (eager launches)\n",
              a.batch, static_cast<long long>(a.context), a.batch);

  // Prefill every sequence (the first one profiled).
  std::vector<gpu::GpuSequenceState> seqs;
  std::vector<int32_t> prompt(static_cast<size_t>(a.context));
  const int32_t V = static_cast<int32_t>(cfg.vocab_size);
  double prefill_s = 0;
  std::vector<gpu::prof::KernelStat> prefill_rows;
  for (int b = 0; b < a.batch; ++b) {
    for (int64_t i = 0; i < a.context; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + b * 104729 + 17) % V);
    seqs.push_back(m->new_sequence());
    if (b == 0 && a.context_fill == "prefill") {
      gpu::prof::reset();
      gpu::prof::set_enabled(true);
    }
    const auto t0 = Clock::now();
    if (a.context_fill == "random") {
      m->fill_for_benchmark(seqs.back(), a.context, static_cast<uint64_t>(b));
      continue;
    }
    m->forward(seqs.back(), prompt, false, a.context, false);
    if (b == 0) {
      prefill_s = seconds_since(t0);
      gpu::prof::set_enabled(false);
      prefill_rows = gpu::prof::collect(false);
    }
  }
  std::vector<gpu::GpuSequenceState*> seq_ptrs;
  for (auto& sq : seqs) seq_ptrs.push_back(&sq);
  std::vector<int32_t> toks(static_cast<size_t>(a.batch));
  std::vector<float> logits(static_cast<size_t>(a.batch) * static_cast<size_t>(V));
  auto step_mode = [&](int s, gpu::GpuModel::DecodeMode mode) {
    for (int b = 0; b < a.batch; ++b) toks[b] = static_cast<int32_t>((s * 31 + b * 131 + 5) % V);
    m->decode(seq_ptrs, toks, logits, mode);
  };
  auto step = [&](int s) { step_mode(s, gpu::GpuModel::DecodeMode::kEager); };
  int s = 0;
  for (int i = 0; i < a.warmup; ++i) step(s++);
  std::vector<double> step_us;
  for (int i = 0; i < a.steps; ++i) {
    const auto t0 = Clock::now();
    step(s++);
    step_us.push_back(seconds_since(t0) * 1e6);
  }
  std::sort(step_us.begin(), step_us.end());
  const double med = step_us[step_us.size() / 2];
  gpu::prof::reset();
  gpu::prof::set_enabled(true);
  const auto tp = Clock::now();
  for (int i = 0; i < a.steps; ++i) step(s++);
  const double prof_step_us = seconds_since(tp) * 1e6 / a.steps;
  gpu::prof::set_enabled(false);
  const auto rows = gpu::prof::collect(false);
  const auto shape_rows = a.by_shape ? gpu::prof::collect(true) : std::vector<gpu::prof::KernelStat>{};

  if (a.context_fill == "random") {
    std::printf("context: %lld positions of random cache entries per sequence (--context-fill random, no prefill)\n",
                static_cast<long long>(a.context));
  } else {
    std::printf("prefill %lld tokens (sequence 0, profiled): %.3f s = %.0f tokens/s\n",
                static_cast<long long>(a.context), prefill_s, a.context / prefill_s);
  }
  std::printf("decode step (batch %d, %d steps after %d warm-up, unprofiled, eager): median %.0f us, min %.0f, max %.0f "
              "-> %.1f tokens/s; profiled steps: %.0f us\n",
              a.batch, a.steps, a.warmup, med, step_us.front(), step_us.back(), a.batch / (med * 1e-6), prof_step_us);
  // The per-sequence path for comparison: B single-token forward() calls per step.
  std::vector<double> seq_us;
  for (int i = 0; i < std::min(a.steps, 4) && a.batch > 1; ++i) {
    for (int b = 0; b < a.batch; ++b) toks[b] = static_cast<int32_t>((s * 31 + b * 131 + 5) % V);
    const auto t0 = Clock::now();
    for (int b = 0; b < a.batch; ++b) m->forward(seqs[b], std::span(&toks[b], 1), false, 0, false);
    seq_us.push_back(seconds_since(t0) * 1e6);
    ++s;
  }
  if (!seq_us.empty()) {
    std::sort(seq_us.begin(), seq_us.end());
    std::printf("same step as %d sequential single-token forward() calls: median %.0f us -> batched decode is %.2fx "
                "faster\n",
                a.batch, seq_us[seq_us.size() / 2], seq_us[seq_us.size() / 2] / med);
  }
  std::vector<gpu::prof::KernelStat> graph_rows;  // CUPTI, graph replay
  if (!a.disable_cuda_graph) {
    // CUDA graph for this batch size only (the list ends at --batch), captured on first use.
    m->enable_decode_graphs(a.batch);
    const auto tc = Clock::now();
    step_mode(s++, gpu::GpuModel::DecodeMode::kAuto);
    const double capture_s = seconds_since(tc);
    for (int i = 0; i < a.warmup; ++i) step_mode(s++, gpu::GpuModel::DecodeMode::kAuto);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> wall_us, event_us;
    for (int i = 0; i < a.steps; ++i) {
      const auto t0 = Clock::now();
      CUDA_CHECK(cudaEventRecord(e0, m->stream()));
      step_mode(s++, gpu::GpuModel::DecodeMode::kAuto);
      CUDA_CHECK(cudaEventRecord(e1, m->stream()));
      CUDA_CHECK(cudaEventSynchronize(e1));
      wall_us.push_back(seconds_since(t0) * 1e6);
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      event_us.push_back(1000.0 * ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(wall_us.begin(), wall_us.end());
    std::sort(event_us.begin(), event_us.end());
    const double gmed = wall_us[wall_us.size() / 2];
    std::printf("decode step with CUDA graph replay (batch %d, graph size %d, first call incl. capture %.1f ms): median "
                "%.0f us wall (min %.0f, max %.0f), %.0f us between CUDA events on the stream -> %.1f tokens/s; "
                "eager/graph = %.2fx\n",
                a.batch, m->decode_graph_sizes().back(), capture_s * 1e3, gmed, wall_us.front(), wall_us.back(),
                event_us[event_us.size() / 2], a.batch / (gmed * 1e-6), med / gmed);
    if (!a.no_cupti) {
      graph_rows = graph_kernel_rows(*m, a, [&](gpu::GpuModel::DecodeMode mode) { step_mode(s++, mode); });
    }
  }
  const auto need = gpu::prof::decode_must_read(*m, a.batch, a.context);
  const double batched = need.total(a.batch);
  const auto one = gpu::prof::decode_must_read(*m, 1, a.context);
  const double sequential = a.batch * one.total(1);
  std::printf("roofline (bytes that must be read per step / %.0f GB/s): batched %.4g B (dense %.4g + experts %.4g "
              "[%.1f of %d per layer] + state %d x %.4g) -> %.1f us/step (%d sequential forwards would read %.4g B "
              "-> %.1f us); measured eager step = %.1fx the batched bound\n",
              hbm, batched, need.dense_weights, need.expert_weights, need.expected_experts_per_layer,
              cfg.n_routed_experts, a.batch, need.state_per_sequence, batched / (hbm * 1e3), a.batch, sequential,
              sequential / (hbm * 1e3), med / (batched / (hbm * 1e3)));
  print_table("decode: per kernel, totals over the profiled steps", rows, hbm, a.steps, 1000);
  if (!graph_rows.empty()) {
    print_table("decode (CUDA graph replay, CUPTI): per kernel", graph_rows, hbm, a.steps, 1000);
  }
  if (a.by_shape) {
    print_table("decode: per kernel and shape", shape_rows, hbm, a.steps, static_cast<size_t>(a.top));
  }
  if (!prefill_rows.empty()) {
    print_table("prefill (one sequence): per kernel", prefill_rows, hbm, 1, static_cast<size_t>(a.top));
  }
}

const app::CommandRegistrar kRegister([](CLI::App& root) {
  auto args = std::make_shared<ProfileArgs>();
  auto* cmd = root.add_subcommand("profile", "Per-kernel profile of prefill + decode steps on the CUDA backend");
  cmd->add_option("--model", args->model_dir, "Checkpoint directory (or a dir with config.json for dummy)");
  cmd->add_option("--load-format", args->load_format, "auto | dummy (random weights on the device)")
      ->capture_default_str();
  cmd->add_option("--model-config", args->model_config, "config.json for --load-format dummy");
  cmd->add_option("--num-layers", args->num_layers, "Keep only the first N layers (dummy; 0 = all)")
      ->capture_default_str();
  cmd->add_option("--tp", args->tp, "Tensor-parallel GPUs (the graph-replay table shows one rank: --rank)")
      ->check(CLI::Range(1, 8));
  cmd->add_option("--rank", args->rank,
                  "With --tp: whose CUDA-graph replay the CUPTI table shows (a rank waiting for a slower peer shows "
                  "that wait in its all-reduce)")
      ->check(CLI::Range(0, 7));
  cmd->add_option("--context-fill", args->context_fill,
                  "prefill: every sequence is prefilled (sequence 0 profiled); random: no prefill, every sequence "
                  "gets random caches of --context positions (same decode cost, meaningless tokens)")
      ->check(CLI::IsMember({"prefill", "random"}))
      ->capture_default_str();
  cmd->add_option("--batch", args->batch, "Sequences per decode step")->capture_default_str();
  cmd->add_option("--context", args->context, "Prefill length (decode context)")->capture_default_str();
  cmd->add_option("--steps", args->steps, "Decode steps measured (twice: plain, then profiled)")
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Warm-up decode steps")->capture_default_str();
  cmd->add_flag("--by-shape", args->by_shape, "Also print a table per (kernel, shape)");
  cmd->add_flag("--disable-cuda-graph", args->disable_cuda_graph, "Skip the CUDA-graph replay timing");
  cmd->add_flag("--no-cupti", args->no_cupti, "Skip the per-kernel table of the graph replay (CUPTI)");
  cmd->add_option("--top", args->top, "Rows of the per-shape and prefill tables")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Dummy weight seed")->capture_default_str();
  cmd->callback([args] { profile(*args); });
});

}  // namespace
