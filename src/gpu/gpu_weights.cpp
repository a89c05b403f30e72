// Weight upload (checkpoint) and dummy generation, sharing one builder over a WeightSource.
#include "gpu/gpu_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/check.h"
#include "gpu/moe_grouped.h"
#include "gpu/ops.h"
#include "gpu/pinned_upload.h"
#include "numerics/formats.h"

namespace dsv4::gpu {
namespace {

using checkpoint::DType;
using checkpoint::TensorView;

// What a small fp32 vector is for (dummy init only).
enum class VecKind { kNorm, kSmall, kZero, kOne };

// The part of a [out, in] matrix (or [n] vector) one tensor-parallel rank holds: rows
// (kRows) or columns (kCols) [rank·len/size, (rank+1)·len/size), or all of it (kAll).
struct Split {
  enum Dim { kAll, kRows, kCols } dim = kAll;
  int rank = 0, size = 1;
  int64_t first(int64_t len) const { return dim == kAll ? 0 : len / size * rank; }
  int64_t count(int64_t len) const { return dim == kAll ? len : len / size; }
  int64_t rows(int64_t out) const { return dim == kRows ? count(out) : out; }
  int64_t cols(int64_t in) const { return dim == kCols ? count(in) : in; }
};

// Shapes below are the checkpoint's (whole) shapes; sources store this rank's part.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual void lin8(const std::string& prefix, int64_t out, int64_t in, Split split, Lin8W& w) = 0;
  // dtype: what the checkpoint stores (spec §3: the mHC `*_fn` are F32, the rest BF16). A
  // checkpoint source takes the file's dtype (either is accepted); the dummy source uses dtype.
  virtual void dense(const std::string& name, int64_t out, int64_t in, DType dtype, DenseW& w) = 0;
  // wo_a [out, in] FP8 with 128×128 scales, in output groups of group_rows: kept as e4m3 + scales
  // where wo_a_stays_fp8 says so, else widened to bf16(fp8·scale) per tile.
  virtual void wo_a(const std::string& prefix, int64_t out, int64_t in, int64_t group_rows, Split split,
                    DenseW& w) = 0;
  virtual void vec(const std::string& name, int64_t n, VecKind kind, Split split, DeviceBuffer<float>& v) = 0;
  virtual void tid2eid(const std::string& name, int64_t n, int experts, DeviceBuffer<int32_t>& v) = 0;
  virtual void embed(const std::string& name, int64_t n, DeviceBuffer<uint16_t>& v) = 0;
  // Expert e's weight (fp4: packed) into its slot of the contiguous buffers (sized for the
  // split shape).
  virtual void expert(const std::string& prefix, int e, bool fp4, int64_t out, int64_t in, Split split,
                      DeviceBuffer<uint8_t>& w, DeviceBuffer<uint8_t>& s) = 0;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// wo_a stays e4m3 + scales (dense_linear_fp8: the same bits as the widened copy, half the bytes)
// when that kernel takes the rank's shape, unless DSV4_WO_A=bf16 asks for the widened copy (A/B
// runs). The checkpoint source also widens when the rank's rows split a 128-row scale block.
bool wo_a_stays_fp8(int64_t rows, int64_t in, int64_t group_rows) {
  static const bool widen = [] {
    const char* v = std::getenv("DSV4_WO_A");
    return v != nullptr && std::string(v) == "bf16";
  }();
  return !widen && dense_linear_fp8_accepts(rows, in, group_rows, in);
}
int64_t fp8_scale_count(int64_t out, int64_t in) { return ceil_div(out, 128) * ceil_div(in, 128); }

// Copies rows [r0, r0+nr) × byte columns [c0, c0+nc) of a row-major [*, row_bytes] array.
std::vector<uint8_t> sub_block(const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t nr, int64_t c0,
                               int64_t nc) {
  std::vector<uint8_t> out(static_cast<size_t>(nr * nc));
  for (int64_t r = 0; r < nr; ++r) std::memcpy(out.data() + r * nc, data + (r0 + r) * row_bytes + c0, nc);
  return out;
}

// The scale blocks (one per `block` values) covering [first, first+count) of a split
// dimension. A rank's part must start on a block boundary or lie inside one block, so
// that local block i is checkpoint block first/block + i.
std::pair<int64_t, int64_t> scale_range(int64_t first, int64_t count, int64_t block, const std::string& name) {
  DSV4_CHECK(first % block == 0 || first % block + count <= block, name, ": tensor-parallel part [", first, ", ",
             first + count, ") splits a ", block, "-wide scale block");
  return {first / block, ceil_div(first % block + count, block)};
}

// Weight + block scales of a split FP8 [out, in] matrix (scales [ceil(out/128), ceil(in/128)]).
void split_fp8(const TensorView& t, const TensorView& s, int64_t out, int64_t in, Split sp, std::vector<uint8_t>& w,
               std::vector<uint8_t>& sc) {
  const auto* wd = reinterpret_cast<const uint8_t*>(t.data);
  const auto* sd = reinterpret_cast<const uint8_t*>(s.data);
  const int64_t r0 = sp.dim == Split::kRows ? sp.first(out) : 0, nr = sp.rows(out);
  const int64_t c0 = sp.dim == Split::kCols ? sp.first(in) : 0, nc = sp.cols(in);
  w = sub_block(wd, in, r0, nr, c0, nc);
  const auto [sr0, snr] = scale_range(r0, nr, 128, t.name);
  const auto [sc0, snc] = scale_range(c0, nc, 128, t.name);
  sc = sub_block(sd, ceil_div(in, 128), sr0, snr, sc0, snc);
}

class CheckpointSource : public WeightSource {
 public:
  CheckpointSource(const checkpoint::Checkpoint& c, PinnedUploader& up) : c_(c), up_(up) {}
  void lin8(const std::string& p, int64_t out, int64_t in, Split sp, Lin8W& w) override {
    const TensorView& t = c_.at(p + ".weight");
    const TensorView& s = c_.at(p + ".scale");
    DSV4_CHECK(t.dtype == DType::kF8_E4M3 && t.shape == std::vector<int64_t>({out, in}), t.name, " shape/dtype");
    w.out = sp.rows(out);
    w.in = sp.cols(in);
    if (sp.dim == Split::kAll) {
      raw(t, w.w);
      raw(s, w.s);
      return;
    }
    std::vector<uint8_t> wv, sv;
    split_fp8(t, s, out, in, sp, wv, sv);
    put(wv.data(), wv.size(), w.w);
    put(sv.data(), sv.size(), w.s);
  }
  void dense(const std::string& name, int64_t out, int64_t in, DType, DenseW& w) override {
    const TensorView& t = c_.at(name);
    DSV4_CHECK(t.dtype == DType::kBF16 || t.dtype == DType::kF32, t.name, " must be BF16 or F32");
    DSV4_CHECK(t.numel() == out * in, t.name, " has ", t.numel(), " values, expected ", out * in);
    w.bf16 = t.dtype == DType::kBF16;
    w.out = out;
    w.in = in;
    raw(t, w.w);
  }
  void wo_a(const std::string& p, int64_t out, int64_t in, int64_t group_rows, Split sp, DenseW& w) override {
    DSV4_CHECK(sp.dim != Split::kCols, p, ": wo_a splits by rows (output groups)");
    const TensorView& t = c_.at(p + ".weight");
    const TensorView& s = c_.at(p + ".scale");
    DSV4_CHECK(t.dtype == DType::kF8_E4M3 && t.shape == std::vector<int64_t>({out, in}), t.name,
               " must be F8_E4M3 [", out, ", ", in, "]");
    DSV4_CHECK(s.nbytes == static_cast<size_t>(fp8_scale_count(out, in)), s.name, " has ", s.nbytes,
               " bytes, expected ", fp8_scale_count(out, in));
    w.bf16 = true;
    w.out = sp.rows(out);
    w.in = in;
    const int64_t o0 = sp.first(out);  // the rank's rows keep whole scale blocks (scale_range's rule)
    const bool whole_blocks = o0 % 128 == 0 || o0 % 128 + w.out <= 128;
    if (whole_blocks && wo_a_stays_fp8(w.out, in, group_rows)) {
      std::vector<uint8_t> wv, sv;
      split_fp8(t, s, out, in, sp, wv, sv);
      put(wv.data(), wv.size(), w.w);
      put(sv.data(), sv.size(), w.s);
      return;
    }
    const auto* q = reinterpret_cast<const uint8_t*>(t.data);
    const auto* sc = reinterpret_cast<const uint8_t*>(s.data);
    const int64_t cols = ceil_div(in, 128), nout = w.out;
    std::vector<uint16_t> bits(static_cast<size_t>(nout * in));
    for (int64_t lo = 0; lo < nout; ++lo) {
      const int64_t o = o0 + lo;
      for (int64_t i = 0; i < in; ++i)
        bits[lo * in + i] = numerics::float_to_bf16_bits(numerics::e4m3_to_float(q[o * in + i]) *
                                                          numerics::e8m0_to_float(sc[(o / 128) * cols + i / 128]));
    }
    put(bits.data(), bits.size() * 2, w.w);
  }
  void vec(const std::string& name, int64_t n, VecKind, Split sp, DeviceBuffer<float>& v) override {
    const TensorView& t = c_.at(name);
    DSV4_CHECK(t.numel() == n, name, " has ", t.numel(), " values, expected ", n);
    std::vector<float> f(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if (t.dtype == DType::kBF16) {
        uint16_t b;
        std::memcpy(&b, t.data + i * 2, 2);
        f[i] = numerics::bf16_bits_to_float(b);
      } else {
        DSV4_CHECK(t.dtype == DType::kF32, name, " must be BF16 or F32");
        std::memcpy(&f[i], t.data + i * 4, 4);
      }
    }
    v.resize(static_cast<size_t>(sp.count(n)));
    up_.copy(v.get(), f.data() + sp.first(n), v.bytes());
  }
  void tid2eid(const std::string& name, int64_t n, int experts, DeviceBuffer<int32_t>& v) override {
    const TensorView& t = c_.at(name);
    DSV4_CHECK(t.numel() == n, name, " size");
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t x;
      if (t.dtype == DType::kI64) {
        std::memcpy(&x, t.data + i * 8, 8);
      } else {
        int32_t y;
        std::memcpy(&y, t.data + i * 4, 4);
        x = y;
      }
      DSV4_CHECK(x >= 0 && x < experts, name, ": expert id ", x, " out of range");
      ids[i] = static_cast<int32_t>(x);
    }
    v.resize(ids.size());
    up_.copy(v.get(), ids.data(), v.bytes());
  }
  void embed(const std::string& name, int64_t n, DeviceBuffer<uint16_t>& v) override {
    const TensorView& t = c_.at(name);
    DSV4_CHECK(t.dtype == DType::kBF16 && t.numel() == n, name, " must be BF16 with ", n, " values");
    v.resize(static_cast<size_t>(n));
    up_.copy(v.get(), t.data, t.nbytes);
  }
  void expert(const std::string& p, int e, bool fp4, int64_t out, int64_t in, Split sp, DeviceBuffer<uint8_t>& w,
              DeviceBuffer<uint8_t>& s) override {
    const TensorView& t = c_.at(p + ".weight");
    const TensorView& sc = c_.at(p + ".scale");
    const size_t wb = static_cast<size_t>(fp4 ? out * in / 2 : out * in);
    const size_t sb = static_cast<size_t>(fp4 ? out * in / 32 : fp8_scale_count(out, in));
    DSV4_CHECK(t.nbytes == wb && sc.nbytes == sb, p, ": unexpected expert tensor sizes");
    if (sp.dim == Split::kAll) {
      up_.copy(w.get() + e * wb, t.data, wb);
      up_.copy(s.get() + e * sb, sc.data, sb);
      return;
    }
    std::vector<uint8_t> wv, sv;
    if (fp4) {  // packed [out, in/2], scales [out, in/32]
      const int64_t r0 = sp.dim == Split::kRows ? sp.first(out) : 0, nr = sp.rows(out);
      const int64_t c0 = sp.dim == Split::kCols ? sp.first(in) : 0, nc = sp.cols(in);
      DSV4_CHECK(c0 % 32 == 0 && nc % 32 == 0, p, ": FP4 column split must keep 32-wide scale blocks");
      wv = sub_block(reinterpret_cast<const uint8_t*>(t.data), in / 2, r0, nr, c0 / 2, nc / 2);
      sv = sub_block(reinterpret_cast<const uint8_t*>(sc.data), in / 32, r0, nr, c0 / 32, nc / 32);
    } else {
      split_fp8(t, sc, out, in, sp, wv, sv);
    }
    up_.copy(w.get() + e * wv.size(), wv.data(), wv.size());
    up_.copy(s.get() + e * sv.size(), sv.data(), sv.size());
  }

