// make-tiny: determinism, quantizer formulas, inventory conformance, embedded model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/check.h"
#include "model/embedded_model.h"
#include "model/make_tiny.h"
#include "model/tensor_inventory.h"
#include "numerics/formats.h"

namespace dsv4::model {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = DSV4_GOLDEN_DIR;

ModelConfig small_config() {
  auto j = embedded_tiny_config_json();
  j["vocab_size"] = 512;
  return ModelConfig::from_json(j);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(MakeTiny, Fp4NibbleOrderAndScale) {
  std::vector<float> w(64, 0.0f);
  w[0] = 0.5f;    // block 0: amax 3 -> scale 2^ceil(log2(3/6)) = 2^-1; 0.5/0.5 = 1 -> code 2
  w[1] = -3.0f;   //                                                   -3/0.5 = -6 -> code 15
  w[2] = 0.25f;   // 0.5 -> code 1
  w[32] = 12.0f;  // block 1: amax 12 -> scale 2^1; 12/2 = 6 -> code 7
  w[33] = 1.0f;   // 0.5 -> code 1
  w[63] = -2.0f;  // -1 -> code 10
  std::vector<uint8_t> packed(32), scale(2);
  quantize_fp4_rows(w.data(), 1, 64, packed.data(), scale.data());
  EXPECT_EQ(scale[0], 126);
  EXPECT_EQ(scale[1], 128);
  EXPECT_EQ(packed[0], 0xF2);  // element 0 low nibble, element 1 high nibble
  EXPECT_EQ(packed[1], 0x01);
  EXPECT_EQ(packed[16], 0x17);
  EXPECT_EQ(packed[31], 0xA0);
  for (int k = 0; k < 64; ++k) {
    const float v = numerics::e2m1_to_float(numerics::fp4_nibble(packed.data(), k)) *
                    numerics::e8m0_to_float(scale[k / 32]);
    EXPECT_EQ(v, w[k]) << k;
  }
  std::vector<uint8_t> zero_packed(16), zero_scale(1);
  std::vector<float> zeros(32, 0.0f);
  quantize_fp4_rows(zeros.data(), 1, 32, zero_packed.data(), zero_scale.data());
  EXPECT_EQ(zero_packed[0], 0);
}

TEST(MakeTiny, Fp8TileScale) {
  // One row, 130 columns: tiles [0,128) and a ragged [128,130).
  std::vector<float> w(130, 0.0f);
  w[5] = 3.0f * 448.0f;  // amax 1344 -> scale 2^ceil(log2(3)) = 4
  w[6] = 1.0f;
  w[7] = 1280.0f;  // 320 after scaling: exact in e4m3
  w[129] = 1.0f;  // amax 1 -> 2^ceil(log2(1/448)) = 2^-8
  std::vector<uint8_t> q(130), s(2);
  quantize_fp8_blocks(w.data(), 1, 130, q.data(), s.data());
  EXPECT_EQ(s[0], 127 + 2);
  EXPECT_EQ(s[1], 127 - 8);
  EXPECT_EQ(q[5], numerics::float_to_e4m3(336.0f));
  EXPECT_EQ(q[6], numerics::float_to_e4m3(0.25f));
  EXPECT_EQ(q[129], numerics::float_to_e4m3(256.0f));
  EXPECT_EQ(numerics::e4m3_to_float(q[7]) * numerics::e8m0_to_float(s[0]), 1280.0f);
}

TEST(MakeTiny, DeterministicPerSeed) {
  const ModelConfig cfg = small_config();
  const auto a = make_tiny_checkpoint_bytes(cfg, 7);
  const auto b = make_tiny_checkpoint_bytes(cfg, 7);
  const auto c = make_tiny_checkpoint_bytes(cfg, 8);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

TEST(MakeTiny, GoldenConfigsVerify) {
  int found = 0;
  for (const char* set : {"tiny-c4", "tiny-c4-w16", "tiny-calm"}) {
    const fs::path p = kGolden / set / "config.json";
    if (!fs::exists(p)) continue;
    ++found;
    const ModelConfig cfg = ModelConfig::from_file(p);
    const auto ckpt = checkpoint::Checkpoint::from_buffer(make_tiny_checkpoint_bytes(cfg, 1), set);
    EXPECT_EQ(ckpt.size(), 427u);
    EXPECT_NO_THROW(verify_checkpoint(ckpt, cfg)) << set;
  }
  if (found == 0) GTEST_SKIP() << "no golden configs under " << kGolden;
}

TEST(MakeTiny, WeightStatistics) {
  const ModelConfig cfg = small_config();
  const auto ckpt = checkpoint::Checkpoint::from_buffer(make_tiny_checkpoint_bytes(cfg, 5), "s");
  // embed ~ N(0, 1) in BF16.
  const auto embed = ckpt.at("embed.weight").copy_as<uint16_t>();
  double sum = 0, sq = 0;
  for (uint16_t b : embed) {
    const double v = numerics::bf16_bits_to_float(b);
    sum += v;
    sq += v * v;
  }
  const double n = static_cast<double>(embed.size());
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sq / n), 1.0, 0.02);
  // Norm weights near 1.
  for (uint16_t b : ckpt.at("layers.0.attn_norm.weight").copy_as<uint16_t>())
    EXPECT_NEAR(numerics::bf16_bits_to_float(b), 1.0f, 0.1f);
  // tid2eid: distinct ids in range per row.
  const auto& tid = ckpt.at("layers.0.ffn.gate.tid2eid");
  const auto ids = tid.copy_as<int64_t>();
  const int64_t k = tid.shape[1];
  std::set<int64_t> seen_all;
  for (int64_t r = 0; r < tid.shape[0]; ++r) {
    std::set<int64_t> row(ids.begin() + r * k, ids.begin() + (r + 1) * k);
    EXPECT_EQ(static_cast<int64_t>(row.size()), k);
    for (int64_t id : row) EXPECT_TRUE(id >= 0 && id < cfg.n_routed_experts);
    seen_all.insert(row.begin(), row.end());
  }
  EXPECT_EQ(static_cast<int>(seen_all.size()), cfg.n_routed_experts);
}

TEST(MakeTiny, WriteTinyCheckpoint) {
  const fs::path dir = fs::path(testing::TempDir()) / ("dsv4_make_tiny_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path cfg_path = fs::path(testing::TempDir()) / ("dsv4_tiny_cfg_" + std::to_string(::getpid()) + ".json");
  auto j = embedded_tiny_config_json();
  j["vocab_size"] = 512;
  j["extra_key_kept_verbatim"] = "yes";
  std::ofstream(cfg_path) << j.dump(1);
  write_tiny_checkpoint(cfg_path, 11, dir / "sub");
  EXPECT_EQ(read_file(dir / "sub" / "config.json"), read_file(cfg_path));
  const ModelConfig cfg = ModelConfig::from_file(dir / "sub" / "config.json");
  const auto ckpt = checkpoint::Checkpoint::open(dir / "sub");
  EXPECT_NO_THROW(verify_checkpoint(ckpt, cfg));
  const auto bytes = make_tiny_checkpoint_bytes(cfg, 11);
  EXPECT_EQ(read_file(dir / "sub" / "model.safetensors"),
            std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  fs::remove_all(dir);
  fs::remove(cfg_path);
}

TEST(EmbeddedModel, VerifiesAgainstItsConfig) {
  const ModelConfig cfg = ModelConfig::from_json(embedded_tiny_config_json());
  EXPECT_EQ(cfg.vocab_size, 129280);
  EXPECT_EQ(cfg.compress_ratios, (std::vector<int>{0, 4, 128, 4, 0}));
  const auto ckpt = embedded_tiny_checkpoint();
  EXPECT_EQ(ckpt.path().string(), "<embedded tiny model>");
  EXPECT_EQ(ckpt.at("embed.weight").shape, (std::vector<int64_t>{129280, 128}));
  EXPECT_NO_THROW(verify_checkpoint(ckpt, cfg));
}

}  // namespace
}  // namespace dsv4::model
