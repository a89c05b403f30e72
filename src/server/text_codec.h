// TextCodec: everything the server needs from a tokenizer, behind one interface so the
// server can run on the real DeepSeek tokenizer (tokenizer_codec.cpp) or on a byte-level
// codec (byte_codec.cpp, for tests and for bring-up without tokenizer.json).
//
// Thread-safety: all methods are const and callable from any thread concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text_stream.h"

namespace dsv4::server {

struct ToolCallSpec {
  std::string id, name, arguments_json;
};

struct ChatMessage {
  std::string role;  // system | developer | user | assistant | tool
  std::string content;
  std::optional<std::string> reasoning_content;
  std::vector<ToolCallSpec> tool_calls;
  std::string tool_call_id, name;
};

struct ChatOptions {
  bool thinking = false;
  std::optional<std::string> reasoning_effort;
  std::string tools_json;  // OpenAI tools array as JSON text, empty if none
  bool add_generation_prompt = true;
};

struct ParsedReply {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCallSpec> tool_calls;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;  // adds BOS when the model wants it
  virtual std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special) const = 0;
  virtual std::string token_text(int32_t id) const = 0;  // one token's text, for logprobs
  // Splits generated text into content / reasoning / tool calls. Throws dsv4::Error when malformed.
  virtual ParsedReply parse_reply(std::string_view text, bool thinking) const = 0;
  virtual int64_t vocab_size() const = 0;  // ids the tokenizer can produce
  virtual int32_t eos_id() const = 0;
  virtual engine::DetokenizerFactory detokenizer_factory() const = 0;  // factory shares this codec
  virtual std::string name() const = 0;
};

// Bytes are ids 0..255, 256 = BOS, 257 = EOS; chat renders "<|role|>content\n" lines.
std::unique_ptr<TextCodec> make_byte_codec();
// The DeepSeek tokenizer from tokenizer.json. Throws dsv4::Error when the file is unusable.
std::unique_ptr<TextCodec> make_tokenizer_codec(const std::string& tokenizer_json_path);

// Splits streamed text at "</think>" for thinking mode: text before it is reasoning, after it
// content; a partial "</think>" at the end of a piece is held back. One per request.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool thinking) : in_reasoning_(thinking) {}
  struct Piece {
    std::string reasoning, content;
  };
  Piece push(std::string_view text);
  Piece flush();

 private:
  bool in_reasoning_;
  std::string held_;
};

}  // namespace dsv4::server
