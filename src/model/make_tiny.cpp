#include "model/make_tiny.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string_view>
#include <unordered_map>

#include "base/check.h"
#include "checkpoint/safetensors_writer.h"
#include "model/tensor_inventory.h"
#include "numerics/formats.h"

namespace dsv4::model {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoint bytes are little-endian");

using checkpoint::DType;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// Normal deviates from mt19937_64 via Box–Muller (no std:: distributions: their output is
// implementation-defined).
class NormalRng {
 public:
  NormalRng(uint64_t seed, std::string_view name) : gen_(splitmix64(seed ^ fnv1a(name))) {}
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(gen_() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(gen_() >> 11) * 0x1.0p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }
  uint64_t below(uint64_t n) { return gen_() % n; }

 private:
  std::mt19937_64 gen_;
  double spare_ = 0;
  bool has_spare_ = false;
};

struct Init {
  double mean, std;
};

// Distribution of the fp32 master of tensor `name` (see make_tiny.h).
Init init_for(std::string_view name) {
  auto ends = [&](std::string_view s) { return name.ends_with(s); };
  auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
  if (name == "embed.weight") return {0.0, 1.0};
  if (ends("norm.weight")) return {1.0, 0.01};
  if (ends("attn_sink")) return {0.0, 1.0};
  if (has("hc_") && ends("fn")) return {0.0, 0.01};
  if (has("hc_") && ends("base")) return {0.0, 0.1};
  if (has("hc_") && ends("scale")) return {1.0, 0.01};
  if (ends(".ape")) return {0.0, 0.1};
  if (ends("gate.bias")) return {0.0, 0.1};
  if (has(".experts.0.w1.") || has(".experts.0.w3.")) return {0.0, 0.8};
  return {0.0, 0.02};
}

std::vector<float> draw(uint64_t seed, const std::string& name, int64_t n) {
  NormalRng rng(seed, name);
  const Init init = init_for(name);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) v = static_cast<float>(init.mean + init.std * rng.normal());
  return out;
}

template <class T>
std::vector<std::byte> to_bytes(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Exponent e of the power-of-two scale 2^e >= amax / qmax, clamped to the E8M0 range.
int scale_exponent(float amax, float qmax) {
  const float x = std::max(amax / qmax, std::numeric_limits<float>::min());  // normal, > 0
  return std::clamp(numerics::ceil_log2_bits(x), -127, 127);
}

}  // namespace

void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, uint8_t* weight,
                         uint8_t* scale) {
  const int64_t col_tiles = (cols + 127) / 128;
  for (int64_t r0 = 0; r0 < rows; r0 += 128) {
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      const int64_t r1 = std::min(rows, r0 + 128), c1 = std::min(cols, c0 + 128);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const int e = scale_exponent(amax, 448.0f);
      scale[(r0 / 128) * col_tiles + c0 / 128] = static_cast<uint8_t>(e + 127);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          weight[r * cols + c] = numerics::float_to_e4m3(std::ldexp(w[r * cols + c], -e));
    }
  }
}

