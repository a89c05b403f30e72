// Host sampling cost per decode step: B rows of the Flash vocabulary (129,280 logits) through
// Sampler::sample, serially and with the engine's row-parallel loop (parallel_for), for greedy,
// plain temperature and top-k + top-p requests. Logits are N(0, sigma) rows (a flat
// distribution: the lazily sorted draw walks deep; a real model's peaked rows stop earlier).
// Usage: sampler_bench [rows=64] [sigma=2]. Prints ms per step, best of 5.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "base/parallel.h"
#include "engine/sampler.h"

using dsv4::engine::Sampler;
using dsv4::engine::SamplingParams;

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 64;
  const float sigma = argc > 2 ? static_cast<float>(std::atof(argv[2])) : 2.0f;
  constexpr int kVocab = 129280;
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> base(static_cast<size_t>(kVocab) * rows);
  for (float& x : base) x = d(g);
  std::printf("%d rows x %d logits, N(0, %.1f), %d threads\n", rows, kVocab, sigma, dsv4::num_threads());
  struct Mode {
    const char* name;
    float temperature, top_p;
    int top_k;
  };
  const Mode modes[] = {{"greedy", 0.0f, 1.0f, -1}, {"temperature 1", 1.0f, 1.0f, -1},
                        {"top_k 50 top_p 0.9", 1.0f, 0.9f, 50}, {"top_p 0.95", 0.8f, 0.95f, -1}};
  for (const Mode& m : modes) {
    SamplingParams p;
    p.temperature = m.temperature;
    p.top_p = m.top_p;
    p.top_k = m.top_k;
    for (const bool parallel : {false, true}) {
      std::vector<Sampler> s;
      for (int b = 0; b < rows; ++b) s.emplace_back(p, kVocab, 7 + b, std::span<const int32_t>());
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        std::vector<float> l = base;
        const auto t0 = std::chrono::steady_clock::now();
        const auto run = [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b)
            s[b].sample(std::span<float>(l.data() + static_cast<size_t>(b) * kVocab, kVocab), nullptr);
        };
        if (parallel) dsv4::parallel_for(rows, run);
        else run(0, rows);
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%-20s %-8s %9.2f ms per step (%.3f ms per row)\n", m.name, parallel ? "parallel" : "serial", best,
                  best / rows);
    }
  }
  return 0;
}
