// libFuzzer target: arbitrary bytes as a whole safetensors file. Every rejection must be a
// dsv4::Error; any other exception, crash or sanitizer report is a bug. Accepted files are
// walked so that every view's bytes are touched.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "checkpoint/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(data[i]);
  try {
    auto ckpt = dsv4::checkpoint::Checkpoint::from_buffer(std::move(bytes), "fuzz.safetensors");
    unsigned sum = 0;
    for (const auto& name : ckpt.names()) {
      const auto& t = ckpt.at(name);
      for (size_t i = 0; i < t.nbytes; ++i) sum += std::to_integer<unsigned>(t.data[i]);
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const dsv4::Error&) {
  }
  return 0;
}
