// The 584-byte FP8 KV entry layout (spec §5.3, FlashMLA "MODEL1") — the one definition used by
// GpuModel's main KV caches (window ring, compressed CSA/HCA entries) and by the sm_90a sparse
// decode attention (sparse_decode.h).
//
// Entry (512 dims = 448 no-rope + 64 rope): 448 e4m3 codes (seven 64-value tiles) + 64 bf16
// rope values (128 B) = 576 data bytes, and 7 E8M0 tile scales + 1 pad byte (0) = 8 scale
// bytes. Entries live in pages of `page_size` entries: a page is [page_size × 576 data bytes]
// then [page_size × 8 scale bytes], padded to a multiple of 576 bytes. Entry e is page
// e / page_size, slot e % page_size.
//
// Values: code · 2^(scale − 127) for the no-rope dims, the bf16 value for the rope dims.
// Encoding (device: kv_fp8.cuh, host: kv_encode_entry_host) takes a row of bf16-valued floats
// and stores exactly its Q8 simulation (numerics::simulate_q8, block 64 on the first 448 dims:
// tile scale s = 2^ceil(log2(max(amax, 1e-4) · fp32(1/448))), the reference clamp). Since the
// simulation is idempotent, a row that is already Q8-simulated (what the model caches) is
// stored bit-exactly: decode(encode(x)) == x. Proof: for y = simulate(x) with scale s, every
// y_i / s is an e4m3 value and max|y_i| / s = M ∈ [224, 448] (or s is the 1e-4 floor scale
// 2^-22); re-encoding picks s' = s for M > 224 and s' = s / 2 for M = 224 (fp32(224·(1/448))
// rounds to 0.5), and 2·(e4m3 value ≤ 224) is again an e4m3 value, so y_i / s' is encoded
// without rounding; code · s' is exact in fp32 (≤ 4 significant bits, ≥ 2^-31) and already
// bf16. kv_fp8_test checks this over every tile maximum.
//
// GpuModel caches: pages of kKvCachePage entries, one contiguous buffer per (sequence, layer,
// cache): kv_cache_bytes(entries) bytes, entry e at kv_cache_data_offset(e) /
// kv_cache_scale_offset(e) from the buffer start.
// Thread-safety: pure functions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::gpu {

constexpr int kKvDim = 512;         // entry width (head_dim)
constexpr int kKvNopeDim = 448;     // FP8 part (7 tiles of 64)
constexpr int kKvRopeDim = 64;      // bf16 part
constexpr int kKvTile = 64;         // values per E8M0 scale
constexpr int kKvTiles = kKvNopeDim / kKvTile;
constexpr int kKvEntryData = 576;   // 448 fp8 + 128 B rope
constexpr int kKvEntryScales = 8;   // 7 E8M0 + pad
constexpr int kKvEntryBytes = kKvEntryData + kKvEntryScales;  // 584
static_assert(kKvNopeDim + 2 * kKvRopeDim == kKvEntryData && kKvTiles + 1 == kKvEntryScales);

struct KvPool {
  uint8_t* base = nullptr;
  int page_size = 64;       // entries per page
  int64_t page_stride = 0;  // bytes per page (multiple of 576)
};

__host__ __device__ constexpr int64_t kv_page_stride(int page_size) {
  const int64_t raw = int64_t(page_size) * kKvEntryBytes;
  return (raw + kKvEntryData - 1) / kKvEntryData * kKvEntryData;
}
__host__ __device__ constexpr int64_t kv_data_offset(int page_size, int64_t page_stride, int64_t e) {
  return (e / page_size) * page_stride + (e % page_size) * kKvEntryData;
}
__host__ __device__ constexpr int64_t kv_scale_offset(int page_size, int64_t page_stride, int64_t e) {
  return (e / page_size) * page_stride + int64_t(page_size) * kKvEntryData + (e % page_size) * kKvEntryScales;
}
__host__ __device__ inline int64_t kv_data_offset(const KvPool& p, int64_t e) {
  return kv_data_offset(p.page_size, p.page_stride, e);
}
__host__ __device__ inline int64_t kv_scale_offset(const KvPool& p, int64_t e) {
  return kv_scale_offset(p.page_size, p.page_stride, e);
}
// Bytes for `entries` entries (whole pages).
__host__ __device__ constexpr int64_t kv_pool_bytes(int64_t entries, int page_size) {
  return (entries + page_size - 1) / page_size * kv_page_stride(page_size);
}

// ---- GpuModel caches: fixed pages of 64 entries (37,440 B = 585 B per entry) -------------
constexpr int kKvCachePage = 64;
constexpr int64_t kKvCachePageStride = kv_page_stride(kKvCachePage);
__host__ __device__ constexpr int64_t kv_cache_data_offset(int64_t e) {
  return kv_data_offset(kKvCachePage, kKvCachePageStride, e);
}
__host__ __device__ constexpr int64_t kv_cache_scale_offset(int64_t e) {
  return kv_scale_offset(kKvCachePage, kKvCachePageStride, e);
}
__host__ __device__ constexpr int64_t kv_cache_bytes(int64_t entries) { return kv_pool_bytes(entries, kKvCachePage); }
// A cache buffer as a KvPool (for the sm_90a sparse decode kernels).
inline KvPool kv_cache_pool(uint8_t* base) { return KvPool{base, kKvCachePage, kKvCachePageStride}; }

// ---- host codec (kv_fp8.cpp; bit-identical to the device one) ---------------------------
// x: 512 bf16-valued floats → 576 data bytes at `data`, 8 scale bytes at `scales`.
void kv_encode_entry_host(const float* x, uint8_t* data, uint8_t* scales);
// The 512 values of an entry.
void kv_decode_entry_host(const uint8_t* data, const uint8_t* scales, float* x);
// Decodes entries [0, count) of a GpuModel cache image (kv_cache_bytes(≥ count) bytes,
// e.g. a downloaded GpuLayerCache::window / compressed) into out [count, 512].
void kv_cache_decode_host(const uint8_t* cache, int64_t count, float* out);

}  // namespace dsv4::gpu
