// ResponseWriter: turns engine OutputEvents of one request into the wire format of its
// endpoint: OpenAI chat / completion objects or SSE chunks, or SGLang /generate objects.
// Owned by one request's ResponseStream; called under that stream's lock (one thread at a time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/sequence.h"
#include "server/protocol.h"
#include "server/text_codec.h"

namespace dsv4::server {

class ResponseWriter {
 public:
  ResponseWriter(const ParsedRequest& request, const TextCodec& codec, std::string id, int64_t created,
                 std::string prompt_text);

  // SSE text to send before any event (chat: the role chunk); "" otherwise.
  std::string start();
  // Streaming: the SSE chunks for this event (ending with "data: [DONE]\n\n" after the
  // final one). Non-streaming: "" until the final event, then the whole JSON body.
  std::string on_event(const engine::OutputEvent& ev);
  // HTTP status for non-streaming responses (500 when the request failed inside the engine).
  int status() const { return status_; }

 private:
  std::string sse(const std::string& json_text) const { return "data: " + json_text + "\n\n"; }
  std::string chunk_json(const std::string& delta_json, const std::string& logprobs_json, const char* finish) const;
  std::string logprobs_json(const std::vector<engine::TokenLogprob>& lps, size_t base_offset) const;
  std::string usage_json() const;
  std::string final_body();
  std::string generate_json(bool cumulative_ids) const;

  Endpoint endpoint_;
  bool stream_;
  bool include_usage_;
  bool thinking_;
  bool want_logprobs_;
  bool has_tools_;
  size_t echo_len_ = 0;
  const TextCodec& codec_;
  std::string id_;
  int64_t created_;
  std::string model_;
  ReasoningSplitter splitter_;
  std::string text_;            // all content text so far (completions: with the echo prefix)
  std::string reasoning_;       // thinking mode: all reasoning text so far
  std::vector<int32_t> output_ids_;
  std::vector<engine::TokenLogprob> logprobs_;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  std::string finish_reason_;
  std::string matched_stop_;
  int status_ = 200;
  std::string error_;
  double start_time_;
};

}  // namespace dsv4::server
