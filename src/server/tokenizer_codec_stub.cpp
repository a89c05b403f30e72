// Fallback while src/tokenizer is not part of the build.
#include "base/check.h"
#include "server/text_codec.h"

namespace dsv4::server {

std::unique_ptr<TextCodec> make_tokenizer_codec(const std::string& path) {
  DSV4_FAIL("this build has no tokenizer library; cannot load ", path, " (use --tokenizer bytes)");
}

}  // namespace dsv4::server
