// Reading safetensors files: an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data section (offsets are relative to its start).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/tensor_view.h"

namespace dsv4::checkpoint {

// Parses and validates a header (pure; the returned views have data == nullptr and are in
// data-offset order). Checks: the header is a JSON object; "__metadata__", if present, is an
// object of strings; every other entry is an object with a known "dtype" string, a "shape"
// array of non-negative integers whose element count (and byte count) fits int64, and
// "data_offsets" [begin, end] with begin <= end <= data_size and end - begin ==
// numel * dtype_size; no two tensors overlap. Throws dsv4::Error naming file_name, the
// tensor and the field.
std::vector<TensorView> parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                                 const std::string& file_name);

// One safetensors file, memory-mapped read-only (or held in an owned buffer). Immutable after
// construction, so concurrent reads are safe. TensorView::data points into this object and
// stays valid for its lifetime.
class SafetensorsFile {
 public:
  // Maps the file and validates it: file at least 8 bytes, header length within the file,
  // every tensor inside the data section. Errors name the path.
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);

  // Same validation on a whole file image held in memory; `name` is used in messages and as
  // TensorView::file.
  static std::unique_ptr<SafetensorsFile> from_buffer(std::vector<std::byte> bytes,
                                                      std::string name);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Tensors in data-offset order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::string& name() const { return name_; }
  // Total size of the file image in bytes.
  size_t size() const { return size_; }

 private:
  SafetensorsFile() = default;
  // Parses the image [base_, base_ + size_) and fills tensors_.
  void index();

  std::string name_;
  const std::byte* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;          // mmap'ed region (nullptr for buffers / empty files)
  std::vector<std::byte> buffer_;    // owned image for from_buffer
  std::vector<TensorView> tensors_;
};

}  // namespace dsv4::checkpoint
