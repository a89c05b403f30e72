// A model checkpoint: one or more safetensors files seen as one name → tensor map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "checkpoint/safetensors_file.h"
#include "checkpoint/tensor_view.h"

namespace dsv4::checkpoint {

// Immutable after open (concurrent reads are safe); movable, not copyable. TensorView
// pointers and data stay valid for the Checkpoint's lifetime, also across moves.
class Checkpoint {
 public:
  // dir_or_file is a .safetensors file → that file. A directory → its
  // model.safetensors.index.json if present ("weight_map": tensor → shard file; every shard
  // must exist, every listed tensor must be in its shard, no tensor may be in two shards),
  // else its model.safetensors, else an error. Errors name the files and tensors involved.
  static Checkpoint open(const std::filesystem::path& dir_or_file);

  // A single-file checkpoint from a whole safetensors image held in memory.
  static Checkpoint from_buffer(std::vector<std::byte> safetensors_bytes, std::string name);

  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;
  ~Checkpoint();

  // nullptr when absent.
  const TensorView* find(std::string_view name) const;
  // Throws "tensor X not found in checkpoint <path>" when absent.
  const TensorView& at(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  // Number of tensors.
  size_t size() const { return by_name_.size(); }
  // Sum of all tensors' nbytes.
  uint64_t total_bytes() const;
  // What open() was given (or the buffer name).
  const std::filesystem::path& path() const { return path_; }
  // The files, in open order.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  Checkpoint() = default;
  // Adds every tensor of `file`; a name already present is an error naming both files.
  void add_file(std::unique_ptr<SafetensorsFile> file);
  void open_index(const std::filesystem::path& index_path);

  std::filesystem::path path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // Keys view TensorView::name inside files_ (heap objects, stable across moves).
  std::unordered_map<std::string_view, const TensorView*> by_name_;
};

}  // namespace dsv4::checkpoint
