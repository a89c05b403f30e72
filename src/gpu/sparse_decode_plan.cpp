// Host side of the sm_90a sparse decode attention: the split plan (sparse_decode.h). Pure
// arithmetic on upper bounds, except that max_cluster = 0 asks the device which clusters it
// holds at once (sparse_decode_cluster_capacity, sm90_sparse_decode.cu).
#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "gpu/sparse_decode.h"

namespace dsv4::gpu::sm90 {

namespace {
int floor_pow2(int x) {
  int p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}
}  // namespace

int sparse_decode_cluster_limit(int split_rows) {
  for (int c = kMaxCluster; c >= 4; c /= 2)
    if (split_rows <= sparse_decode_cluster_capacity(c)) return c;
  return sparse_decode_cluster_capacity(2) > 0 ? 2 : 1;
}

SparseDecodePlan plan_sparse_decode(int rows, int max_main, int max_extra, int num_sms,
                                    int min_chunk, int heads, int split_rows, int max_cluster,
                                    int head_groups) {
  DSV4_CHECK(rows > 0 && min_chunk > 0 && min_chunk % 16 == 0, "bad plan inputs: rows ", rows,
             " min_chunk ", min_chunk);
  DSV4_CHECK(heads >= 1 && heads <= kHeads, "sparse decode: ", heads, " heads (1..", kHeads, ")");
  if (split_rows < rows) split_rows = rows;
  const bool auto_cluster = max_cluster <= 0;
  if (auto_cluster) max_cluster = sparse_decode_cluster_limit(split_rows);
  max_cluster = floor_pow2(std::min(max_cluster, kMaxCluster));
  SparseDecodePlan p;
  p.rows = rows;
  p.heads = heads;
  p.min_chunk = min_chunk;
  p.max_main = max_main;
  p.max_extra = max_extra;
  p.max_cands = max_main + max_extra;
  const int by_len = std::max(1, (p.max_cands + min_chunk - 1) / min_chunk);
  const int by_sms = std::max(1, (num_sms + split_rows - 1) / split_rows);
  const int splits = std::min({by_len, by_sms, kMaxSplits});
  if (splits <= max_cluster) {  // few splits: all of them in one cluster
    p.splits = p.cluster = floor_pow2(splits);
  } else if (max_cluster >= 2 && (2 * max_cluster >= splits ||
                                  (p.max_cands + max_cluster - 1) / max_cluster <= kClusterMaxChunk)) {
    p.splits = p.cluster = max_cluster;  // about as many CTAs, or short lists: the largest cluster
  } else {
    p.splits = splits;  // long lists: global partials and the merge kernel
    p.cluster = 1;
  }
  // In-cluster merge: chunks of 8 (e.g. CSA B=1: 640 / 16 = 40, not 48 per CTA); the merge
  // kernel keeps 16 (and whole 64-candidate tiles above 64).
  p.chunk_align = p.cluster > 1 ? 8 : 16;
  const int align = p.chunk_align;
  int chunk = ((p.max_cands + p.splits - 1) / p.splits + align - 1) / align * align;
  if (p.cluster == 1 && chunk > kSplitTile) chunk = (chunk + kSplitTile - 1) / kSplitTile * kSplitTile;  // row_chunk
  p.chunk = std::max(chunk, min_chunk);
  // Head groups (cluster merge only): 4 or 2 when the CTAs fit in one wave (and, for the
  // device's own cluster choice, its clusters are resident at once).
  const int tiles = (heads + 15) / 16;
  // Many rows: the warp-specialized kernel (all the row's heads in one CTA, clusters ≤ 8).
  p.warp_specialized = split_rows >= kWsMinRows && p.cluster <= 8;
  int groups = p.warp_specialized ? 1 : head_groups;
  if (groups <= 0) {
    groups = 1;
    if (p.cluster > 1)
      for (int g = 4; g >= 2; g /= 2)
        if (g <= tiles && int64_t(split_rows) * g * p.splits <= num_sms &&
            (!auto_cluster || split_rows * g <= sparse_decode_cluster_capacity(p.cluster))) {
          groups = g;
          break;
        }
  }
  if (p.cluster == 1 && p.splits > 1) groups = 1;  // the merge kernel's partials: one group
  groups = std::clamp(groups, 1, tiles);
  p.group_tiles = (tiles + groups - 1) / groups;
  p.head_groups = (tiles + p.group_tiles - 1) / p.group_tiles;
  p.workspace_bytes = p.splits == 1 || p.cluster > 1
                          ? 0
                          : size_t(rows) * p.splits * heads * (kHeadDim + 2) * sizeof(float);
  return p;
}

size_t sparse_decode_workspace_bound(int split_rows, int heads, int num_sms) {
  return size_t(num_sms + split_rows) * heads * (kHeadDim + 2) * sizeof(float);
}

}  // namespace dsv4::gpu::sm90
