// A non-owning view of one tensor inside a safetensors file (or a description of one,
// with data == nullptr, when produced by parse_safetensors_header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/check.h"
#include "checkpoint/dtype.h"

namespace dsv4::checkpoint {

struct TensorView {
  std::string name;              // checkpoint key, e.g. "layers.0.attn.wq_a.weight"
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;    // row-major, outermost first; empty = scalar
  const std::byte* data = nullptr;  // nbytes bytes, owned by the SafetensorsFile
  size_t nbytes = 0;             // == numel() * dtype_size(dtype)
  std::string file;              // the file it came from (for messages)

  // Product of shape (1 for a scalar).
  int64_t numel() const;

  // Typed pointer to the data. Checks that sizeof(T) matches the dtype and that the data is
  // suitably aligned (safetensors does not align tensors: F32 tensors that follow odd-sized
  // I8/E8M0 tensors often are not). Use copy_as<T>() for a tensor that may be unaligned.
  template <class T>
  const T* as() const {
    DSV4_CHECK(sizeof(T) == dtype_size(dtype), file, ": tensor \"", name, "\" is ",
               dtype_name(dtype), ", cannot view it as a ", sizeof(T), "-byte type");
    DSV4_CHECK(reinterpret_cast<uintptr_t>(data) % alignof(T) == 0, file, ": tensor \"", name,
               "\" data is not ", alignof(T), "-byte aligned; use copy_as<T>()");
    return reinterpret_cast<const T*>(data);
  }

  // Copies the data into a vector of T (any alignment); same size check as as<T>().
  template <class T>
  std::vector<T> copy_as() const {
    DSV4_CHECK(sizeof(T) == dtype_size(dtype), file, ": tensor \"", name, "\" is ",
               dtype_name(dtype), ", cannot view it as a ", sizeof(T), "-byte type");
    std::vector<T> out(nbytes / sizeof(T));
    if (nbytes != 0) std::memcpy(out.data(), data, nbytes);
    return out;
  }

  // "[2048, 4096]" ("[]" for a scalar).
  std::string shape_string() const;
};

// "[2048, 4096]" for any shape vector.
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace dsv4::checkpoint
