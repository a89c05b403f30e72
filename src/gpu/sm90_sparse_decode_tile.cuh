// Per-tile building blocks of the mma.sync sparse decode attention (design: the header of
// sm90_sparse_decode.cu): the cp.async gather and the FP8 dequantization of a 64-candidate tile,
// Q's load, the QK work units. Part of sm90_sparse_decode.cu's translation unit: included once,
// inside its anonymous namespace, after its constants, Smem and sm90_sparse_decode_rows.cuh
// (not a standalone header).
#pragma once

// Resolves tile candidates [j0, j0+64) (threads < 64), then issues their cp.async copies.
// use_pre: `pre` is thread t's id of position j0 + t, loaded earlier (spec_list_id).
__device__ void gather_tile(Smem& sm, const SparseDecodeArgs& a, const RowList& rl, int r, int j0,
                            int count, bool use_pre = false, int32_t pre = -1) {
  const int t = threadIdx.x;
  if (t < kTile) {
    const uint8_t *d, *s;
    resolve(a, rl, r, t < count ? j0 + t : rl.total, d, s, use_pre, pre);
    sm.src_data[t] = d;
    sm.src_scale[t] = s;
  }
  __syncthreads();
  for (int i = t; i < count * kChunks; i += kThreads) {
    const int c = i / kChunks, ch = i - c * kChunks;
    const uint8_t* src = sm.src_data[c];
    if (src != nullptr) cp_async16(sm.raw + c * kEntryData + ch * 16, src + ch * 16);
  }
  if (t < count && sm.src_scale[t] != nullptr)
    cp_async8(sm.raw_scales + t * kEntryScales, sm.src_scale[t]);
  cp_async_commit();
}

// Q → smem: heads [0, H) of the group (bf16 via cp.async, or fp32 converted), rows up to the
// 16-head tile boundary zero-padded. The cp.async copies join the next committed group.
__device__ __forceinline__ void load_q(Smem& sm, const SparseDecodeArgs& a, int64_t q_off, int H,
                                       int head_tiles) {
  const int tid = threadIdx.x;
  if (a.q_f32 == nullptr) {
    for (int i = tid; i < H * kHeadDim / 8; i += kThreads) {  // all in flight at once
      const int h = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
      cp_async16(sm.q + h * kQS + c * 8, a.q + q_off + h * kHeadDim + c * 8);
    }
  } else {
#pragma unroll 4
    for (int i = tid; i < H * kHeadDim / 8; i += kThreads) {
      const int h = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
      const float4* src = reinterpret_cast<const float4*>(a.q_f32 + q_off + h * kHeadDim + c * 8);
      const float4 x = src[0], y = src[1];
      *reinterpret_cast<uint4*>(sm.q + h * kQS + c * 8) =
          make_uint4(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w), pack_bf16x2(y.x, y.y),
                     pack_bf16x2(y.z, y.w));
    }
  }
  for (int i = H * kHeadDim / 8 + tid; i < head_tiles * 16 * kHeadDim / 8; i += kThreads) {
    const int h = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
    *reinterpret_cast<uint4*>(sm.q + h * kQS + c * 8) = make_uint4(0, 0, 0, 0);
  }
}

// raw → Ks for candidates [0, round_up(count, 16)); invalid or padding rows become zeros.
// kIntDequant: dequant_e4m3x4_int (the same bits without the fp32 round trip).
template <bool kIntDequant>
__device__ void dequant_tile(Smem& sm, int count) {
  const int padded = (count + 15) & ~15;
  if (threadIdx.x < kTile)
    sm.valid[threadIdx.x] = threadIdx.x < count && sm.src_data[threadIdx.x] != nullptr;
  for (int i = threadIdx.x; i < padded * kChunks; i += kThreads) {
    const int c = i / kChunks, ch = i - c * kChunks;
    uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
    const bool valid = c < count && sm.src_data[c] != nullptr;
    __nv_bfloat16* dst = sm.k + c * kQS;
    if (ch < 28) {  // 16 fp8 codes of tile ch/4
      if (valid) {
        const uint4 v = *reinterpret_cast<const uint4*>(sm.raw + c * kEntryData + ch * 16);
        dequant_e4m3x16<kIntDequant>(v, sm.raw_scales[c * kEntryScales + ch / 4], lo, hi);
      }
      *reinterpret_cast<uint4*>(dst + ch * 16) = lo;
      *reinterpret_cast<uint4*>(dst + ch * 16 + 8) = hi;
    } else {  // 8 bf16 rope dims
      if (valid) lo = *reinterpret_cast<const uint4*>(sm.raw + c * kEntryData + ch * 16);
      *reinterpret_cast<uint4*>(dst + kNopeDim + (ch - 28) * 8) = lo;
    }
  }
}

