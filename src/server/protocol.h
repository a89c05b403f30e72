// Wire protocol: OpenAI (/v1/chat/completions, /v1/completions) and SGLang (/generate)
// requests parsed into plain structs, and errors in OpenAI's shape. JSON stays in the
// server: the engine only sees engine::GenerateInput.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "server/text_codec.h"

namespace dsv4::server {

// {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("" = null)
  std::string code;   // "" = null
};
std::string error_json(const ApiError& e);

enum class Endpoint { kChat, kCompletion, kGenerate };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  engine::SamplingParams params;
  bool max_tokens_given = false;   // else the server fills in context - prompt
  // Chat.
  std::vector<ChatMessage> messages;
  ChatOptions chat;
  // Completion / generate: text prompt or token ids.
  std::optional<std::string> prompt_text;
  std::vector<int32_t> input_ids;
  bool echo = false;               // completions: prepend the prompt to the text
  bool return_logprob = false;     // generate: meta_info logprobs
};

struct ParseLimits {
  std::string served_model;  // requests naming another model get 404
  int64_t max_context = 0;
  int64_t vocab_size = 0;    // input_ids must be below this
  int64_t max_stop = 16;     // stop strings per request
};

// Each returns the request or the error to send (always 4xx).
struct ParseResult {
  std::optional<ParsedRequest> request;
  ApiError error;
  bool ok() const { return request.has_value(); }
};
ParseResult parse_chat_request(std::string_view body, const ParseLimits& limits);
ParseResult parse_completion_request(std::string_view body, const ParseLimits& limits);
ParseResult parse_generate_request(std::string_view body, const ParseLimits& limits);

}  // namespace dsv4::server
