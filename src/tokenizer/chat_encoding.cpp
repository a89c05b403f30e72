#include "tokenizer/chat_encoding.h"

#include <algorithm>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "tokenizer/python_json.h"

namespace dsv4::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

// The tools section; {D} = ｜DSML｜, {S} = schemas (one JSON object per line).
std::string tools_section(const std::vector<ojson>& tools) {
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i) schemas += '\n';
    schemas += python_json_dumps(tools[i]);
  }
  const std::string d(kDsml);
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
         "invoke tools by writing a \"<" + d + "tool_calls>\" block like the following:\n\n<" + d +
         "tool_calls>\n<" + d + "invoke name=\"$TOOL_NAME\">\n<" + d +
         "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d +
         "parameter>\n...\n</" + d + "invoke>\n<" + d + "invoke name=\"$TOOL_NAME2\">\n...\n</" + d +
         "invoke>\n</" + d + "tool_calls>\n\nString parameters should be specified as is and set "
         "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the "
         "value in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled "
         "(triggered by " + std::string(kThinkStart) + "), you MUST output your complete reasoning "
         "inside " + std::string(kThinkStart) + "..." + std::string(kThinkEnd) +
         " BEFORE any tool calls or final response.\n\nOtherwise, output directly after " +
         std::string(kThinkEnd) + " with tool calls or final response.\n\n### Available Tool "
         "Schemas\n\n" + schemas + "\n\nYou MUST strictly follow the above defined tool name and "
         "parameter schemas to invoke tool calls.\n";
}

// One argument set as DSML parameters (string values raw, others as Python-style JSON).
std::string dsml_arguments(const ToolCall& call) {
  ojson args = ojson::parse(call.arguments_json, nullptr, /*allow_exceptions=*/false);
  if (!args.is_object()) args = ojson{{"arguments", call.arguments_json}};
  std::string out;
  bool first = true;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!first) out += '\n';
    first = false;
    const bool is_str = it.value().is_string();
    out += "<" + std::string(kDsml) + "parameter name=\"" + it.key() + "\" string=\"" +
           (is_str ? "true" : "false") + "\">" +
           (is_str ? it.value().get<std::string>() : python_json_dumps(it.value())) + "</" +
           std::string(kDsml) + "parameter>";
  }
  return out;
}

struct Block {
  bool is_tool_result;
  std::string text;
  std::string tool_call_id;
};

// A message after tool merging (the Python encoder's internal form).
struct Turn {
  std::string role = {};
  std::string content = {};
  std::optional<std::string> reasoning = {};
  std::vector<ToolCall> tool_calls = {};
  std::vector<Block> blocks = {};  // user turns
  bool has_tools = false;
};

int last_user_index(const std::vector<Turn>& turns) {
  for (int i = static_cast<int>(turns.size()) - 1; i >= 0; --i) {
    if (turns[i].role == "user" || turns[i].role == "developer") return i;
  }
  return -1;
}

std::vector<ojson> parse_tools(const std::string& tools_json) {
  std::vector<ojson> tools;
  if (tools_json.empty()) return tools;
  const ojson j = ojson::parse(tools_json, nullptr, /*allow_exceptions=*/false);
  DSV4_CHECK(j.is_array(), "tools: expected a JSON array of {\"type\": \"function\", \"function\": {...}}");
  for (size_t i = 0; i < j.size(); ++i) {
    DSV4_CHECK(j[i].is_object() && j[i].contains("function") && j[i]["function"].is_object() &&
                   j[i]["function"].contains("name"),
               "tools[", i, "]: expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
    tools.push_back(j[i]["function"]);
  }
  return tools;
}

std::vector<Turn> merge_turns(const std::vector<ChatMessage>& messages, bool has_tools) {
  std::vector<Turn> turns;
  if (has_tools) {
    const bool has_system = std::any_of(messages.begin(), messages.end(),
                                        [](const ChatMessage& m) { return m.role == "system"; });
    if (!has_system) turns.push_back(Turn{.role = "system", .has_tools = true});
  }
  bool tools_attached = !turns.empty();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      DSV4_CHECK(!m.tool_call_id.empty(), "messages[", i, "].tool_call_id is required for role tool");
      Block b{true, m.content, m.tool_call_id};
      if (!turns.empty() && turns.back().role == "user" && !turns.back().blocks.empty()) {
        turns.back().blocks.push_back(std::move(b));
      } else {
        turns.push_back(Turn{.role = "user", .blocks = {std::move(b)}});
      }
    } else if (m.role == "user") {
      Block b{false, m.content, {}};
      if (!turns.empty() && turns.back().role == "user" && !turns.back().blocks.empty()) {
        turns.back().blocks.push_back(std::move(b));
      } else {
        turns.push_back(Turn{.role = "user", .content = m.content, .blocks = {std::move(b)}});
      }
    } else if (m.role == "system" || m.role == "developer" || m.role == "assistant" ||
               m.role == "latest_reminder") {
      DSV4_CHECK(m.role != "developer" || !m.content.empty(), "messages[", i,
                 "].content must not be empty for role developer");
      Turn t{.role = m.role, .content = m.content, .reasoning = m.reasoning_content,
             .tool_calls = m.tool_calls};
      if (m.role == "system" && has_tools && !tools_attached) t.has_tools = tools_attached = true;
      turns.push_back(std::move(t));
    } else {
      DSV4_FAIL("messages[", i, "].role: unknown role '", m.role, "'");
    }
  }
  // Tool results follow the order of the latest assistant tool_calls (stable for unknown ids).
  std::unordered_map<std::string, int> order;
  for (Turn& t : turns) {
    if (t.role == "assistant" && !t.tool_calls.empty()) {
      order.clear();
      for (size_t k = 0; k < t.tool_calls.size(); ++k) {
        if (!t.tool_calls[k].id.empty()) order.emplace(t.tool_calls[k].id, static_cast<int>(k));
      }
    } else if (t.role == "user" && !order.empty()) {
      std::vector<Block> results;
      for (const Block& b : t.blocks) {
        if (b.is_tool_result) results.push_back(b);
      }
      if (results.size() < 2) continue;
      auto rank = [&](const Block& b) {
        const auto it = order.find(b.tool_call_id);
        return it == order.end() ? 0 : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
      size_t r = 0;
      for (Block& b : t.blocks) {
        if (b.is_tool_result) b = results[r++];
      }
    }
  }
  return turns;
}

