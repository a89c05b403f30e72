// Wire format of the benchmark client, without any networking (so it is unit-tested directly):
// request bodies per backend, and a decoder that turns streamed SSE bytes into content events.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_config.h"
#include "bench/dataset.h"

namespace dsv4::bench {

// "http://host[:port][/prefix]" split into parts; port defaults to 80, prefix has no trailing '/'.
struct BaseUrl {
  std::string host, port, prefix;
};
BaseUrl parse_base_url(const std::string& url);  // throws dsv4::Error when not http://

// Endpoint path (without the base URL's prefix) of a backend: "/v1/chat/completions", ...
std::string endpoint_path(Backend backend);

// JSON body of one streaming request. Always stream: true (with stream_options.include_usage for
// the OpenAI backends) and temperature 0. max_tokens = prompt.output_len; with ignore_eos also
// "ignore_eos": true and min_tokens = output_len (SGLang / vLLM extensions).
// Prompts: chat sends prompt.text as one user message; completions and generate send prompt.ids
// when non-empty (completions: "prompt": [ids]; generate: "input_ids"), else the text.
std::string build_request_body(Backend backend, const BenchPrompt& prompt, const ClientConfig& cfg);

// Incremental SSE decoder for one response. Feed raw body bytes in any split; each complete
// "data:" event is interpreted for the backend. Not thread-safe (one per request).
class StreamDecoder {
 public:
  explicit StreamDecoder(Backend backend) : backend_(backend) {}

  // Consumes bytes; returns the number of *content* events completed inside them (events that
  // carry new output text or tokens). Usage, role-only and [DONE] events count zero.
  int feed(std::string_view bytes);

  bool done() const { return done_; }                      // saw "data: [DONE]"
  const std::optional<std::string>& error() const { return error_; }  // an {"error":..} event
  int content_events() const { return content_events_; }
  std::optional<int> usage_prompt_tokens() const { return prompt_tokens_; }
  std::optional<int> usage_completion_tokens() const { return completion_tokens_; }

 private:
  bool handle_event(const std::string& data);  // true when the event carries content

  Backend backend_;
  std::string pending_;     // bytes of an incomplete line
  std::string event_data_;  // data lines of the event being assembled
  bool done_ = false;
  std::optional<std::string> error_;
  int content_events_ = 0;
  std::optional<int> prompt_tokens_, completion_tokens_;
  size_t generate_text_len_ = 0;  // /generate streams cumulative text
};

}  // namespace dsv4::bench