 private:
  void raw(const TensorView& t, DeviceBuffer<uint8_t>& b) { put(t.data, t.nbytes, b); }
  void put(const void* host, size_t bytes, DeviceBuffer<uint8_t>& b) {
    b.resize(bytes);
    up_.copy(b.get(), host, bytes);
  }
  const checkpoint::Checkpoint& c_;
  PinnedUploader& up_;
};

class DummySource : public WeightSource {
 public:
  // Replicated tensors get the same values on every rank (as slices of one checkpoint would:
  // the ranks must route, index and mix alike), split tensors values of their own per rank.
  DummySource(uint64_t seed, int tp_rank) : seed_(seed), rank_(tp_rank) {}
  void lin8(const std::string&, int64_t full_out, int64_t full_in, Split sp, Lin8W& w) override {
    const int64_t out = sp.rows(full_out), in = sp.cols(full_in);
    w.out = out;
    w.in = in;
    w.w.resize(static_cast<size_t>(out * in));
    w.s.resize(static_cast<size_t>(fp8_scale_count(out, in)));
    fill_random_e4m3(w.w.get(), out * in, next(sp), nullptr);
    fill_e8m0(w.s.get(), static_cast<int64_t>(w.s.size()), 127 - 7, nullptr);
  }
  void dense(const std::string&, int64_t out, int64_t in, DType dtype, DenseW& w) override {
    fill_dense(out, in, dtype, next(Split{}), w);
  }
  void wo_a(const std::string&, int64_t full_out, int64_t in, int64_t group_rows, Split sp, DenseW& w) override {
    const int64_t out = sp.rows(full_out);
    const uint64_t seed = next(sp);
    if (!wo_a_stays_fp8(out, in, group_rows)) return fill_dense(out, in, DType::kBF16, seed, w);
    w.bf16 = true;
    w.out = out;
    w.in = in;
    w.w.resize(static_cast<size_t>(out * in));
    w.s.resize(static_cast<size_t>(fp8_scale_count(out, in)));
    fill_random_e4m3(w.w.get(), out * in, seed, nullptr);
    fill_e8m0(w.s.get(), static_cast<int64_t>(w.s.size()), 127 - 7, nullptr);
  }
  void vec(const std::string&, int64_t full_n, VecKind kind, Split sp, DeviceBuffer<float>& v) override {
    const int64_t n = sp.count(full_n);
    v.resize(static_cast<size_t>(n));
    const float amp = kind == VecKind::kSmall ? 0.1f : (kind == VecKind::kNorm ? 0.01f : 0.0f);
    const float mean = (kind == VecKind::kNorm || kind == VecKind::kOne) ? 1.0f : 0.0f;
    fill_random_f32(v.get(), n, amp, mean, next(sp), nullptr);
  }
  void tid2eid(const std::string&, int64_t n, int experts, DeviceBuffer<int32_t>& v) override {
    v.resize(static_cast<size_t>(n));
    fill_random_ids(v.get(), n, experts, next(Split{}), nullptr);
  }
  void embed(const std::string&, int64_t n, DeviceBuffer<uint16_t>& v) override {
    v.resize(static_cast<size_t>(n));
    fill_random_bf16(v.get(), n, 1.0f, 0.0f, next(Split{}), nullptr);
  }
  void expert(const std::string&, int e, bool fp4, int64_t full_out, int64_t full_in, Split sp,
              DeviceBuffer<uint8_t>& w, DeviceBuffer<uint8_t>& s) override {
    const int64_t out = sp.rows(full_out), in = sp.cols(full_in);
    const int64_t wb = fp4 ? out * in / 2 : out * in;
    const int64_t sb = fp4 ? out * in / 32 : fp8_scale_count(out, in);
    if (fp4) fill_random_fp4(w.get() + e * wb, wb, next(sp), nullptr);
    else fill_random_e4m3(w.get() + e * wb, wb, next(sp), nullptr);
    fill_e8m0(s.get() + e * sb, sb, fp4 ? 127 - 6 : 127 - 7, nullptr);
  }

