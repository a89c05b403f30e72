// gpu_decode_bench: decode-step timing of the CUDA backend on dummy (random, on-device)
// weights of a real config, e.g. tests/data/models/deepseek-v4-flash/config.json with
// --num-layers N (the full Flash model needs ~160 GB). Prints µs per decode step (batch 1),
// then per-kernel µs for the step's main kernels at the config's shapes, with the bytes
// each moves, GB/s and % of the HBM bandwidth a plain copy kernel reaches in the same run.
// Method (performance.md): warm-up, then the median of repeated CUDA-event timings.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/gpu_model.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"

using namespace dsv4;
using namespace dsv4::gpu;

namespace {

__global__ void copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

template <class F>
double median_us(F&& f, int iters) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(a));
    f();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0f);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

struct Row {
  std::string name;
  double us, bytes;
};

}  // namespace

int main(int argc, char** argv) {
  std::string config_path = "tests/data/models/deepseek-v4-flash/config.json";
  int num_layers = 8, prompt = 256, steps = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") config_path = v;
    else if (k == "--num-layers") num_layers = std::stoi(v);
    else if (k == "--prompt") prompt = std::stoi(v);
    else if (k == "--steps") steps = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: gpu_decode_bench [--config F] [--num-layers N] [--prompt P] [--steps S]\n");
      return 2;
    }
  }
  if (!has_cuda_device()) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  try {
    auto cfg = model::ModelConfig::from_file(config_path);
    const int mtp_ratio = cfg.compress_ratios.back();
    num_layers = std::min(num_layers, cfg.num_hidden_layers);
    cfg.compress_ratios.resize(static_cast<size_t>(num_layers));
    cfg.compress_ratios.push_back(mtp_ratio);
    cfg.num_hidden_layers = num_layers;
    cfg.num_hash_layers = std::min(cfg.num_hash_layers, num_layers);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const auto t0 = std::chrono::steady_clock::now();
    auto m = GpuModel::dummy(cfg, 1234, GpuModelOptions{.max_seq_len = prompt + steps + 8});
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("device %s | config %s | layers %d (+%d MTP) | dummy weights %.1f GiB in %.1f s\n", prop.name,
                config_path.c_str(), num_layers, cfg.num_nextn_predict_layers,
                m->weights().total_bytes / double(1 << 30), load_s);

    // HBM bandwidth by a copy kernel (1 GiB read + 1 GiB written).
    const int64_t n4 = (int64_t(1) << 30) / 16;
    DeviceBuffer<float4> src(n4), dst(n4);
    src.fill_bytes(0);
    const double copy_us = median_us([&] { copy_kernel<<<prop.multiProcessorCount * 8, 512>>>(src.get(), dst.get(), n4); }, 10);
    const double hbm = 2.0 * n4 * 16 / (copy_us * 1e-6) / 1e9;
    std::printf("copy kernel: %.1f us for 2 GiB moved -> %.0f GB/s (reference bandwidth below)\n", copy_us, hbm);

    // Prefill then timed decode steps (batch 1).
    auto state = m->new_sequence();
    std::vector<int32_t> tokens(static_cast<size_t>(prompt));
    for (int i = 0; i < prompt; ++i) tokens[i] = (i * 7919) % static_cast<int32_t>(cfg.vocab_size);
    const auto tp = std::chrono::steady_clock::now();
    m->forward(state, tokens, false, 0, false);
    const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
    std::vector<double> step_us;
    for (int s = 0; s < steps; ++s) {
      const int32_t tok = (s * 31 + 5) % static_cast<int32_t>(cfg.vocab_size);
      const auto a = std::chrono::steady_clock::now();
      m->forward(state, std::span(&tok, 1), false, 0, false);
      step_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
    }
    std::sort(step_us.begin(), step_us.end());
    std::printf("prefill %d tokens: %.2f s | decode batch 1 at context %d..%d: median %.0f us/step, min %.0f, max %.0f "
                "(%.0f us per layer)\n",
                prompt, prefill_s, prompt, prompt + steps, step_us[step_us.size() / 2], step_us.front(), step_us.back(),
                step_us[step_us.size() / 2] / num_layers);

    // Per-kernel timings at the decode shapes of a CSA layer (layer 2 if present).
    const BlockW& L = m->weights().layers[std::min(2, num_layers - 1)];
    const int64_t D = cfg.hidden_size, H = cfg.num_attention_heads, d = cfg.head_dim;
    const int64_t inter = cfg.moe_intermediate_size, k = cfg.num_experts_per_tok, V = cfg.vocab_size;
    const int64_t ro = cfg.o_lora_rank;
    DeviceBuffer<float> x(std::max<int64_t>(H * d, 8 * D)), y(std::max<int64_t>(V, H * d));
    x.fill_bytes(0);
    DeviceBuffer<uint8_t> q(std::max<int64_t>(H * d, 8 * D));
    q.fill_bytes(0);
    DeviceBuffer<float> qs(1024);
    qs.fill_bytes(0);
    std::vector<int32_t> hid(k);
    for (int i = 0; i < k; ++i) hid[i] = i * 37 % cfg.n_routed_experts;
    DeviceBuffer<int32_t> ids;
    ids.upload(hid);
    std::vector<Row> rows;
    auto l8 = [&](const char* name, const Lin8W& w) {
      rows.push_back({name, median_us([&] { lin8(q.get(), qs.get(), 1, 1, w.w.get(), w.s.get(), w.out, w.in, nullptr, y.get(), nullptr); }, 20),
                      double(w.w.bytes() + w.s.bytes() + w.in + 4 * w.out)});
    };
    auto dn = [&](const char* name, const DenseW& w, int64_t per_group, int64_t x_stride) {
      rows.push_back({name, median_us([&] {
                        if (w.fp8()) dense_linear_fp8(x.get(), 1, x_stride, w.w.get(), w.s.get(), w.out, w.in, per_group, true, y.get(), nullptr);
                        else dense_linear(x.get(), 1, x_stride, w.w.get(), w.bf16, w.out, w.in, per_group, true, 0.0f, y.get(), nullptr);
                      }, 20),
                      double(w.bytes() + 4 * x_stride + 4 * w.out)});
    };
    rows.push_back({"quantize_q8 [1, D]", median_us([&] { quantize_q8_rows(x.get(), 1, D, q.get(), qs.get(), nullptr); }, 20), double(5 * D)});
    l8("lin8 wq_a", L.attn.wq_a);
    l8("lin8 wq_b", L.attn.wq_b);
    l8("lin8 wkv", L.attn.wkv);
    dn(L.attn.wo_a.fp8() ? "dense fp8-as-bf16 wo_a (grouped)" : "dense bf16 wo_a (grouped)", L.attn.wo_a, ro, H * d);
    l8("lin8 wo_b", L.attn.wo_b);
    if (L.attn.indexer) l8("lin8 indexer wq_b", L.attn.indexer->wq_b);
    if (L.attn.compressor) dn("dense compressor wkv", L.attn.compressor->wkv, 0, D);
    dn("dense gate (router)", L.ffn.gate, 0, D);
    dn("dense hc_attn fn (fp32)", L.hc_attn.fn, 0, L.hc_attn.fn.in);
    const ExpertsW& ex = L.ffn.experts;
    const double ebytes = double(ex.w1.bytes() + ex.s1.bytes()) / ex.num * k;
    auto lin = ex.fp4 ? lin4 : lin8;
    rows.push_back({"lin4 experts w1 (k rows)", median_us([&] { lin(q.get(), qs.get(), k, k, ex.w1.get(), ex.s1.get(), inter, D, ids.get(), y.get(), nullptr, true); }, 20), ebytes});
    rows.push_back({"lin4 experts w2 (k rows)", median_us([&] { lin(q.get(), qs.get(), k, 1, ex.w2.get(), ex.s2.get(), D, inter, ids.get(), y.get(), nullptr, true); }, 20), ebytes});
    l8("lin8 shared w1", L.ffn.sw1);
    l8("lin8 shared w2", L.ffn.sw2);
    dn("dense LM head (bf16)", m->weights().head, 0, D);
    {
      DeviceBuffer<float> kv(d), sink(H);
      DeviceBuffer<uint8_t> ring(kv_cache_bytes(cfg.sliding_window)),  // FP8 caches (all-zero entries)
          comp(kv_cache_bytes(std::max<int64_t>(1, (prompt + steps) / 4)));
      kv.fill_bytes(0);
      ring.fill_bytes(0);
      comp.fill_bytes(0);
      sink.fill_bytes(0);
      SparseAttnArgs a;
      a.q = x.get();
      a.kv_new = kv.get();
      a.ring = ring.get();
      a.compressed = comp.get();
      a.sink = sink.get();
      a.scale = 0.04f;
      a.H = static_cast<int>(H);
      a.d = static_cast<int>(d);
      a.win = cfg.sliding_window;
      a.ratio = 4;
      a.n = 1;
      a.start_pos = prompt;
      a.window_len = cfg.sliding_window;
      a.out = y.get();
      const double cand = cfg.sliding_window + (prompt + 1) / 4;
      rows.push_back({"sparse attention (HCA-style list)", median_us([&] { sparse_attention(a, nullptr); }, 20),
                      cand * kKvEntryBytes + 2.0 * H * d * 4});
    }
    std::printf("\n%-36s %10s %12s %10s %8s\n", "kernel (decode, batch 1)", "us", "bytes", "GB/s", "% HBM");
    for (const Row& r : rows) {
      const double gbs = r.bytes / (r.us * 1e-6) / 1e9;
      std::printf("%-36s %10.1f %12.0f %10.1f %7.1f%%\n", r.name.c_str(), r.us, r.bytes, gbs, 100.0 * gbs / hbm);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_decode_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
