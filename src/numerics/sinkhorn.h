// Hyper-connection mixing split (kernel hc_split_sinkhorn, spec §4.3), one token.
//
// mixes: n·(2+n) fp32 values (already scaled by the stream RMS). For n = hc_mult:
//   pre[i]  = sigmoid(fma(mixes[i], scale[0], base[i])) + eps
//   post[i] = 2·sigmoid(fma(mixes[n+i], scale[1], base[n+i]))          (no eps)
//   C[i][j] = fma(mixes[2n+n·i+j], scale[2], base[2n+n·i+j])
//   C ← row_softmax(C) + eps; C ← C / (colsum + eps);
//   then (iters−1) times: C ← C / (rowsum + eps); C ← C / (colsum + eps).
// Row i = input stream, column j = output stream.
#pragma once

#include <span>

namespace dsv4::numerics {

void hc_split_sinkhorn(std::span<const float> mixes, std::span<const float> scale,
                       std::span<const float> base, int n, int iters, float eps,
                       std::span<float> pre, std::span<float> post, std::span<float> comb);

}  // namespace dsv4::numerics
