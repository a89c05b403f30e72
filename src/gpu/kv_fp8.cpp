// Host codec of the 584-byte FP8 KV entry (kv_fp8.h): the same arithmetic as the device
// encoder in kv_fp8.cuh (numerics::q8_block_scale, RNE e4m3 with the ±448 clamp, bf16 bits).
#include "gpu/kv_fp8.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "numerics/formats.h"
#include "numerics/quant.h"

namespace dsv4::gpu {

void kv_encode_entry_host(const float* x, uint8_t* data, uint8_t* scales) {
  for (int t = 0; t < kKvTiles; ++t) {
    const float* tile = x + t * kKvTile;
    float amax = 0.0f;
    for (int i = 0; i < kKvTile; ++i) amax = std::max(amax, std::fabs(tile[i]));
    const float s = numerics::q8_block_scale(amax);  // reference clamp: max(amax, 1e-4) / 448
    for (int i = 0; i < kKvTile; ++i)
      data[t * kKvTile + i] = numerics::float_to_e4m3(std::clamp(tile[i] / s, -448.0f, 448.0f));
    scales[t] = static_cast<uint8_t>(std::bit_cast<uint32_t>(s) >> 23);  // 2^k → k + 127
  }
  for (int i = 0; i < kKvRopeDim; ++i) {
    const uint16_t b = numerics::float_to_bf16_bits(x[kKvNopeDim + i]);
    data[kKvNopeDim + 2 * i] = static_cast<uint8_t>(b & 0xff);
    data[kKvNopeDim + 2 * i + 1] = static_cast<uint8_t>(b >> 8);
  }
  scales[kKvTiles] = 0;
}

void kv_decode_entry_host(const uint8_t* data, const uint8_t* scales, float* x) {
  for (int i = 0; i < kKvNopeDim; ++i) {
    const float s = std::bit_cast<float>(uint32_t{scales[i / kKvTile]} << 23);
    x[i] = numerics::e4m3_to_float(data[i]) * s;
  }
  for (int i = 0; i < kKvRopeDim; ++i) {
    const auto b = static_cast<uint16_t>(data[kKvNopeDim + 2 * i] | (data[kKvNopeDim + 2 * i + 1] << 8));
    x[kKvNopeDim + i] = numerics::bf16_bits_to_float(b);
  }
}

void kv_cache_decode_host(const uint8_t* cache, int64_t count, float* out) {
  for (int64_t e = 0; e < count; ++e)
    kv_decode_entry_host(cache + kv_cache_data_offset(e), cache + kv_cache_scale_offset(e), out + e * kKvDim);
}

}  // namespace dsv4::gpu
