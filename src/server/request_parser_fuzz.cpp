// libFuzzer target: the three request parsers must never crash, hang or throw on any body,
// and every rejection must be a 4xx with a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsv4::server;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  ParseLimits limits;
  limits.served_model = "deepseek-v4";
  limits.max_context = 4096;
  limits.vocab_size = 1000;
  for (auto* parse : {&parse_chat_request, &parse_completion_request, &parse_generate_request}) {
    const ParseResult r = parse(body, limits);
    if (!r.ok() && (r.error.status < 400 || r.error.status > 499 || r.error.message.empty())) std::abort();
    if (r.ok() && r.request->params.max_tokens < 1) std::abort();
    if (!r.ok()) (void)error_json(r.error);
  }
  return 0;
}
