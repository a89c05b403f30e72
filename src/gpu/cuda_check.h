// CUDA error checking and RAII device memory for the dsv4 CUDA backend.
//
// CUDA_CHECK(expr) throws dsv4::Error with the stringified expression, file:line and the CUDA
// error string. DeviceBuffer<T> owns one cudaMalloc allocation (move-only); resize() drops the
// old contents. DeviceBuffer<T>::view(ptr, n) is a non-owning buffer over memory owned
// elsewhere (a GpuStatePool slot): same accessors, frees nothing, never reallocates.
// has_cuda_device() is what tests use to GTEST_SKIP on machines without a GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"

namespace dsv4::gpu {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* expr, const char* file, int line) {
  throw dsv4::Error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                    ") in `" + expr + "` at " + file + ":" + std::to_string(line));
}

#define CUDA_CHECK(expr)                                                         \
  do {                                                                           \
    const cudaError_t dsv4_cuda_err_ = (expr);                                   \
    if (dsv4_cuda_err_ != cudaSuccess)                                           \
      ::dsv4::gpu::cuda_fail(dsv4_cuda_err_, #expr, __FILE__, __LINE__);         \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// True when at least one CUDA device is usable (false on machines without a GPU or driver).
inline bool has_cuda_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

// Runs f() once per CUDA device (the current one), thread-safely: for per-device settings
// such as cudaFuncSetAttribute, which tensor-parallel ranks need on each of their devices.
// `flags` is the caller's static array (one flag per device id).
constexpr int kMaxDevices = 64;
template <class F>
void call_once_per_device(std::once_flag (&flags)[kMaxDevices], F&& f) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  DSV4_CHECK(dev >= 0 && dev < kMaxDevices, "CUDA device id ", dev, " beyond ", kMaxDevices);
  std::call_once(flags[dev], std::forward<F>(f));
}

// The current device's SM count (queried once per device).
inline int device_sm_count() {
  static std::once_flag once[kMaxDevices];
  static int sms[kMaxDevices];
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  call_once_per_device(once, [&] { CUDA_CHECK(cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev)); });
  return sms[dev];
}

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)), owns_(std::exchange(o.owns_, true)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
      owns_ = std::exchange(o.owns_, true);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  // A non-owning view of `count` elements at device address `ptr` (nullptr when count is 0).
  // The memory must outlive the view. resize() and reserve() beyond size() throw; upload()
  // copies in place and needs exactly size() elements.
  static DeviceBuffer view(T* ptr, size_t count) {
    DeviceBuffer b;
    b.ptr_ = count > 0 ? ptr : nullptr;
    b.n_ = count;
    b.owns_ = false;
    return b;
  }
  bool is_view() const { return !owns_; }

  // Reallocates to exactly `count` elements (contents undefined).
  void resize(size_t count) {
    DSV4_CHECK(owns_, "cannot resize a non-owning DeviceBuffer view of ", n_, " elements to ", count);
    release();
    if (count > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
    n_ = count;
  }
  // Grows (never shrinks) to at least `count` elements; contents undefined after growth.
  void reserve(size_t count) {
    if (count > n_) resize(count);
  }
  void upload(const T* host, size_t count) {
    if (owns_) resize(count);
    DSV4_CHECK(count == n_, "upload of ", count, " elements into a view of ", n_);
    if (count > 0) CUDA_CHECK(cudaMemcpy(ptr_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& v) { upload(v.data(), v.size()); }
  std::vector<T> download() const { return download(n_); }
  std::vector<T> download(size_t count) const {
    std::vector<T> v(count);
    if (count > 0) CUDA_CHECK(cudaMemcpy(v.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  void fill_bytes(int value) {
    if (n_ > 0) CUDA_CHECK(cudaMemset(ptr_, value, n_ * sizeof(T)));
  }
  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  bool empty() const { return n_ == 0; }

 private:
  void release() {
    if (ptr_ != nullptr && owns_) cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = 0;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
  bool owns_ = true;  // false: a view (see view())
};

// A device copy of a host vector (tests, small tables).
template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> b;
  b.upload(host);
  return b;
}

}  // namespace dsv4::gpu
