#include "checkpoint/safetensors_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace dsv4::checkpoint {
namespace {

using nlohmann::json;

// Reads a non-negative integer that fits int64 (JSON unsigned or non-negative signed).
bool as_nonneg_int(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return *out <= static_cast<uint64_t>(INT64_MAX);
  }
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
    return true;
  }
  return false;
}

std::string brief(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

TensorView parse_entry(const std::string& file, const std::string& name, const json& entry,
                       uint64_t data_size, uint64_t* begin_out) {
  const std::string where = str_cat(file, ": tensor \"", name, "\": ");
  DSV4_CHECK(entry.is_object(), where, "entry must be a JSON object, got ", brief(entry));
  TensorView t;
  t.name = name;
  t.file = file;

  auto dt = entry.find("dtype");
  DSV4_CHECK(dt != entry.end(), where, "missing field \"dtype\"");
  DSV4_CHECK(dt->is_string(), where, "field \"dtype\" must be a string, got ", brief(*dt));
  const auto parsed = parse_dtype(dt->get_ref<const std::string&>());
  DSV4_CHECK(parsed.has_value(), where, "unknown dtype \"", dt->get_ref<const std::string&>(),
             "\" (field \"dtype\")");
  t.dtype = *parsed;

  auto sh = entry.find("shape");
  DSV4_CHECK(sh != entry.end(), where, "missing field \"shape\"");
  DSV4_CHECK(sh->is_array(), where, "field \"shape\" must be an array, got ", brief(*sh));
  int64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t v = 0;
    DSV4_CHECK(as_nonneg_int(d, &v), where, "field \"shape\" ", brief(*sh),
               " must hold non-negative integers");
    t.shape.push_back(static_cast<int64_t>(v));
    DSV4_CHECK(!__builtin_mul_overflow(numel, static_cast<int64_t>(v), &numel), where,
               "field \"shape\" ", brief(*sh), " has more elements than fit in int64");
  }
  int64_t need = 0;
  DSV4_CHECK(!__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(t.dtype)), &need),
             where, "field \"shape\" ", t.shape_string(), " of ", dtype_name(t.dtype),
             " needs more bytes than fit in int64");

  auto off = entry.find("data_offsets");
  DSV4_CHECK(off != entry.end(), where, "missing field \"data_offsets\"");
  uint64_t begin = 0, end = 0;
  DSV4_CHECK(off->is_array() && off->size() == 2 && as_nonneg_int((*off)[0], &begin) &&
                 as_nonneg_int((*off)[1], &end),
             where, "field \"data_offsets\" must be [begin, end] of non-negative integers, got ",
             brief(*off));
  DSV4_CHECK(begin <= end, where, "data_offsets [", begin, ", ", end, "] have begin > end");
  DSV4_CHECK(end <= data_size, where, "data_offsets [", begin, ", ", end,
             "] end beyond the data section of ", data_size, " bytes (file truncated?)");
  DSV4_CHECK(end - begin == static_cast<uint64_t>(need), where, "data_offsets [", begin, ", ",
             end, "] cover ", end - begin, " bytes but shape ", t.shape_string(), " of ",
             dtype_name(t.dtype), " needs ", need);
  t.nbytes = static_cast<size_t>(need);
  *begin_out = begin;
  return t;
}

// Parsed entries with their begin offsets, in offset order.
std::vector<std::pair<uint64_t, TensorView>> parse_header_entries(std::string_view header_json,
                                                                  uint64_t data_size,
                                                                  const std::string& file_name) {
  json header;
  try {
    header = json::parse(header_json.begin(), header_json.end());
  } catch (const json::exception& e) {
    DSV4_FAIL(file_name, ": header is not valid JSON: ", e.what());
  }
  DSV4_CHECK(header.is_object(), file_name, ": header must be a JSON object, got ",
             header.type_name());

  std::vector<std::pair<uint64_t, TensorView>> entries;
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      DSV4_CHECK(it->is_object(), file_name, ": \"__metadata__\" must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        DSV4_CHECK(m->is_string(), file_name, ": \"__metadata__\" entry \"", m.key(),
                   "\" must be a string, got ", brief(*m));
      }
      continue;
    }
    uint64_t begin = 0;
    TensorView t = parse_entry(file_name, it.key(), *it, data_size, &begin);
    entries.emplace_back(begin, std::move(t));
  }

  // Overlap check in offset order; empty tensors occupy nothing.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.name < b.second.name;
  });
  const std::pair<uint64_t, TensorView>* prev = nullptr;
  for (const auto& e : entries) {
    if (e.second.nbytes == 0) continue;
    if (prev != nullptr) {
      const uint64_t prev_end = prev->first + prev->second.nbytes;
      DSV4_CHECK(e.first >= prev_end, file_name, ": tensor \"", e.second.name,
                 "\": data_offsets [", e.first, ", ", e.first + e.second.nbytes,
                 "] overlap tensor \"", prev->second.name, "\" at [", prev->first, ", ", prev_end,
                 "]");
    }
    prev = &e;
  }
  return entries;
}

}  // namespace

std::vector<TensorView> parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                                 const std::string& file_name) {
  auto entries = parse_header_entries(header_json, data_size, file_name);
  std::vector<TensorView> out;
  out.reserve(entries.size());
  for (auto& e : entries) out.push_back(std::move(e.second));
  return out;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DSV4_CHECK(fd >= 0, name, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    DSV4_FAIL(name, ": cannot stat: ", std::strerror(err));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->name_ = name;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ >= 8) {
    void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    DSV4_CHECK(p != MAP_FAILED, name, ": mmap of ", file->size_, " bytes failed: ",
               std::strerror(err));
    file->mapping_ = p;
    file->base_ = static_cast<const std::byte*>(p);
  } else {
    ::close(fd);
  }
  file->index();
  return file;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_buffer(std::vector<std::byte> bytes,
                                                              std::string name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->name_ = std::move(name);
  file->buffer_ = std::move(bytes);
  file->base_ = file->buffer_.data();
  file->size_ = file->buffer_.size();
  file->index();
  return file;
}

void SafetensorsFile::index() {
  DSV4_CHECK(size_ >= 8, name_, ": file is ", size_,
             " bytes, too short for the 8-byte safetensors header length (truncated file?)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(base_[i]);
  DSV4_CHECK(header_len <= size_ - 8, name_, ": header length ", header_len,
             " goes beyond the end of the file (", size_, " bytes; truncated file?)");
  const uint64_t data_size = size_ - 8 - header_len;
  const std::string_view header(reinterpret_cast<const char*>(base_ + 8), header_len);
  auto entries = parse_header_entries(header, data_size, name_);
  const std::byte* data = base_ + 8 + header_len;
  tensors_.reserve(entries.size());
  for (auto& [begin, t] : entries) {
    t.data = data + begin;
    tensors_.push_back(std::move(t));
  }
}

}  // namespace dsv4::checkpoint
