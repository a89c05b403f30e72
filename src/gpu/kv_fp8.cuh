// Device codec of the 584-byte FP8 KV entry (kv_fp8.h): a warp-wide encoder (cache writes:
// window ring, compressor finish, sm_90a kv_cache_insert) and a per-value decoder (the
// reference sparse attention's reads). Bit-identical to the host codec in kv_fp8.cpp.
// No a·b+c anywhere, so the result does not depend on --fmad.
#pragma once

#include <cstdint>

#include "gpu/device_math.cuh"
#include "gpu/kv_fp8.h"

namespace dsv4::gpu {

// One part of an entry's encoding by one warp (all 32 lanes; lane = lane id): part t < kKvTiles
// is 64-value tile t (its amax, E8M0 scale and e4m3 codes), part kKvTiles the bf16 rope dims.
// Lane i owns values 2i, 2i+1 of the part. The parts are independent: any warps may take them.
__device__ __forceinline__ void kv_encode_part_warp(const float* x, uint8_t* data, uint8_t* scales, int t, int lane) {
  if (t < kKvTiles) {
    const float v0 = x[t * kKvTile + 2 * lane], v1 = x[t * kKvTile + 2 * lane + 1];
    const float amax = warp_max(fmaxf(fabsf(v0), fabsf(v1)));
    const float s = q8_block_scale(amax);  // reference clamp: max(amax, 1e-4) / 448
    const uint32_t c0 = float_to_e4m3(fminf(fmaxf(v0 / s, -448.0f), 448.0f));
    const uint32_t c1 = float_to_e4m3(fminf(fmaxf(v1 / s, -448.0f), 448.0f));
    reinterpret_cast<uint16_t*>(data + t * kKvTile)[lane] = uint16_t(c0 | (c1 << 8));
    if (lane == 0) scales[t] = uint8_t(__float_as_uint(s) >> 23);
    return;
  }
  const uint32_t r0 = __float_as_uint(round_bf16(x[kKvNopeDim + 2 * lane])) >> 16;
  const uint32_t r1 = __float_as_uint(round_bf16(x[kKvNopeDim + 2 * lane + 1])) >> 16;
  reinterpret_cast<uint32_t*>(data + kKvNopeDim)[lane] = r0 | (r1 << 16);
  if (lane == 0) scales[kKvTiles] = 0;
}

// Encodes x[0, 512) (bf16-valued floats) into an entry; called by all 32 lanes of one warp.
__device__ __forceinline__ void kv_encode_entry_warp(const float* x, uint8_t* data, uint8_t* scales, int lane) {
  for (int t = 0; t <= kKvTiles; ++t) kv_encode_part_warp(x, data, scales, t, lane);
}

// E8M0 tile scale → 2^(e − 127) (e ∈ [105, 254] for encoded entries; 0 → 0 in zeroed ones).
__device__ __forceinline__ float kv_tile_scale(uint8_t e) { return __uint_as_float(uint32_t(e) << 23); }

// Value k ∈ [0, 512) of an entry: exact (code · 2^k has ≤ 4 significant bits).
__device__ __forceinline__ float kv_decode_value(const uint8_t* data, const uint8_t* scales, int k) {
  if (k < kKvNopeDim) return e4m3_to_float(data[k]) * kv_tile_scale(scales[k / kKvTile]);
  const uint16_t* rope = reinterpret_cast<const uint16_t*>(data + kKvNopeDim);
  return bf16_bits_to_float(rope[k - kKvNopeDim]);
}

// One KV row as the reference attention reads it: an fp32 row (this call's new KV) or an FP8
// cache entry; all null = no candidate. Plain struct (usable in __shared__ arrays).
struct KvRow {
  const float* f32;
  const uint8_t* data;
  const uint8_t* scales;
};
__device__ __forceinline__ KvRow kv_row_f32(const float* p) { return KvRow{p, nullptr, nullptr}; }
// Entry e of a GpuModel cache buffer (pages of kKvCachePage).
__device__ __forceinline__ KvRow kv_row_cache(const uint8_t* cache, int64_t e) {
  return KvRow{nullptr, cache + kv_cache_data_offset(e), cache + kv_cache_scale_offset(e)};
}
__device__ __forceinline__ bool kv_row_valid(const KvRow& r) { return r.f32 != nullptr || r.data != nullptr; }
__device__ __forceinline__ float kv_row_value(const KvRow& r, int k) {
  return r.f32 != nullptr ? r.f32[k] : kv_decode_value(r.data, r.scales, k);
}

}  // namespace dsv4::gpu
