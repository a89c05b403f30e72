// The §3.2 inventory and verify_checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <cstring>
#include <map>

#include "base/check.h"
#include "checkpoint/safetensors_writer.h"
#include "model/embedded_model.h"
#include "model/make_tiny.h"
#include "model/tensor_inventory.h"

namespace dsv4::model {
namespace {

namespace fs = std::filesystem;
using checkpoint::DType;

const fs::path kGolden = DSV4_GOLDEN_DIR;
const fs::path kFlashConfig = kGolden / ".." / "models" / "deepseek-v4-flash" / "config.json";

std::map<std::string, ExpectedTensor> by_name(const std::vector<ExpectedTensor>& v) {
  std::map<std::string, ExpectedTensor> m;
  for (const auto& t : v) EXPECT_TRUE(m.emplace(t.name, t).second) << "duplicate " << t.name;
  return m;
}

// A small config (vocab 512) for fast tests.
ModelConfig small_config() {
  auto j = embedded_tiny_config_json();
  j["vocab_size"] = 512;
  return ModelConfig::from_json(j);
}

TEST(TensorInventory, FlashCountAndBytes) {
  if (!fs::exists(kFlashConfig)) GTEST_SKIP() << "missing " << kFlashConfig;
  const ModelConfig cfg = ModelConfig::from_file(kFlashConfig);
  const auto tensors = expected_tensors(cfg);
  EXPECT_EQ(tensors.size(), 69187u);
  EXPECT_EQ(expected_bytes(tensors), 159609485896ull);
  const auto m = by_name(tensors);
  auto shape = [&](const std::string& n) {
    auto it = m.find(n);
    return it == m.end() ? std::vector<int64_t>{-1} : it->second.shape;
  };
  using S = std::vector<int64_t>;
  EXPECT_EQ(shape("hc_head_fn"), (S{4, 16384}));
  EXPECT_EQ(shape("layers.0.hc_attn_fn"), (S{24, 16384}));
  EXPECT_EQ(shape("layers.0.attn.wq_b.scale"), (S{256, 8}));
  EXPECT_EQ(shape("layers.0.attn.wo_a.weight"), (S{8192, 4096}));
  EXPECT_EQ(shape("layers.0.attn.wo_a.scale"), (S{64, 32}));
  EXPECT_EQ(shape("layers.0.ffn.gate.tid2eid"), (S{129280, 6}));
  EXPECT_EQ(m.at("layers.0.ffn.gate.tid2eid").dtype, DType::kI64);
  EXPECT_EQ(shape("layers.2.ffn.gate.tid2eid"), (S{129280, 6}));
  EXPECT_EQ(m.count("layers.3.ffn.gate.tid2eid"), 0u);
  EXPECT_EQ(shape("layers.3.ffn.gate.bias"), (S{256}));
  EXPECT_EQ(m.count("layers.1.attn.compressor.ape"), 0u);
  EXPECT_EQ(shape("layers.2.attn.compressor.ape"), (S{4, 1024}));
  EXPECT_EQ(shape("layers.3.attn.compressor.ape"), (S{128, 512}));
  EXPECT_EQ(shape("layers.3.attn.compressor.wkv.weight"), (S{512, 4096}));
  EXPECT_EQ(shape("layers.2.attn.indexer.compressor.ape"), (S{4, 256}));
  EXPECT_EQ(shape("layers.2.attn.indexer.wq_b.scale"), (S{64, 8}));
  EXPECT_EQ(m.count("layers.3.attn.indexer.wq_b.weight"), 0u);
  EXPECT_EQ(shape("layers.5.ffn.experts.255.w1.weight"), (S{2048, 2048}));
  EXPECT_EQ(m.at("layers.5.ffn.experts.255.w1.weight").dtype, DType::kI8);
  EXPECT_EQ(shape("layers.5.ffn.experts.255.w2.scale"), (S{4096, 64}));
  EXPECT_EQ(shape("layers.5.ffn.shared_experts.w2.scale"), (S{32, 16}));
  EXPECT_EQ(shape("mtp.0.e_proj.scale"), (S{32, 32}));
  EXPECT_EQ(shape("mtp.0.hc_head_fn"), (S{4, 16384}));
  EXPECT_EQ(shape("mtp.0.ffn.gate.bias"), (S{256}));
  EXPECT_EQ(m.count("mtp.0.ffn.gate.tid2eid"), 0u);
  EXPECT_EQ(m.count("mtp.0.attn.compressor.ape"), 0u);
}

TEST(TensorInventory, Fp8Experts) {
  auto j = embedded_tiny_config_json();
  j["vocab_size"] = 512;
  j["expert_dtype"] = "fp8";
  const auto m = by_name(expected_tensors(ModelConfig::from_json(j)));
  EXPECT_EQ(m.at("layers.1.ffn.experts.3.w2.weight").dtype, DType::kF8_E4M3);
  EXPECT_EQ(m.at("layers.1.ffn.experts.3.w2.weight").shape, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(m.at("layers.1.ffn.experts.3.w2.scale").shape, (std::vector<int64_t>{1, 1}));
}

TEST(TensorInventory, GoldenCheckpointsVerify) {
  int found = 0;
  for (const char* set : {"tiny-c4", "tiny-c4-w16", "tiny-calm"}) {
    const fs::path dir = kGolden / set;
    if (!fs::exists(dir / "model.safetensors")) continue;
    ++found;
    const ModelConfig cfg = ModelConfig::from_file(dir / "config.json");
    EXPECT_EQ(expected_tensors(cfg).size(), 427u);
    const auto ckpt = checkpoint::Checkpoint::open(dir);
    EXPECT_EQ(ckpt.size(), 427u);
    EXPECT_NO_THROW(verify_checkpoint(ckpt, cfg)) << dir;
  }
  if (found == 0) GTEST_SKIP() << "no golden checkpoints under " << kGolden;
}

// Copies every tensor of `src` into a writer, except those `skip` names.
checkpoint::SafetensorsWriter copy_tensors(const checkpoint::Checkpoint& src,
                                           const std::vector<std::string>& skip) {
  checkpoint::SafetensorsWriter w;
  for (const auto& name : src.names()) {
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    const auto& t = src.at(name);
    w.add(name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.nbytes));
  }
  return w;
}

TEST(TensorInventory, ModifiedCheckpointFailsNamingEach) {
  const ModelConfig cfg = small_config();
  const auto good = checkpoint::Checkpoint::from_buffer(make_tiny_checkpoint_bytes(cfg, 3), "good");
  EXPECT_NO_THROW(verify_checkpoint(good, cfg));

  const std::string dropped = "layers.2.attn.compressor.ape";
  const std::string reshaped = "embed.weight";
  const std::string retyped = "layers.1.attn.attn_sink";
  auto w = copy_tensors(good, {dropped, reshaped, retyped});
  w.add("layers.9.extra.weight", DType::kF32, {2}, std::vector<std::byte>(8));
  const auto& e = good.at(reshaped);
  w.add(reshaped, e.dtype, {128, 512}, std::vector<std::byte>(e.data, e.data + e.nbytes));
  const auto& s = good.at(retyped);
  w.add(retyped, DType::kI32, s.shape, std::vector<std::byte>(s.data, s.data + s.nbytes));
  const auto bad = checkpoint::Checkpoint::from_buffer(w.serialize(), "bad.safetensors");
  try {
    verify_checkpoint(bad, cfg);
    ADD_FAILURE() << "accepted";
  } catch (const Error& err) {
    const std::string msg = err.what();
    for (const std::string& needle : std::vector<std::string>{
         "4 problems", "bad.safetensors: missing tensor \"" + dropped + "\"",
          "bad.safetensors: unexpected tensor \"layers.9.extra.weight\"",
          "bad.safetensors: tensor \"embed.weight\" has shape [128, 512], expected [512, 128]",
          "bad.safetensors: tensor \"" + retyped + "\" has dtype I32, expected F32"}) {
      EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
    }
  }
}

TEST(TensorInventory, Tid2eidI32AcceptedAndLongListsTruncated) {
  const ModelConfig cfg = small_config();
  const auto good = checkpoint::Checkpoint::from_buffer(make_tiny_checkpoint_bytes(cfg, 1), "g");
  const std::string tid = "layers.0.ffn.gate.tid2eid";
  auto w = copy_tensors(good, {tid});
  const auto ids = good.at(tid).copy_as<int64_t>();
  std::vector<int32_t> narrow(ids.begin(), ids.end());
  std::vector<std::byte> bytes(narrow.size() * 4);
  std::memcpy(bytes.data(), narrow.data(), bytes.size());
  w.add(tid, DType::kI32, good.at(tid).shape, bytes);
  EXPECT_NO_THROW(verify_checkpoint(checkpoint::Checkpoint::from_buffer(w.serialize(), "i32"), cfg));

  checkpoint::SafetensorsWriter few;
  few.add("norm.weight", DType::kBF16, {128}, std::vector<std::byte>(256));
  try {
    verify_checkpoint(checkpoint::Checkpoint::from_buffer(few.serialize(), "few"), cfg);
    ADD_FAILURE() << "accepted";
  } catch (const Error& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find("426 problems"), std::string::npos) << msg;
    EXPECT_NE(msg.find("and 406 more"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace dsv4::model
