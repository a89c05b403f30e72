// Tests for the safetensors reader/writer and sharded checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/check.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_file.h"
#include "checkpoint/safetensors_writer.h"

namespace dsv4::checkpoint {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> iota_bytes(size_t n, int start = 0) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((start + i) & 0xff);
  return b;
}

// A file image with a hand-written header and `data_size` data bytes.
std::vector<std::byte> raw_file(const std::string& header, size_t data_size) {
  std::vector<std::byte> out(8 + header.size() + data_size);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

void write_bytes(const fs::path& p, const std::vector<std::byte>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::path(testing::TempDir()) / ("dsv4_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Runs fn, expects a dsv4::Error whose message contains every needle.
template <class Fn>
void expect_error(Fn fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

void expect_buffer_error(const std::vector<std::byte>& bytes,
                         std::initializer_list<std::string> needles) {
  expect_error([&] { SafetensorsFile::from_buffer(bytes, "model.safetensors"); }, needles);
}

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(DType::kF8_E8M0); ++i) {
    const auto d = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(dtype_name(DType::kF8_E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_FALSE(parse_dtype("bf16").has_value());
}

TEST(Safetensors, WriterReaderRoundTrip) {
  SafetensorsWriter w;
  w.add("b.weight", DType::kBF16, {2, 3}, iota_bytes(12, 7));
  w.add("a.scale", DType::kF8_E8M0, {1, 1}, iota_bytes(1, 127));
  w.add("c", DType::kF32, {4}, iota_bytes(16, 1));
  w.add("empty", DType::kI64, {0, 6}, {});
  const auto bytes = w.serialize();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<uint64_t>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), n);
  EXPECT_NE(header.find("\"__metadata__\":{\"format\":\"pt\"}"), std::string::npos) << header;
  // Data in name order, no gaps: a.scale [0,1], b.weight [1,13], c [13,29], empty [29,29].
  EXPECT_NE(header.find("\"data_offsets\":[1,13]"), std::string::npos) << header;
  EXPECT_EQ(bytes.size(), 8 + n + 29);

  auto ckpt = Checkpoint::from_buffer(bytes, "mem");
  ASSERT_EQ(ckpt.size(), 4u);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a.scale", "b.weight", "c", "empty"}));
  const auto& b = ckpt.at("b.weight");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.shape_string(), "[2, 3]");
  EXPECT_EQ(b.numel(), 6);
  ASSERT_EQ(b.nbytes, 12u);
  EXPECT_EQ(std::memcmp(b.data, iota_bytes(12, 7).data(), 12), 0);
  const auto c = ckpt.at("c").copy_as<float>();
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(ckpt.at("empty").nbytes, 0u);
  EXPECT_EQ(ckpt.total_bytes(), 29u);
  EXPECT_EQ(ckpt.find("missing"), nullptr);
  expect_error([&] { ckpt.at("missing"); }, {"tensor missing not found in checkpoint mem"});
  expect_error([&] { ckpt.at("c").as<uint16_t>(); }, {"\"c\"", "F32"});

  // Moving keeps views valid.
  const TensorView* before = ckpt.find("c");
  Checkpoint moved = std::move(ckpt);
  EXPECT_EQ(moved.find("c"), before);

  // Same through a file and through a directory.
  const fs::path dir = fresh_dir("roundtrip");
  w.write(dir / "model.safetensors");
  auto from_dir = Checkpoint::open(dir);
  EXPECT_EQ(from_dir.size(), 4u);
  EXPECT_EQ(std::memcmp(from_dir.at("b.weight").data, iota_bytes(12, 7).data(), 12), 0);
  auto from_file = Checkpoint::open(dir / "model.safetensors");
  EXPECT_EQ(from_file.at("a.scale").file, (dir / "model.safetensors").string());
  fs::remove_all(dir);
}

TEST(Safetensors, WriterChecksSizes) {
  SafetensorsWriter w;
  expect_error([&] { w.add("x", DType::kF32, {2, 2}, iota_bytes(15)); }, {"\"x\"", "16"});
  w.add("y", DType::kU8, {3}, iota_bytes(3));
  expect_error([&] { w.add("y", DType::kU8, {3}, iota_bytes(3)); }, {"\"y\"", "twice"});
}

TEST(Safetensors, TruncatedFile) {
  expect_buffer_error(iota_bytes(5), {"model.safetensors", "too short"});
  const fs::path dir = fresh_dir("trunc");
  write_bytes(dir / "model.safetensors", iota_bytes(3));
  expect_error([&] { Checkpoint::open(dir); }, {"model.safetensors", "too short"});
  write_bytes(dir / "model.safetensors", {});
  expect_error([&] { Checkpoint::open(dir); }, {"model.safetensors", "too short"});
  fs::remove_all(dir);
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  auto bytes = raw_file("{}", 0);
  bytes[0] = std::byte{0xff};
  bytes[7] = std::byte{0x7f};
  expect_buffer_error(bytes, {"model.safetensors", "header length", "beyond"});
}

TEST(Safetensors, DataSectionTooShort) {
  SafetensorsWriter w;
  w.add("layers.0.big", DType::kF32, {64}, iota_bytes(256));
  auto bytes = w.serialize();
  bytes.erase(bytes.end() - 10, bytes.end());
  expect_buffer_error(bytes, {"model.safetensors", "\"layers.0.big\"", "beyond the data section"});
}

TEST(Safetensors, CorruptJson) {
  expect_buffer_error(raw_file("{\"a\": {\"dtype\": ", 0), {"model.safetensors", "not valid JSON"});
  expect_buffer_error(raw_file("[1, 2]", 0), {"model.safetensors", "JSON object"});
  expect_buffer_error(raw_file("{\"t\": 5}", 0), {"model.safetensors", "\"t\"", "object"});
  expect_buffer_error(raw_file("{\"__metadata__\": {\"k\": 1}}", 0),
                      {"model.safetensors", "__metadata__", "\"k\""});
}

TEST(Safetensors, UnknownDType) {
  expect_buffer_error(
      raw_file(R"({"layers.0.attn.wq_a.weight": {"dtype": "F8_E5M2", "shape": [2], "data_offsets": [0, 2]}})", 2),
      {"model.safetensors", "\"layers.0.attn.wq_a.weight\"", "unknown dtype \"F8_E5M2\"", "dtype"});
  expect_buffer_error(
      raw_file(R"({"t": {"shape": [2], "data_offsets": [0, 2]}})", 2),
      {"model.safetensors", "\"t\"", "dtype"});
}

TEST(Safetensors, BadShape) {
  expect_buffer_error(raw_file(R"({"t": {"dtype": "I8", "shape": [-1], "data_offsets": [0, 0]}})", 0),
                      {"model.safetensors", "\"t\"", "shape"});
  expect_buffer_error(raw_file(R"({"t": {"dtype": "I8", "shape": [1.5], "data_offsets": [0, 0]}})", 0),
                      {"model.safetensors", "\"t\"", "shape"});
  expect_buffer_error(
      raw_file(R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0),
      {"model.safetensors", "\"t\"", "shape", "int64"});
}

TEST(Safetensors, BadOffsets) {
  expect_buffer_error(
      raw_file(R"({"layers.0.attn.wq_a.weight": {"dtype": "F8_E4M3", "shape": [1024, 4096], "data_offsets": [0, 100]}})", 100),
      {"model.safetensors: tensor \"layers.0.attn.wq_a.weight\": data_offsets [0, 100] cover 100 "
       "bytes but shape [1024, 4096] of F8_E4M3 needs 4194304"});
  expect_buffer_error(raw_file(R"({"t": {"dtype": "I8", "shape": [2], "data_offsets": [4, 2]}})", 8),
                      {"model.safetensors", "\"t\"", "begin > end"});
  expect_buffer_error(raw_file(R"({"t": {"dtype": "I8", "shape": [2], "data_offsets": [0]}})", 8),
                      {"model.safetensors", "\"t\"", "data_offsets"});
  expect_buffer_error(raw_file(R"({"t": {"dtype": "I8", "shape": [2], "data_offsets": [6, 8]}})", 7),
                      {"model.safetensors", "\"t\"", "beyond the data section"});
}

TEST(Safetensors, OverlappingTensors) {
  expect_buffer_error(
      raw_file(R"({"a": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]},
                  "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})", 8),
      {"model.safetensors", "\"b\"", "overlap", "\"a\""});
}

TEST(Safetensors, ParseHeaderIsPure) {
  auto views = parse_safetensors_header(
      R"({"__metadata__": {"format": "pt"}, "z": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
          "a": {"dtype": "I8", "shape": [], "data_offsets": [4, 5]}})", 5, "f");
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].name, "z");  // offset order
  EXPECT_EQ(views[1].numel(), 1);
  EXPECT_EQ(views[1].data, nullptr);
}

