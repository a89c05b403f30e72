// Host launchers of every dsv4 CUDA kernel (raw device pointers, sizes, stream last).
// Activations are fp32 arrays holding bf16 values (as in the CPU reference); weights stay in
// checkpoint formats: FP8 = e4m3 codes [out, in] + e8m0 bytes [ceil(out/128), ceil(in/128)];
// FP4 = packed nibbles [out, in/2] + e8m0 bytes [out, in/32]; dense = bf16 or f32 [out, in].
// Expert-indexed linears read weight `ids[r]` (contiguous [E, out, ...]) for output row r and
// input row r / x_row_div. All launchers check launch errors; none synchronizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

namespace dsv4::gpu {

// ---- linear.cu ------------------------------------------------------------------------
// Q8 activation quantization (block 128): x [rows, in] → codes [rows, in], scales [rows, in/128].
void quantize_q8_rows(const float* x, int64_t rows, int64_t in, uint8_t* codes, float* scales,
                      cudaStream_t s);
// Lin8: y [rows, out] = bf16(Σ_kb fp32(partial)·(s_x·s_w)); round_out = false keeps the fp32
// sum (a tensor-parallel partial, rounded after the all-reduce). Without ids: tensor cores,
// block partials summed in fp32 (tolerance-equal to cpu::Fp8Linear, not bitwise); a row's
// result never depends on the other rows of the call (batch invariance). With ids: exact.
void lin8(const uint8_t* xq, const float* xs, int64_t rows, int x_row_div, const uint8_t* w,
          const uint8_t* ws, int64_t out, int64_t in, const int32_t* ids, float* y, cudaStream_t s,
          bool round_out = true);
// Several lin8 weights over the same activations xq [rows, in] in one tensor-core launch (at
// most 6; bit-identical to one lin8 call per output; one call each where that launch declines).
struct Lin8Out {
  const uint8_t* w = nullptr;   // e4m3 [out, in]
  const uint8_t* ws = nullptr;  // block scales [ceil(out/128), in/128]
  int64_t out = 0;
  float* y = nullptr;           // [rows, out]
  bool round_out = true;
};
void lin8_multi(const uint8_t* xq, const float* xs, int64_t rows, int64_t in, std::span<const Lin8Out> outs,
                cudaStream_t s);
// Lin4: 32-wide blocks, acc += (partial·s_x)·s_w.
void lin4(const uint8_t* xq, const float* xs, int64_t rows, int x_row_div, const uint8_t* w,
          const uint8_t* ws, int64_t out, int64_t in, const int32_t* ids, float* y, cudaStream_t s,
          bool round_out = true);
// Dense linear rounded to fp32 once (then to bf16 when round_bf16), then optionally
// y = bf16(y·post_scale) (post_scale != 0). w_bf16 selects the weight dtype: bf16 runs on
// tensor cores (fp32 MMA sums, tolerance-equal to the CPU, batch-invariant), fp32 sums in
// double (equal to the CPU up to a double's last bit).
// Grouped: output row o reads x[(o / out_per_group)·in ...] inside a row of x_stride
// (out_per_group = 0: no groups, x_stride = in).
void dense_linear(const float* x, int64_t rows, int64_t x_stride, const void* w, bool w_bf16,
                  int64_t out, int64_t in, int64_t out_per_group, bool round_bf16,
                  float post_scale, float* y, cudaStream_t s);
// dense_linear with bf16 arithmetic on a weight stored as e4m3 codes w [out, in] and E8M0 scales
// ws [ceil(out/128), in/128] per 128×128 tile, each weight taken as bf16(code·scale) — the same
// bits as dense_linear on the weight widened that way (wo_a; half the bytes). No post_scale.
// Above kDenseFp8MaxRows rows, with `wide` (scratch of out·in bf16) given, the weight is widened
// into it (widen_fp8_tiles) and dense_linear runs on it: the GEMM-sized path, same bits.
// x16 / x16_exact (optional, both or neither; decode_rope_inverse_bf16 writes them): x's bf16 bits
// [rows, x_stride] and, per row and block of kBf16CopyFlagValues values, whether x is bf16-valued
// there (x16_exact [rows, ceil(x_stride / kBf16CopyFlagValues)], nonzero: yes); fragments whose
// rows are, over the group's values, read x16 (2 bytes a value, no conversion); same bits.
// Throws (naming the shape) when dense_linear_fp8_accepts is false for it.
constexpr int64_t kDenseFp8MaxRows = 64;
constexpr int64_t kBf16CopyFlagValues = 1024;
void dense_linear_fp8(const float* x, int64_t rows, int64_t x_stride, const uint8_t* w, const uint8_t* ws,
                      int64_t out, int64_t in, int64_t out_per_group, bool round_bf16, float* y, cudaStream_t s,
                      uint16_t* wide = nullptr, const uint16_t* x16 = nullptr, const int32_t* x16_exact = nullptr);
bool dense_linear_fp8_accepts(int64_t out, int64_t in, int64_t out_per_group, int64_t x_stride);
// dst [out, in] bf16 = bf16(code·scale) of e4m3 w [out, in] with E8M0 ws [ceil(out/128),
// in/128] (the checkpoint loader's widening, bit for bit). in % 16 == 0, 16-byte aligned w / dst.
void widen_fp8_tiles(const uint8_t* w, const uint8_t* ws, int64_t out, int64_t in, uint16_t* dst, cudaStream_t s);
// Several dense linears of the same x [rows, in] (no groups): one tensor-core launch when every
// weight is bf16 and the shape allows (bit-identical to one dense_linear per output), else one
// dense_linear each. At most 6 outputs.
struct DenseOut {
  const void* w = nullptr;  // [out, in]
  bool w_bf16 = true;
  int64_t out = 0;
  float* y = nullptr;       // [rows, out]
  bool round_bf16 = false;
  float post_scale = 0.0f;
};
void dense_linear_multi(const float* x, int64_t rows, int64_t in, std::span<const DenseOut> outs, cudaStream_t s);
// Small-output dense linear (linear_small_out.cu; the mHC projections, out ≤ kSmallOutMax): K is
// split over CTAs so a decode-size call fills the GPU. y [rows, out] fp32, no rounding options;
// weights fp32 or bf16 [out, in]; x fp32 [rows, x_stride]. Sums in double in an order fixed by
// `in` alone (batch-invariant), rounded to fp32 once: equal to the CPU's double sum up to the
// last bits of a double. ws: device scratch of at least small_out_linear_workspace(rows, out,
// in) doubles (rows are processed in blocks of kSmallOutRowBlock).
constexpr int kSmallOutMax = 24;
constexpr int64_t kSmallOutRowBlock = 4096;
int64_t small_out_linear_workspace(int64_t rows, int64_t out, int64_t in);
void small_out_linear(const float* x, int64_t rows, int64_t x_stride, const void* w, bool w_bf16, int64_t out,
                      int64_t in, double* ws, int64_t ws_doubles, float* y, cudaStream_t s);
// Its first half alone (rows ≤ kSmallOutRowBlock): the double partials [chunks, rows, out] into
// ws, for a consumer that reduces them itself (hc_pre_norm). Returns chunks.
int64_t small_out_linear_partials(const float* x, int64_t rows, int64_t x_stride, const void* w, bool w_bf16,
                                  int64_t out, int64_t in, double* ws, int64_t ws_doubles, cudaStream_t s);
// RMSNorm: y = bf16(w·(x·rsqrt(mean(x²)+eps))) per row of dim values. w is a parameter: under
// programmatic dependent launch it is read before the wait on the previous kernel, so it must not
// be written by the kernels just before (the same holds for the fused chains below).
void rms_norm_rows(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                   cudaStream_t s);

// ---- pointwise.cu ---------------------------------------------------------------------
// Per-row weightless bf16 RMS (attention q heads): rows of len values, in place.
void head_rms_bf16_rows(float* x, int64_t rows, int len, float eps, cudaStream_t s);
// RoPE on the last 2·pairs values of each row (row stride `stride`): row i uses position
// pos0 + (i / rows_per_pos)·pos_step. table: [max_pos, pairs, 2] {cos, sin}.
void rope_rows(float* x, int64_t rows, int64_t stride, int64_t rows_per_pos, int64_t pos0,
               int64_t pos_step, const float* table, int pairs, bool inverse, cudaStream_t s);
// In-place Q8 / Q4 simulation of the first len values of each row (block size `block`).
void simulate_q8_rows(float* x, int64_t rows, int64_t stride, int len, int block, cudaStream_t s);
void simulate_q4_rows(float* x, int64_t rows, int64_t stride, int len, int block, cudaStream_t s);
// In-place normalized Walsh–Hadamard (len a power of two ≤ 1024) of contiguous rows.
void hadamard_rows(float* x, int64_t rows, int len, cudaStream_t s);
// streams [n, hc, D] = embed[ids[t]] replicated (embed: bf16 [vocab, D]).
void embed_rows(const uint16_t* embed, const int32_t* ids, int64_t n, int hc, int64_t dim,
                float* streams, cudaStream_t s);
// x[i] = bf16(x[i]) in place (after a tensor-parallel fp32 sum).
void round_bf16_values(float* x, int64_t count, cudaStream_t s);
// out [n, D] = bf16(a + b) elementwise, b indexed as b[(i / dim) / b_div·dim + i % dim].
void add_bf16(const float* a, const float* b, int64_t n, int64_t dim, int b_div, float* out,
              cudaStream_t s);

// ---- fused_rows.cu --------------------------------------------------------------------
// Chains of the row operations above in one launch each, equal bit for bit to the separate
// calls (row_ops.cuh holds the shared device bodies; shapes the fast single-op kernels decline
// run the separate calls). RoPE positions: row r is at positions[r / rows_per_pos] (device
// array) when positions is set, else at pos0 + r / rows_per_pos.
struct RowPositions {
  const int32_t* positions = nullptr;
  int64_t pos0 = 0;
  int64_t rows_per_pos = 1;
};
// rms_norm_rows(x, w) → y (skipped when y is null), then quantize_q8_rows of the normed rows
// (codes [rows, dim], scales [rows, dim/128]). dim % 128 == 0.
void rms_norm_q8_rows(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, uint8_t* codes,
                      float* scales, cudaStream_t s);
// head_rms_bf16_rows(x) then RoPE of each row's last 2·pairs values, in place (rows of len).
void head_rms_rope_rows(float* x, int64_t rows, int len, float eps, const float* table, int pairs, RowPositions pos,
                        cudaStream_t s);
// rms_norm_rows(x, w) → y, RoPE of y's last 2·pairs values, simulate_q8_rows of y's first
// dim − 2·pairs values in blocks of `block` (the attention's window-KV row).
void norm_rope_simulate_q8_rows(const float* x, const float* w, int64_t rows, int dim, float eps, const float* table,
                                int pairs, RowPositions pos, int block, float* y, cudaStream_t s);
// In place on rows of len values (a power of two, 32..1024): RoPE of the last 2·pairs values,
// hadamard_rows, simulate_q4_rows in blocks of 32 (the indexer's query heads).
void rope_hadamard_q4_rows(float* x, int64_t rows, int len, const float* table, int pairs, RowPositions pos,
                           cudaStream_t s);

// ---- mhc.cu ---------------------------------------------------------------------------
struct HcDeviceParams {
  int hc = 4;
  int iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
};
// From raw mixes (fn·streams) [n, M]: pre/post/comb via Sinkhorn, x = bf16(Σ pre_i·X_i).
void hc_pre_finish(const float* streams, const float* mixes_raw, int64_t n, int64_t dim,
                   const float* scale, const float* base, const HcDeviceParams& p, float* x,
                   float* post, float* comb, cudaStream_t s);
// hc_pre_finish fused with the reduction of its mixes and the block's RMSNorm, for hc = 4 (the
// fast path): the raw mixes come as small_out_linear_partials output (parts [chunks, n, M]),
// reduced with small_out_linear's order (same bits), and x = RMSNorm_norm_w(mixed) by
// rms_norm_rows' formula (eps = p.norm_eps; its double sum of squares in another fixed order) —
// one launch instead of three. Optional x_codes / x_scales (both or neither; dim % 128 == 0):
// also the Q8 of x as quantize_q8_rows(x) writes it (codes [n, dim] e4m3, scales [n, dim/128]),
// which saves the next lin8's quantize launch. Returns false,
// launching nothing, when the fast path does not apply (the caller runs the three steps).
bool hc_pre_norm(const float* streams, const double* parts, int64_t chunks, int64_t n, int64_t dim,
                 const float* scale, const float* base, const HcDeviceParams& p, const float* norm_w, float* x,
                 float* post, float* comb, cudaStream_t s, uint8_t* x_codes = nullptr, float* x_scales = nullptr);
// Whether hc_pre_norm takes these arguments (hc = 4, dim within the fast kernel, 16-byte
// aligned streams / x / norm_w); row offsets that keep the alignment keep the answer.
bool hc_pre_norm_applies(const HcDeviceParams& p, int64_t dim, const void* streams, const void* x,
                         const void* norm_w);
// X'_j = bf16(post_j·f + Σ_i comb[i][j]·X_i) in place; f is read as bf16(f) when round_f (an
// unrounded tensor-parallel fp32 sum: same bits as round_bf16_values(f) first).
void hc_post(const float* f, const float* post, const float* comb, int64_t n, int64_t dim, int hc, bool round_f,
             float* streams, cudaStream_t s);
// HC head: y = bf16(Σ (sigmoid(mix_i·r·scale + base_i) + eps)·X_i).
void hc_head_finish(const float* streams, const float* mixes_raw, int64_t n, int64_t dim,
                    const float* scale, const float* base, const HcDeviceParams& p, float* y,
                    cudaStream_t s);

// ---- attention.cu ---------------------------------------------------------------------
// The window ring and the compressed entries are GpuModel cache buffers in the 584-byte FP8
// layout (kv_fp8.h: pages of kKvCachePage entries, d = 512 = 448 e4m3 + 64 bf16 rope dims),
// decoded on read to exactly the Q8-simulated values that were written.
struct SparseAttnArgs {
  const float* q = nullptr;           // [n, H, d]
  const float* kv_new = nullptr;      // [n, d] this call's window KV (fp32)
  const uint8_t* ring = nullptr;      // win entries (FP8 cache)
  const uint8_t* compressed = nullptr;  // compressed entries (FP8 cache)
  const int32_t* selected = nullptr;  // [n, sel_stride] CSA choices (null: HCA / none)
  const int32_t* sel_count = nullptr; // [n]
  int sel_stride = 0;
  const float* sink = nullptr;        // [H]
  float scale = 0;
  int H = 0, d = 0, win = 0, ratio = 0;
  int64_t n = 0, start_pos = 0, window_len = 0;
  float* out = nullptr;               // [n, H, d]
};
void sparse_attention(const SparseAttnArgs& a, cudaStream_t s);
// Entry (pos % win) of the ring (FP8 cache, win entries) = encode(kv[t]) for the last
// min(n, win) tokens (kv [n, d] bf16-valued, no-rope dims Q8-simulated: stored exactly).
void window_ring_update(const float* kv, int64_t n, int64_t start_pos, int win, int d, uint8_t* ring,
                        cudaStream_t s);

// ---- kv_fp8.cu ------------------------------------------------------------------------
// Entries [first, first+n) of an FP8 cache buffer = encode(x[0, n)) (x [n, 512] bf16-valued;
// stores the rows' Q8 simulation, i.e. Q8-simulated rows exactly).
void kv_encode_rows(const float* x, int64_t n, uint8_t* cache, int64_t first, cudaStream_t s);
// out [n, 512] = the values of entries [first, first+n).
void kv_decode_rows(const uint8_t* cache, int64_t first, int64_t n, float* out, cudaStream_t s);

// ---- compressor.cu --------------------------------------------------------------------
// Streaming state machine over n tokens (kv/score [n, width] projections): writes the raw
// pooled entry start_pos/ratio + i it emits into rows[i·h] (fp32). state_kv/state_score:
// [slots, width].
void compressor_step(const float* kv, const float* score, const float* ape, int64_t n,
                     int64_t start_pos, int ratio, int h, bool overlap, float* state_kv,
                     float* state_score, float* rows, cudaStream_t s);
// Post-processing of rows [count, h] holding the raw entries first..first+count−1, in place:
// bf16, RMSNorm(norm), RoPE at r·entry, then Q8-simulate the no-rope dims (cache != null, the
// attention compressor; h = 512) or Hadamard + Q4 (cache == null, the indexer). With a cache
// the finished entries are also encoded into its entries first.. (FP8 layout, exact).
void compressor_finish(float* rows, int64_t first, int64_t count, int h, const float* norm,
                       float eps, int ratio, const float* rope_table, int pairs, uint8_t* cache,
                       cudaStream_t s);
// compressor_finish of the indexer (cache == null) that also stores the finished rows, exact
// (FP4-simulated), as bf16 bits into the indexer keys: row i → keys[(first + i)·h, +h).
void compressor_finish_index_keys(float* rows, int64_t first, int64_t count, int h, const float* norm, float eps,
                                  int ratio, const float* rope_table, int pairs, uint16_t* keys, cudaStream_t s);
// Fills a fresh state (kv 0, score −inf).
void compressor_reset(float* kv, float* score, int64_t count, cudaStream_t s);

// ---- indexer.cu -----------------------------------------------------------------------
// scores [n, stride]: for token t (position start_pos+t) and w < (pos+1)/ratio. keys: bf16
// bits [entries, dh].
void index_scores(const float* q, const float* weights, const uint16_t* keys, int64_t n,
                  int64_t start_pos, int ratio, int heads, int dh, float* scores, int64_t stride,
                  cudaStream_t s);
// Top-k ids by descending score, ties → lower id: sel [n, k], count [n].
void index_topk(const float* scores, int64_t n, int64_t start_pos, int ratio, int64_t stride, int k,
                int32_t* sel, int32_t* count, cudaStream_t s);

// ---- moe_router.cu --------------------------------------------------------------------
// Routing from the router input x [n, D] (fp32) and the gate [E, D] (bf16 or fp32): logits with
// exact products summed in double and one fp32 rounding (the CPU's Fp32Linear up to a double's
// last bits; independent of n), scores sqrt(softplus(logit)); top-k of score + bias (ties →
// lower id) or, on hash layers (bias null), the experts tid2eid[tokens[t]]; weights = score /
// Σ (selection order) × route_scale. ids / weights [n, k] in ascending expert id (the combine's
// order), ids_selection_order [n, k] (optional) in selection order. partials: scratch of
// partials_size ≥ moe_router_workspace(n, D, E) doubles. Needs D % 16 == 0, E ≤ 1024, k ≤ 16
// (the error names the limit).
int64_t moe_router_workspace(int64_t n, int64_t D, int64_t E);
void moe_router(const float* x, int64_t n, int64_t D, const void* gate, bool gate_bf16, const float* bias,
                const int32_t* tid2eid, const int32_t* tokens, int E, int k, float route_scale, double* partials,
                int64_t partials_size, int32_t* ids, float* weights, int32_t* ids_selection_order, cudaStream_t s);

// ---- moe.cu ---------------------------------------------------------------------------
// h [rows, inter] = bf16(weight[r]·silu(min(g, lim))·clamp(u, ±lim)); weight null = 1 (none).
void swiglu(const float* g, const float* u, const float* weight, int64_t rows, int64_t inter,
            float limit, float* h, cudaStream_t s);
// f [n, D] = bf16(Σ_j routed[t·k + j] (in order) + shared[t]) (fp32 when !round_out).
void moe_combine(const float* routed, const float* shared, int64_t n, int k, int64_t dim, float* f,
                 cudaStream_t s, bool round_out = true);

// ---- dummy.cu -------------------------------------------------------------------------
// Random weights in checkpoint formats (seeded hash, deterministic).
void fill_random_e4m3(uint8_t* p, int64_t n, uint64_t seed, cudaStream_t s);
void fill_random_fp4(uint8_t* p, int64_t n, uint64_t seed, cudaStream_t s);
void fill_e8m0(uint8_t* p, int64_t n, uint8_t value, cudaStream_t s);
void fill_random_bf16(uint16_t* p, int64_t n, float amp, float mean, uint64_t seed, cudaStream_t s);
void fill_random_f32(float* p, int64_t n, float amp, float mean, uint64_t seed, cudaStream_t s);
void fill_random_ids(int32_t* p, int64_t n, int modulo, uint64_t seed, cudaStream_t s);

}  // namespace dsv4::gpu
