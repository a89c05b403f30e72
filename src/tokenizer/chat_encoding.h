// DeepSeek-V4 prompt encoding (a C++ re-implementation of encoding/encoding_dsv4.py, spec §6) and
// parsing of a generated reply back into content / reasoning / tool calls.
//
// Prompt layout: BOS, then per message:
//   system     content [+ "\n\n" + tools section]         (reasoning_effort "max" + thinking: the
//                                                          fixed "Reasoning Effort: ..." paragraph
//                                                          goes before the first message)
//   user       <｜User｜>content   (consecutive user / tool messages merge into one user turn, parts
//              joined by "\n\n"; a tool result is "<tool_result>content</tool_result>", ordered
//              like the preceding assistant's tool_calls)
//   developer  <｜User｜>content (dropped before the last user turn in thinking mode)
//   assistant  [reasoning + "</think>"] content ["\n\n" + DSML tool_calls block] <｜end▁of▁sentence｜>
// and after a user/developer turn that is followed by an assistant turn (or ends the list, when
// add_generation_prompt): "<｜Assistant｜>" + "<think>" (thinking mode, last user turn) or
// "</think>". In thinking mode the reasoning of assistant turns before the last user turn is
// dropped, unless tools are given (then every turn keeps its reasoning and opens with <think>).
// Tools (OpenAI "tools" array) are attached to the first system message; when there is none, an
// empty system message is inserted first.
//
// Tokenization: encode_chat() tokenizes the rendered string with Tokenizer::encode, so the special
// strings become ids when they are added tokens of the file (V4: <think>, </think>, ｜DSML｜ ...).
// With a tokenizer file that lacks them (e.g. the DeepSeek-V3 file used by our tests) they are
// tokenized as plain text — correct bytes, different ids than the V4 model was trained on.
//
// Errors: dsv4::Error naming the field (messages[i].role, messages[i].tool_call_id,
// messages[i].content, tools, reasoning_effort, reply). All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dsv4::tokenizer {

struct ToolCall {
  std::string id, name, arguments_json;
};

struct ChatMessage {
  std::string role;  // system | developer | user | assistant | tool | latest_reminder
  std::string content;
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only (required)
  std::string name;                  // tool only (informational)
};

struct ChatOptions {
  bool thinking = false;
  std::optional<std::string> reasoning_effort;  // "low" | "medium" | "high" | "max"; only "max"
                                                // (with thinking) changes the prompt
  std::string tools_json;                       // OpenAI tools array as JSON text, empty if none
  bool add_generation_prompt = true;
};

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options);
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                 const ChatOptions& options);

struct ParsedReply {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;  // id left empty (the server assigns one)
};

// Parses the text generated after the prompt (special tokens kept, e.g. decode without skipping).
// thinking: the prompt ended with <think>, so the reply opens with reasoning up to </think>.
// Lenient where generation may stop early: a missing final EOS is accepted, and in thinking mode a
// reply without any </think> is all reasoning. Malformed DSML tool calls throw dsv4::Error.
ParsedReply parse_reply(std::string_view generated_text, bool thinking);

// The strings the format uses.
inline constexpr std::string_view kBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEosToken = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";

}  // namespace dsv4::tokenizer
