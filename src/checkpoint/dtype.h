// Element types of safetensors checkpoints (the subset DeepSeek-V4 and its tooling use).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4::checkpoint {

// F8_E4M3 = OCP float8_e4m3fn, F8_E8M0 = float8_e8m0fnu (power-of-two scales), see
// numerics/formats.h for their bit layouts.
enum class DType : uint8_t { kBF16, kF16, kF32, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kF8_E4M3, kF8_E8M0 };

// Bytes per element (1, 2, 4 or 8).
size_t dtype_size(DType dtype);

// The safetensors spelling: "BF16", "F16", "F32", "F64", "I64", "I32", "I16", "I8", "U8",
// "BOOL", "F8_E4M3", "F8_E8M0".
std::string_view dtype_name(DType dtype);

// Inverse of dtype_name (exact, case-sensitive); nullopt for any other string.
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace dsv4::checkpoint
