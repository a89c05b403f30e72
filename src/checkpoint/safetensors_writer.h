// Building safetensors files in memory (tests, make-tiny). The output is what Python's
// safetensors writes: header JSON with "__metadata__": {"format": "pt"}, tensors sorted by
// name with their data in that order and no gaps, header padded with spaces to a multiple of
// 8 bytes. Not thread-safe; the writer owns copies of all tensor bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/dtype.h"

namespace dsv4::checkpoint {

class SafetensorsWriter {
 public:
  // Adds a tensor. bytes.size() must equal numel(shape) * dtype_size(dtype); names must be
  // unique and not "__metadata__". Throws dsv4::Error otherwise.
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> bytes);

  // Extra "__metadata__" entries (besides "format": "pt").
  void set_metadata(std::string key, std::string value);

  size_t num_tensors() const { return tensors_.size(); }

  // The whole file image.
  std::vector<std::byte> serialize() const;
  // serialize() to a file (overwritten). Errors name the path.
  void write(const std::filesystem::path& path) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
  };
  std::map<std::string, Entry> tensors_;  // sorted by name = data order
  std::map<std::string, std::string> metadata_{{"format", "pt"}};
};

}  // namespace dsv4::checkpoint
