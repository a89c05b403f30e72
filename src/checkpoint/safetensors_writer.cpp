#include "checkpoint/safetensors_writer.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "checkpoint/tensor_view.h"

namespace dsv4::checkpoint {

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::vector<std::byte> bytes) {
  DSV4_CHECK(name != "__metadata__", "safetensors writer: \"__metadata__\" is not a tensor name");
  uint64_t numel = 1;
  for (int64_t d : shape) {
    DSV4_CHECK(d >= 0, "safetensors writer: tensor \"", name, "\" has negative dimension in ",
               shape_to_string(shape));
    numel *= static_cast<uint64_t>(d);
  }
  DSV4_CHECK(bytes.size() == numel * dtype_size(dtype), "safetensors writer: tensor \"", name,
             "\" has ", bytes.size(), " bytes but shape ", shape_to_string(shape), " of ",
             dtype_name(dtype), " needs ", numel * dtype_size(dtype));
  const bool inserted =
      tensors_.emplace(name, Entry{dtype, std::move(shape), std::move(bytes)}).second;
  DSV4_CHECK(inserted, "safetensors writer: tensor \"", name, "\" added twice");
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::vector<std::byte> SafetensorsWriter::serialize() const {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, e] : tensors_) {
    header[name] = {{"dtype", std::string(dtype_name(e.dtype))},
                    {"shape", e.shape},
                    {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<std::byte> out(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::byte* p = out.data() + 8 + text.size();
  for (const auto& [name, e] : tensors_) {
    if (!e.bytes.empty()) std::memcpy(p, e.bytes.data(), e.bytes.size());
    p += e.bytes.size();
  }
  return out;
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  const std::vector<std::byte> bytes = serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  DSV4_CHECK(f.good(), path.string(), ": cannot open for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  DSV4_CHECK(f.good(), path.string(), ": write of ", bytes.size(), " bytes failed");
}

}  // namespace dsv4::checkpoint
