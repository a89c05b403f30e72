// parse_reply(): the reverse of the assistant turn layout in chat_encoding.h.
#include <algorithm>
#include <regex>

#include "base/check.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/python_json.h"

namespace dsv4::tokenizer {
namespace {

// Finds the earliest of stops at or after *pos. Returns the index of the stop found (or -1) and
// sets *before to the text in between; *pos moves past the stop (or to the end).
int read_until(std::string_view text, size_t* pos, std::initializer_list<std::string_view> stops,
               std::string_view* before) {
  size_t best = std::string_view::npos;
  int which = -1, k = 0;
  for (const std::string_view s : stops) {
    const size_t p = text.find(s, *pos);
    if (p != std::string_view::npos && p < best) {
      best = p;
      which = k;
    }
    ++k;
  }
  if (which < 0) {
    *before = text.substr(*pos);
    *pos = text.size();
    return -1;
  }
  *before = text.substr(*pos, best - *pos);
  *pos = best + std::data(stops)[which].size();
  return which;
}

std::vector<ToolCall> parse_tool_calls(std::string_view text, size_t* pos) {
  const std::string d(kDsml);
  const std::string invoke_open = "<" + d + "invoke", invoke_close = "</" + d + "invoke";
  const std::string param_open = "<" + d + "parameter", param_close = "/" + d + "parameter";
  const std::string block_close = "</" + d + "tool_calls>";
  static const std::regex name_re(R"re(^\s*name="([\s\S]*?)">\n\n?$)re");  // \n\n: no parameters
  static const std::regex param_re(R"re(^ name="([\s\S]*?)" string="(true|false)">([\s\S]*)<$)re");
  std::vector<ToolCall> calls;
  std::string_view between;
  while (true) {
    const int stop = read_until(text, pos, {invoke_open, block_close}, &between);
    DSV4_CHECK(between == ">\n", "reply: DSML tool call format error: expected '>\\n' but got '",
               between, "'");
    if (stop == 1) break;
    DSV4_CHECK(stop == 0, "reply: DSML tool_calls block is not closed");
    int s = read_until(text, pos, {param_open, invoke_close}, &between);
    std::smatch m;
    const std::string name_part(between);
    DSV4_CHECK(s >= 0 && std::regex_match(name_part, m, name_re), "reply: DSML invoke name format error: '",
               name_part, "'");
    ToolCall call{"", m[1].str(), ""};
    std::string args = "{";
    std::vector<std::string> seen;
    while (s == 0) {
      DSV4_CHECK(read_until(text, pos, {param_close}, &between) == 0,
                 "reply: DSML parameter is not closed");
      const std::string param(between);
      std::smatch pm;
      DSV4_CHECK(std::regex_match(param, pm, param_re), "reply: DSML parameter format error: '",
                 param, "'");
      const std::string key = pm[1].str();
      DSV4_CHECK(std::find(seen.begin(), seen.end(), key) == seen.end(),
                 "reply: duplicate DSML parameter '", key, "'");
      seen.push_back(key);
      if (args.size() > 1) args += ", ";
      args += python_json_string(key) + ": " +
              (pm[2].str() == "true" ? python_json_string(pm[3].str()) : pm[3].str());
      s = read_until(text, pos, {param_open, invoke_close}, &between);
      DSV4_CHECK(between == ">\n", "reply: DSML parameter format error: expected '>\\n' but got '",
                 between, "'");
    }
    DSV4_CHECK(s == 1, "reply: DSML invoke is not closed");
    call.arguments_json = args + "}";
    calls.push_back(std::move(call));
  }
  return calls;
}

}  // namespace

ParsedReply parse_reply(std::string_view text, bool thinking) {
  ParsedReply reply;
  const std::string tool_calls_start = "\n\n<" + std::string(kDsml) + "tool_calls";
  size_t pos = 0;
  std::string_view part;
  if (thinking) {
    const size_t end_think = text.find(kThinkEnd);
    if (end_think == std::string_view::npos) {  // generation stopped inside the reasoning
      const int s = read_until(text, &pos, {kEosToken}, &part);
      reply.reasoning_content = std::string(part);
      DSV4_CHECK(s < 0 || pos == text.size(), "reply: unexpected text after the end of sentence");
      return reply;
    }
    const int s = read_until(text, &pos, {kThinkEnd, tool_calls_start}, &part);
    DSV4_CHECK(s == 0, "reply: tool calls before </think> in thinking mode");
    reply.reasoning_content = std::string(part);
  }
  const int s = read_until(text, &pos, {kEosToken, tool_calls_start}, &part);
  reply.content = std::string(part);
  if (s == 1) {
    reply.tool_calls = parse_tool_calls(text, &pos);
    const int e = read_until(text, &pos, {kEosToken}, &part);
    DSV4_CHECK(part.empty(), "reply: unexpected text after the tool calls: '", part, "'");
    (void)e;
  }
  DSV4_CHECK(pos == text.size(), "reply: unexpected text after the end of sentence: '",
             text.substr(pos), "'");
  return reply;
}

}  // namespace dsv4::tokenizer