// The QK dot of a (head, candidate) is two fp32 chains over the k halves [0, 256) and
// [256, 512) (16 mma k-steps each, k ascending), added as half0 + half1, then scaled — the same
// bits whichever warp computes it, so head groups only move the arithmetic. K parts per work
// unit: 2 (a unit computes one half; the softmax adds them) in the kernels for CTAs of ≤ 2 head
// tiles (NT 4, 8), else 1.
template <int NT>
constexpr int kQkParts = NT == 16 ? 1 : 2;

// One unit: 16 heads of tile mt × 8·NN candidates from c0 × k halves [hf, hf + HALVES); stores
// the unscaled sum of its halves to Ss rows row0 + head.
template <int NN, int HALVES>
__device__ __forceinline__ void qk_unit(Smem& sm, int mt, int c0, int hf, int row0) {
  const int lane = threadIdx.x & 31;
  float acc[HALVES][NN][4] = {};
  const __nv_bfloat16* qa = sm.q + (mt * 16 + (lane & 15)) * kQS + (lane >> 4) * 8 + hf * 256;
  if constexpr (NN == 2) {  // B: 16 candidates × k16 per ldmatrix_x4
    const __nv_bfloat16* kb =
        sm.k + (c0 + (lane & 7) + ((lane >> 4) << 3)) * kQS + ((lane >> 3) & 1) * 8 + hf * 256;
#pragma unroll 4
    for (int k0 = 0; k0 < 256; k0 += 16) {
#pragma unroll
      for (int half = 0; half < HALVES; ++half) {
        uint32_t af[4], bf[4];
        ldmatrix_x4(af, qa + half * 256 + k0);
        ldmatrix_x4(bf, kb + half * 256 + k0);
        mma_bf16(acc[half][0], af, bf[0], bf[1]);
        mma_bf16(acc[half][1], af, bf[2], bf[3]);
      }
    }
  } else {  // B: 8 candidates × k32 (two k-steps) per ldmatrix_x4
    const __nv_bfloat16* kb = sm.k + (c0 + (lane & 7)) * kQS + (lane >> 3) * 8 + hf * 256;
#pragma unroll 4
    for (int k0 = 0; k0 < 256; k0 += 32) {
      uint32_t a0[4], a1[4], bf[4];
      ldmatrix_x4(a0, qa + k0);
      ldmatrix_x4(a1, qa + k0 + 16);
      ldmatrix_x4(bf, kb + k0);
      mma_bf16(acc[0][0], a0, bf[0], bf[1]);
      mma_bf16(acc[0][0], a1, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < NN; ++nt) {
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = HALVES == 2 ? acc[0][nt][e] + acc[HALVES - 1][nt][e] : acc[0][nt][e];
    const int row = row0 + (lane >> 2), col = c0 + nt * 8 + (lane & 3) * 2;
    *reinterpret_cast<float2*>(sm.s + row * kSS + col) = make_float2(v[0], v[1]);
    *reinterpret_cast<float2*>(sm.s + (row + 8) * kSS + col) = make_float2(v[2], v[3]);
  }
}

// S partials of the tile, one unit per warp; consecutive warps (→ the four SM sub-partitions)
// take different units. Units past `count` are skipped. Two parts: Ss rows kq·16·head_tiles + head.
//   NT 16:        (tile w % tiles, 16 candidates w / tiles, both halves);
//   2 tiles (NT 8): (half w % 2, tile w / 2 % 2, 16 candidates w / 4);
//   1 tile (NT 4, 8): (half w % 2, 8 candidates w / 2).
template <int NT>
__device__ __forceinline__ void qk_tile(Smem& sm, int head_tiles, int count) {
  const int warp = threadIdx.x >> 5;
  if constexpr (NT == 16) {
    const int mt = warp % head_tiles, cg = warp / head_tiles;
    if (cg < kTile / 16 && cg * 16 < count) qk_unit<2, 2>(sm, mt, cg * 16, 0, mt * 16);
  } else if (NT == 4 || head_tiles == 1) {
    const int kq = warp & 1, c0 = (warp >> 1) * 8;
    if (c0 < count) qk_unit<1, 1>(sm, 0, c0, kq, kq * 16);
  } else {
    const int kq = warp & 1, mt = (warp >> 1) & 1, c0 = (warp >> 2) * 16;
    if (c0 < count) qk_unit<2, 1>(sm, mt, c0, kq, kq * 32 + mt * 16);
  }
}