void quantize_fp4_rows(const float* w, int64_t rows, int64_t cols, uint8_t* packed,
                       uint8_t* scale) {
  DSV4_CHECK(cols % 32 == 0, "quantize_fp4_rows: cols ", cols, " is not a multiple of 32");
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    for (int64_t b = 0; b < cols / 32; ++b) {
      float amax = 0;
      for (int64_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(row[b * 32 + k]));
      const int e = scale_exponent(amax, 6.0f);
      scale[r * (cols / 32) + b] = static_cast<uint8_t>(e + 127);
      for (int64_t k = 0; k < 32; k += 2) {
        const int64_t j = b * 32 + k;
        const uint8_t lo = numerics::float_to_e2m1(std::ldexp(row[j], -e));
        const uint8_t hi = numerics::float_to_e2m1(std::ldexp(row[j + 1], -e));
        packed[r * (cols / 2) + j / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

std::vector<std::byte> make_tiny_checkpoint_bytes(const ModelConfig& cfg, uint64_t seed) {
  cfg.validate();
  const std::vector<ExpectedTensor> inventory = expected_tensors(cfg);
  std::unordered_map<std::string_view, const ExpectedTensor*> by_name;
  for (const auto& t : inventory) by_name.emplace(t.name, &t);

  checkpoint::SafetensorsWriter writer;
  writer.set_metadata("generator", "dsv4 make-tiny");
  writer.set_metadata("seed", std::to_string(seed));
  for (const ExpectedTensor& t : inventory) {
    int64_t numel = 1;
    for (int64_t s : t.shape) numel *= s;
    switch (t.dtype) {
      case DType::kF8_E8M0:
        break;  // written together with its .weight
      case DType::kF8_E4M3:
      case DType::kI8: {
        const std::string base = t.name.substr(0, t.name.size() - std::string_view(".weight").size());
        const ExpectedTensor* s = by_name.at(base + ".scale");
        const int64_t rows = t.shape[0];
        const int64_t cols = t.dtype == DType::kI8 ? t.shape[1] * 2 : t.shape[1];
        const std::vector<float> w = draw(seed, t.name, rows * cols);
        std::vector<uint8_t> q(static_cast<size_t>(numel));
        std::vector<uint8_t> sc(static_cast<size_t>(s->shape[0] * s->shape[1]));
        if (t.dtype == DType::kI8) quantize_fp4_rows(w.data(), rows, cols, q.data(), sc.data());
        else quantize_fp8_blocks(w.data(), rows, cols, q.data(), sc.data());
        writer.add(t.name, t.dtype, t.shape, to_bytes(q));
        writer.add(s->name, s->dtype, s->shape, to_bytes(sc));
        break;
      }
      case DType::kBF16: {
        const std::vector<float> w = draw(seed, t.name, numel);
        std::vector<uint16_t> bits(w.size());
        for (size_t i = 0; i < w.size(); ++i) bits[i] = numerics::float_to_bf16_bits(w[i]);
        writer.add(t.name, t.dtype, t.shape, to_bytes(bits));
        break;
      }
      case DType::kF32:
        writer.add(t.name, t.dtype, t.shape, to_bytes(draw(seed, t.name, numel)));
        break;
      case DType::kI64: {  // tid2eid [vocab, k]: k distinct expert ids per row
        NormalRng rng(seed, t.name);
        const int64_t k = t.shape[1], n = cfg.n_routed_experts;
        std::vector<int64_t> ids(static_cast<size_t>(numel));
        std::vector<int64_t> perm(static_cast<size_t>(n));
        for (int64_t row = 0; row < t.shape[0]; ++row) {
          for (int64_t x = 0; x < n; ++x) perm[x] = x;
          for (int64_t j = 0; j < k; ++j) {  // partial Fisher–Yates
            const int64_t pick = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - j)));
            std::swap(perm[j], perm[pick]);
            ids[row * k + j] = perm[j];
          }
        }
        writer.add(t.name, t.dtype, t.shape, to_bytes(ids));
        break;
      }
      default:
        DSV4_FAIL("make-tiny: no generator for tensor ", t.name, " of dtype ",
                  checkpoint::dtype_name(t.dtype));
    }
  }
  return writer.serialize();
}

void write_tiny_checkpoint(const std::filesystem::path& config_path, uint64_t seed,
                           const std::filesystem::path& out_dir) {
  namespace fs = std::filesystem;
  const ModelConfig cfg = ModelConfig::from_file(config_path);
  const std::vector<std::byte> bytes = make_tiny_checkpoint_bytes(cfg, seed);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  DSV4_CHECK(!ec, "cannot create ", out_dir.string(), ": ", ec.message());
  const fs::path out_config = out_dir / "config.json";
  if (!(fs::exists(out_config) && fs::equivalent(config_path, out_config))) {
    fs::copy_file(config_path, out_config, fs::copy_options::overwrite_existing, ec);
    DSV4_CHECK(!ec, "cannot copy ", config_path.string(), " to ", out_config.string(), ": ",
               ec.message());
  }
  const fs::path out_model = out_dir / "model.safetensors";
  std::FILE* f = std::fopen(out_model.c_str(), "wb");
  DSV4_CHECK(f != nullptr, out_model.string(), ": cannot open for writing");
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  DSV4_CHECK(written == bytes.size() && closed, out_model.string(), ": write of ", bytes.size(),
             " bytes failed");
}

}  // namespace dsv4::model