// Writes a two-shard checkpoint: shard 1 holds a, b; shard 2 holds c.
fs::path write_sharded(const std::string& name, const std::string& weight_map) {
  const fs::path dir = fresh_dir(name);
  SafetensorsWriter s1, s2;
  s1.add("a", DType::kF32, {2}, iota_bytes(8));
  s1.add("b", DType::kI8, {3}, iota_bytes(3));
  s2.add("c", DType::kBF16, {2, 2}, iota_bytes(8));
  s1.write(dir / "model-00001-of-00002.safetensors");
  s2.write(dir / "model-00002-of-00002.safetensors");
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 19}, "weight_map": )" << weight_map << "}";
  return dir;
}

TEST(Checkpoint, ShardedIndex) {
  const fs::path dir = write_sharded("sharded", R"({"a": "model-00001-of-00002.safetensors",
      "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})");
  auto ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt.size(), 3u);
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_NE(ckpt.at("c").file.find("model-00002-of-00002.safetensors"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoint, ShardMissing) {
  const fs::path dir = write_sharded("shard_missing", R"({"a": "model-00001-of-00002.safetensors",
      "layers.5.ffn.gate.weight": "model-00003-of-00046.safetensors"})");
  expect_error([&] { Checkpoint::open(dir); },
               {"shard model-00003-of-00046.safetensors named in model.safetensors.index.json "
                "(for tensor layers.5.ffn.gate.weight) does not exist"});
  fs::remove_all(dir);
}