 private:
  static void fill_dense(int64_t out, int64_t in, DType dtype, uint64_t seed, DenseW& w) {
    w.bf16 = dtype != DType::kF32;
    w.out = out;
    w.in = in;
    w.w.resize(static_cast<size_t>(out * in * (w.bf16 ? 2 : 4)));
    if (w.bf16) fill_random_bf16(reinterpret_cast<uint16_t*>(w.w.get()), out * in, 0.02f, 0.0f, seed, nullptr);
    else fill_random_f32(reinterpret_cast<float*>(w.w.get()), out * in, 0.02f, 0.0f, seed, nullptr);
  }
  // One seed per tensor, in build order (the same on every rank); split tensors mix in the rank.
  uint64_t next(const Split& sp) {
    const uint64_t base = sp.dim == Split::kAll ? seed_ : seed_ ^ (static_cast<uint64_t>(rank_ + 1) << 32);
    return base * 0x9E3779B97F4A7C15ull + (++counter_);
  }
  uint64_t seed_;
  int rank_;
  uint64_t counter_ = 0;
};

// Whether GpuModel serves this layer's MoE with the grouped kernels (its grouped_moe_usable:
// the same conditions), so its experts must be repacked: FP4 experts, supported shapes (this
// rank's intermediate width), and not DSV4_GPU_MOE=reference (the plain path reads the
// checkpoint layout).
bool grouped_moe_layout(const model::ModelConfig& cfg, bool fp4, int64_t local_inter) {
  static const bool forced_reference = [] {
    const char* v = std::getenv("DSV4_GPU_MOE");
    return v != nullptr && std::string(v) == "reference";
  }();
  return fp4 && !forced_reference &&
         moe_grouped_supports(cfg.hidden_size, local_inter, cfg.n_routed_experts, cfg.num_experts_per_tok);
}

void build_hc(WeightSource& src, const std::string& p, int64_t rows, int64_t in, int64_t base_n,
              int64_t scale_n, HcW& hc) {
  src.dense(p + "_fn", rows, in, DType::kF32, hc.fn);
  src.vec(p + "_base", base_n, VecKind::kSmall, Split{}, hc.base);
  src.vec(p + "_scale", scale_n, VecKind::kNorm, Split{}, hc.scale);
}

void build_compressor(WeightSource& src, const model::ModelConfig& cfg, const std::string& p, int ratio,
                      int h, CompressorW& c) {
  c.ratio = ratio;
  c.head_dim = h;
  c.overlap = ratio == 4;
  const int64_t width = (c.overlap ? 2 : 1) * int64_t{h};
  src.dense(p + ".wkv.weight", width, cfg.hidden_size, DType::kBF16, c.wkv);
  src.dense(p + ".wgate.weight", width, cfg.hidden_size, DType::kBF16, c.wgate);
  src.vec(p + ".ape", ratio * width, VecKind::kSmall, Split{}, c.ape);
  src.vec(p + ".norm.weight", h, VecKind::kNorm, Split{}, c.norm);
}

void build_block(WeightSource& src, const model::ModelConfig& cfg, const std::string& p, int layer, Split rows,
                 Split cols, BlockW& b) {
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult, H = cfg.num_attention_heads, d = cfg.head_dim;
  const int64_t G = cfg.o_groups, ro = cfg.o_lora_rank, E = cfg.n_routed_experts, inter = cfg.moe_intermediate_size;
  src.vec(p + ".attn_norm.weight", D, VecKind::kNorm, Split{}, b.attn_norm);
  src.vec(p + ".ffn_norm.weight", D, VecKind::kNorm, Split{}, b.ffn_norm);
  build_hc(src, p + ".hc_attn", (2 + hc) * hc, hc * D, (2 + hc) * hc, 3, b.hc_attn);
  build_hc(src, p + ".hc_ffn", (2 + hc) * hc, hc * D, (2 + hc) * hc, 3, b.hc_ffn);
  AttentionW& a = b.attn;
  src.vec(p + ".attn.attn_sink", H, VecKind::kZero, rows, a.sink);
  src.lin8(p + ".attn.wq_a", cfg.q_lora_rank, D, Split{}, a.wq_a);
  src.vec(p + ".attn.q_norm.weight", cfg.q_lora_rank, VecKind::kNorm, Split{}, a.q_norm);
  src.lin8(p + ".attn.wq_b", H * d, cfg.q_lora_rank, rows, a.wq_b);
  src.lin8(p + ".attn.wkv", d, D, Split{}, a.wkv);
  src.vec(p + ".attn.kv_norm.weight", d, VecKind::kNorm, Split{}, a.kv_norm);
  src.wo_a(p + ".attn.wo_a", G * ro, H * d / G, ro, rows, a.wo_a);
  src.lin8(p + ".attn.wo_b", D, G * ro, cols, a.wo_b);
  const int ratio = cfg.compress_ratio(layer);
  if (ratio > 0) {
    a.compressor.emplace();
    build_compressor(src, cfg, p + ".attn.compressor", ratio, static_cast<int>(d), *a.compressor);
    if (ratio == 4) {
      a.indexer.emplace();
      src.lin8(p + ".attn.indexer.wq_b", int64_t{cfg.index_n_heads} * cfg.index_head_dim, cfg.q_lora_rank,
               Split{}, a.indexer->wq_b);
      src.dense(p + ".attn.indexer.weights_proj.weight", cfg.index_n_heads, D, DType::kBF16, a.indexer->weights_proj);
      build_compressor(src, cfg, p + ".attn.indexer.compressor", ratio, cfg.index_head_dim,
                       a.indexer->compressor);
    }
  }
  MoeW& m = b.ffn;
  src.dense(p + ".ffn.gate.weight", E, D, DType::kBF16, m.gate);
  if (cfg.is_hash_layer(layer)) {
    src.tid2eid(p + ".ffn.gate.tid2eid", cfg.vocab_size * cfg.num_experts_per_tok, static_cast<int>(E), m.tid2eid);
  } else {
    src.vec(p + ".ffn.gate.bias", E, VecKind::kSmall, Split{}, m.bias);
  }
  ExpertsW& x = m.experts;
  x.fp4 = cfg.expert_dtype == "fp4";
  x.num = static_cast<int>(E);
  const int64_t li = rows.rows(inter);  // this rank's intermediate width
  x.inter = li;
  x.dim = D;
  const int64_t wb = x.fp4 ? li * D / 2 : li * D;
  const int64_t sb = x.fp4 ? li * D / 32 : fp8_scale_count(li, D);
  const int64_t sb2 = x.fp4 ? li * D / 32 : fp8_scale_count(D, li);
  x.w1.resize(E * wb);
  x.w2.resize(E * wb);
  x.w3.resize(E * wb);
  x.s1.resize(E * sb);
  x.s2.resize(E * sb2);
  x.s3.resize(E * sb);
  for (int e = 0; e < E; ++e) {
    const std::string ep = p + ".ffn.experts." + std::to_string(e);
    src.expert(ep + ".w1", e, x.fp4, inter, D, rows, x.w1, x.s1);
    src.expert(ep + ".w2", e, x.fp4, D, inter, cols, x.w2, x.s2);
    src.expert(ep + ".w3", e, x.fp4, inter, D, rows, x.w3, x.s3);
  }
  src.lin8(p + ".ffn.shared_experts.w1", inter, D, rows, m.sw1);
  src.lin8(p + ".ffn.shared_experts.w2", D, inter, cols, m.sw2);
  src.lin8(p + ".ffn.shared_experts.w3", inter, D, rows, m.sw3);
  // The grouped MoE kernels stream the experts in their stage-tile layout: one in-place repack
  // per layer on the device, for checkpoint and dummy weights alike (one path, same streams).
  if (grouped_moe_layout(cfg, x.fp4, li)) {
    CUDA_CHECK(cudaDeviceSynchronize());  // this layer's uploads (uploader stream) have landed
    moe_repack_experts(MoeExpertPtrs{x.w1.get(), x.s1.get(), x.w3.get(), x.s3.get(), x.w2.get(), x.s2.get()}, E,
                       MoeExpertPtrs{m.sw1.w.get(), m.sw1.s.get(), m.sw3.w.get(), m.sw3.s.get(), m.sw2.w.get(),
                                     m.sw2.s.get()},
                       static_cast<int>(D), static_cast<int>(li), nullptr);
    m.grouped_layout = true;
  }
}

std::unique_ptr<GpuWeights> build(WeightSource& src, const model::ModelConfig& cfg, int tp_rank, int tp_size) {
  DSV4_CHECK(cfg.num_attention_heads % tp_size == 0 && cfg.o_groups % tp_size == 0 &&
                 cfg.moe_intermediate_size % tp_size == 0,
             "--tp ", tp_size, " must divide num_attention_heads (", cfg.num_attention_heads, "), o_groups (",
             cfg.o_groups, ") and moe_intermediate_size (", cfg.moe_intermediate_size, ")");
  // Each rank quantizes its part of the wo_b and expert-w2 inputs in 128-wide blocks, as the
  // whole model does: the parts must be whole blocks.
  if (tp_size > 1) {
    const int64_t wo_b_in = int64_t{cfg.o_groups} * cfg.o_lora_rank / tp_size, w2_in = cfg.moe_intermediate_size / tp_size;
    DSV4_CHECK(wo_b_in % 128 == 0 && w2_in % 128 == 0, "--tp ", tp_size, " would give each GPU ", wo_b_in,
               " of o_groups·o_lora_rank and ", w2_in,
               " of moe_intermediate_size; both must be multiples of 128 (the activation quantization block)");
  }
  const Split rows{Split::kRows, tp_rank, tp_size}, cols{Split::kCols, tp_rank, tp_size};
  auto w = std::make_unique<GpuWeights>();
  const int64_t D = cfg.hidden_size, hc = cfg.hc_mult;
  src.embed("embed.weight", cfg.vocab_size * D, w->embed);
  src.dense("head.weight", cfg.vocab_size, D, DType::kBF16, w->head);
  src.vec("norm.weight", D, VecKind::kNorm, Split{}, w->norm);
  build_hc(src, "hc_head", hc, hc * D, hc, 1, w->hc_head);
  w->layers.resize(static_cast<size_t>(cfg.num_layers()));
  for (int l = 0; l < cfg.num_layers(); ++l) build_block(src, cfg, "layers." + std::to_string(l), l, rows, cols, w->layers[l]);
  w->mtp.resize(static_cast<size_t>(cfg.num_nextn_predict_layers));
  for (int i = 0; i < cfg.num_nextn_predict_layers; ++i) {
    const std::string p = "mtp." + std::to_string(i);
    MtpW& m = w->mtp[i];
    build_block(src, cfg, p, cfg.num_layers() + i, rows, cols, m.block);
    src.lin8(p + ".e_proj", D, D, Split{}, m.e_proj);
    src.lin8(p + ".h_proj", D, D, Split{}, m.h_proj);
    src.vec(p + ".enorm.weight", D, VecKind::kNorm, Split{}, m.enorm);
    src.vec(p + ".hnorm.weight", D, VecKind::kNorm, Split{}, m.hnorm);
    src.vec(p + ".norm.weight", D, VecKind::kNorm, Split{}, m.norm);
    build_hc(src, p + ".hc_head", hc, hc * D, hc, 1, m.hc_head);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  w->total_bytes = total_b - free_b;
  return w;
}

}  // namespace

std::unique_ptr<GpuWeights> upload_weights(const checkpoint::Checkpoint& ckpt, const model::ModelConfig& config,
                                           int tp_rank, int tp_size) {
  // Expected bytes on this rank (progress line only): routed experts and wo_a are split (wo_a
  // widened to bf16 unless it stays FP8), everything else is whole.
  const int64_t ro = config.o_lora_rank, wo_a_in = int64_t{config.num_attention_heads} * config.head_dim / config.o_groups;
  const double wo_a_widen = wo_a_stays_fp8(config.o_groups * ro / tp_size, wo_a_in, ro) ? 1.0 : 2.0;
  double expected = 0;
  for (const auto& name : ckpt.names()) {
    const double b = static_cast<double>(ckpt.at(name).nbytes);
    if (name.find(".experts.") != std::string::npos) expected += b / tp_size;
    else if (name.find(".wo_a.weight") != std::string::npos) expected += wo_a_widen * b / tp_size;
    else expected += b;
  }
  const auto chunk = static_cast<size_t>(std::clamp(expected / 4, double(1 << 20), double(64 << 20)));
  PinnedUploader up(expected, tp_rank == 0 && expected > double(1u << 30), chunk);
  CheckpointSource src(ckpt, up);
  auto w = build(src, config, tp_rank, tp_size);
  up.finish();
  return w;
}

std::unique_ptr<GpuWeights> dummy_weights(const model::ModelConfig& config, uint64_t seed, int tp_rank,
                                          int tp_size) {
  DummySource src(seed, tp_rank);
  return build(src, config, tp_rank, tp_size);
}

}  // namespace dsv4::gpu
