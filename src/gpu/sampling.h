// Token sampling on the GPU (issue 8: "LM head and sampling on the GPU without host round
// trips beyond the sampled ids"). One thread-block cluster of up to 8 CTAs per logits row
// (fewer at large batch; every sum is exact integer arithmetic, so a row's result does not depend
// on the batch); only SampleResult comes back.
//
// Semantics are engine::Sampler's (src/engine/sampler.h) for a row without penalties, drawn
// with the same uniform u:
//   ids >= sample_vocab, NaN logits and `banned` ids are −inf; argmax ties go to the smaller id;
//   greedy (temperature ≈ 0 or top_k = 1, or an all −inf row) returns the argmax; otherwise
//   rel_i = float((l_i − max) · inv_temperature), candidates rel_i > −inf and ≥ min_rel, ordered by
//   (rel desc, id asc); top_k keeps the first k; top_p keeps the shortest prefix whose mass reaches
//   top_p of the candidates' mass; the draw walks that prefix in order and returns the first
//   token whose cumulative mass exceeds u · mass.
// p_i = float(exp(double(rel_i))) as on the host; masses are summed as round(p_i · 2^32) in
// integers (exact, order-independent: the result is deterministic) where the host sums p_i in
// double, so a draw can differ from the host's only when u · mass falls within ~1e-9 relative
// of a boundary between two tokens. Logprobs: log(Σ round(expf(l_i − max) · 2^40) / 2^40) + max,
// an exact integer sum (host: double exp summed in double), so they agree to ~1e-6.
//
// Cost: a few passes over the row (max, candidate mass, then per selection a radix histogram pass
// or two and one compaction into shared memory), each spread over the cluster's SMs; see
// gpu_sampling_bench.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

namespace dsv4::gpu {

constexpr int kSampleMaxBanned = 8;        // more banned ids: sample the row on the host
constexpr int kSampleMaxTopLogprobs = 20;  // OpenAI's top_logprobs limit

struct SampleParams {
  int32_t on_device = 0;  // 0: the row is sampled on the host; the kernel leaves its result alone
  int32_t greedy = 1;     // temperature ≈ 0 or top_k == 1
  int32_t sample_vocab = 0;  // ids >= this are never sampled (nor reported in logprobs)
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // < 1: nucleus
  float min_rel = -std::numeric_limits<float>::infinity();  // float(log(min_p)); −inf: off
  double inv_temperature = 1.0;
  double u = 0.0;            // the request's uniform draw, [0, 1)
  int32_t logprobs = 0;      // 1: report the chosen token's logprob (and top_logprobs alternatives)
  int32_t top_logprobs = 0;  // 0..kSampleMaxTopLogprobs
  int32_t num_banned = 0;    // 0..kSampleMaxBanned
  int32_t banned[kSampleMaxBanned] = {};
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;  // when params.logprobs
  int32_t num_top = 0;
  int32_t top_id[kSampleMaxTopLogprobs] = {};  // (logit desc, id asc)
  float top_logprob[kSampleMaxTopLogprobs] = {};
};

// logits: device [rows, vocab] fp32 (row stride vocab); params / results: device [rows];
// scratch: device [rows, vocab] fp32 (the candidates' probabilities). Rows with on_device == 0
// are skipped. Stream-ordered, no host sync, no allocation.
void sample_rows(const float* logits,
                 int64_t rows,
                 int64_t vocab,
                 const SampleParams* params,
                 SampleResult* results,
                 float* scratch,
                 cudaStream_t stream);

}  // namespace dsv4::gpu