TEST(Checkpoint, TensorMissingFromShard) {
  const fs::path dir = write_sharded("tensor_missing", R"({"a": "model-00001-of-00002.safetensors",
      "layers.7.attn.wkv.weight": "model-00002-of-00002.safetensors"})");
  expect_error([&] { Checkpoint::open(dir); },
               {"\"layers.7.attn.wkv.weight\"", "model.safetensors.index.json",
                "model-00002-of-00002.safetensors"});
  fs::remove_all(dir);
}

TEST(Checkpoint, DuplicateTensor) {
  const fs::path dir = write_sharded("dup", R"({"a": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"})");
  SafetensorsWriter s2;
  s2.add("c", DType::kBF16, {2, 2}, iota_bytes(8));
  s2.add("a", DType::kF32, {2}, iota_bytes(8));
  s2.write(dir / "model-00002-of-00002.safetensors");
  expect_error([&] { Checkpoint::open(dir); },
               {"\"a\"", "two files", "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"});
  fs::remove_all(dir);
}

TEST(Checkpoint, EmptyDirectory) {
  const fs::path dir = fresh_dir("empty");
  expect_error([&] { Checkpoint::open(dir); }, {dir.string(), "model.safetensors"});
  expect_error([&] { Checkpoint::open(dir / "nope.safetensors"); }, {"nope.safetensors"});
  fs::remove_all(dir);
}

TEST(Checkpoint, GoldenTinyOpens) {
  const fs::path p = fs::path(DSV4_GOLDEN_DIR) / "tiny-c4" / "model.safetensors";
  if (!fs::exists(p)) GTEST_SKIP() << "missing " << p;
  auto ckpt = Checkpoint::open(p.parent_path());
  EXPECT_EQ(ckpt.size(), 427u);
  EXPECT_EQ(ckpt.at("embed.weight").shape_string(), "[512, 128]");
}

}  // namespace
}  // namespace dsv4::checkpoint