// Drops reasoning of assistant turns (and developer turns) before the last user turn.
std::vector<Turn> drop_old_thinking(std::vector<Turn> turns) {
  const int last = last_user_index(turns);
  std::vector<Turn> out;
  for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
    Turn& t = turns[i];
    if (i >= last || t.role == "user" || t.role == "system" || t.role == "latest_reminder") {
      out.push_back(std::move(t));
    } else if (t.role == "assistant") {
      t.reasoning.reset();
      out.push_back(std::move(t));
    }  // developer turns before the last user turn are dropped
  }
  return out;
}

}  // namespace

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  const std::string effort = options.reasoning_effort.value_or("");
  DSV4_CHECK(effort.empty() || effort == "low" || effort == "medium" || effort == "high" ||
                 effort == "max",
             "reasoning_effort: '", effort, "' is not one of low, medium, high, max");
  const std::vector<ojson> tools = parse_tools(options.tools_json);
  const bool thinking = options.thinking;
  const bool drop_thinking = tools.empty();  // tools keep all reasoning (encoding_dsv4.py)
  std::vector<Turn> turns = merge_turns(messages, !tools.empty());
  if (thinking && drop_thinking) turns = drop_old_thinking(std::move(turns));

  const int n = static_cast<int>(turns.size());
  const int last_user = last_user_index(turns);
  std::string prompt(kBosToken);
  for (int i = 0; i < n; ++i) {
    const Turn& t = turns[i];
    if (i == 0 && thinking && effort == "max") prompt += kReasoningEffortMax;
    if (t.role == "system") {
      prompt += t.content;
      if (t.has_tools) prompt += "\n\n" + tools_section(tools);
    } else if (t.role == "developer") {
      prompt += kUserToken;
      prompt += t.content;
    } else if (t.role == "user") {
      prompt += kUserToken;
      for (size_t k = 0; k < t.blocks.size(); ++k) {
        if (k) prompt += "\n\n";
        const Block& b = t.blocks[k];
        prompt += b.is_tool_result ? "<tool_result>" + b.text + "</tool_result>" : b.text;
      }
    } else if (t.role == "latest_reminder") {
      prompt += kLatestReminderToken;
      prompt += t.content;
    } else {  // assistant
      if (thinking && (!drop_thinking || i > last_user)) {
        prompt += t.reasoning.value_or("");
        prompt += kThinkEnd;
      }
      prompt += t.content;
      if (!t.tool_calls.empty()) {
        const std::string d(kDsml);
        prompt += "\n\n<" + d + "tool_calls>\n";
        for (size_t k = 0; k < t.tool_calls.size(); ++k) {
          if (k) prompt += '\n';
          prompt += "<" + d + "invoke name=\"" + t.tool_calls[k].name + "\">\n" +
                    dsml_arguments(t.tool_calls[k]) + "\n</" + d + "invoke>";
        }
        prompt += "\n</" + d + "tool_calls>";
      }
      prompt += kEosToken;
    }
    // Transition into the assistant turn.
    if (i + 1 < n && turns[i + 1].role != "assistant" && turns[i + 1].role != "latest_reminder") continue;
    if (i + 1 == n && !options.add_generation_prompt) continue;
    if (t.role == "user" || t.role == "developer") {
      prompt += kAssistantToken;
      prompt += thinking && (!drop_thinking || i >= last_user) ? kThinkStart : kThinkEnd;
    }
  }
  return prompt;
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                 const ChatOptions& options) {
  return tokenizer.encode(render_chat(messages, options));
}

}  // namespace dsv4::tokenizer
