#include "checkpoint/dtype.h"

#include <array>
#include <utility>

namespace dsv4::checkpoint {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {DType::kBF16, "BF16", 2},
    {DType::kF16, "F16", 2},
    {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
    {DType::kF8_E4M3, "F8_E4M3", 1},
    {DType::kF8_E8M0, "F8_E8M0", 1},
}};

const DTypeInfo& info(DType dtype) {
  // The table is in enum order.
  return kDTypes[static_cast<size_t>(dtype) % kDTypes.size()];
}

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

}  // namespace dsv4::checkpoint
