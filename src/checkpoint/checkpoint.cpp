#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace dsv4::checkpoint {

namespace fs = std::filesystem;

Checkpoint::~Checkpoint() = default;

Checkpoint Checkpoint::open(const fs::path& dir_or_file) {
  Checkpoint ckpt;
  ckpt.path_ = dir_or_file;
  std::error_code ec;
  if (fs::is_directory(dir_or_file, ec)) {
    const fs::path index = dir_or_file / "model.safetensors.index.json";
    const fs::path single = dir_or_file / "model.safetensors";
    if (fs::exists(index, ec)) {
      ckpt.open_index(index);
    } else if (fs::exists(single, ec)) {
      ckpt.add_file(SafetensorsFile::open(single));
    } else {
      DSV4_FAIL("checkpoint directory ", dir_or_file.string(),
                " has neither model.safetensors.index.json nor model.safetensors");
    }
  } else {
    DSV4_CHECK(fs::exists(dir_or_file, ec), "checkpoint ", dir_or_file.string(),
               " does not exist");
    ckpt.add_file(SafetensorsFile::open(dir_or_file));
  }
  return ckpt;
}

Checkpoint Checkpoint::from_buffer(std::vector<std::byte> safetensors_bytes, std::string name) {
  Checkpoint ckpt;
  ckpt.path_ = name;
  ckpt.add_file(SafetensorsFile::from_buffer(std::move(safetensors_bytes), std::move(name)));
  return ckpt;
}

void Checkpoint::add_file(std::unique_ptr<SafetensorsFile> file) {
  for (const TensorView& t : file->tensors()) {
    auto [it, inserted] = by_name_.emplace(std::string_view(t.name), &t);
    DSV4_CHECK(inserted, "tensor \"", t.name, "\" is in two files: ", it->second->file, " and ",
               t.file);
  }
  files_.push_back(std::move(file));
}

void Checkpoint::open_index(const fs::path& index_path) {
  const std::string index_name = index_path.filename().string();
  nlohmann::json index;
  {
    std::ifstream in(index_path);
    DSV4_CHECK(in.good(), index_path.string(), ": cannot open");
    try {
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      DSV4_FAIL(index_path.string(), ": not valid JSON: ", e.what());
    }
  }
  DSV4_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             index_path.string(), ": missing object \"weight_map\"");

  // shard file → tensors the index puts there (ordered for reproducible messages).
  std::map<std::string, std::vector<std::string>> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    DSV4_CHECK(it->is_string(), index_path.string(), ": weight_map entry for tensor \"", it.key(),
               "\" must be a file name string");
    shards[it->get<std::string>()].push_back(it.key());
  }
  const fs::path dir = index_path.parent_path();
  for (const auto& [shard, tensors] : shards) {
    const fs::path shard_path = dir / shard;
    std::error_code ec;
    DSV4_CHECK(fs::is_regular_file(shard_path, ec), "shard ", shard, " named in ", index_name,
               " (for tensor ", tensors.front(), ") does not exist in ", dir.string());
    auto file = SafetensorsFile::open(shard_path);
    std::unordered_map<std::string_view, bool> present;
    for (const TensorView& t : file->tensors()) present.emplace(t.name, true);
    for (const std::string& name : tensors) {
      DSV4_CHECK(present.count(name) != 0, "tensor \"", name, "\" listed in ", index_name,
                 " for shard ", shard, " is not in ", shard_path.string());
    }
    add_file(std::move(file));
  }
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::at(std::string_view name) const {
  const TensorView* t = find(name);
  DSV4_CHECK(t != nullptr, "tensor ", name, " not found in checkpoint ", path_.string());
  return *t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) out.emplace_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : by_name_) n += t->nbytes;
  return n;
}

}  // namespace dsv4::checkpoint
