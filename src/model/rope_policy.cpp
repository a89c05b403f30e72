#include "model/rope_policy.h"

namespace dsv4::model {

numerics::RopeParams rope_params(const ModelConfig& c, bool compressed) {
  numerics::RopeParams p;
  p.rope_dim = static_cast<int>(c.qk_rope_head_dim);
  if (!compressed) {
    p.base = c.rope_theta;
    return p;
  }
  p.base = c.compress_rope_theta;
  if (c.rope_scaling) {
    p.yarn = true;
    p.factor = c.rope_scaling->factor;
    p.original_seq_len = c.rope_scaling->original_max_position_embeddings;
    p.beta_fast = c.rope_scaling->beta_fast;
    p.beta_slow = c.rope_scaling->beta_slow;
  }
  return p;
}

}  // namespace dsv4::model
