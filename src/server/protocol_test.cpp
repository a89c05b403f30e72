// Table-driven bad-input tests through ApiService (no sockets), plus response shapes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <thread>

#include "engine/engine.h"
#include "engine/test_runner.h"
#include "server/api_service.h"
#include "server/text_codec.h"

namespace dsv4::server {
namespace {

using nlohmann::json;

struct Fixture {
  std::unique_ptr<TextCodec> codec = make_byte_codec();
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<ApiService> service;
  explicit Fixture(std::string api_key = "") {
    engine::EngineConfig c;
    c.cpu_cache_bytes = 1 << 20;
    c.eos_ids = {codec->eos_id()};
    c.sample_vocab_size = codec->vocab_size();
    c.detokenizer = codec->detokenizer_factory();
    c.decode_log_interval = 0;
    c.log_prefill = false;
    engine = std::make_unique<engine::Engine>(c, std::make_unique<engine::testing::TestRunner>(260, 512));
    engine->start();
    ServiceOptions o;
    o.served_model = "deepseek-v4";
    o.api_key = std::move(api_key);
    o.max_body_bytes = 1 << 16;
    service = std::make_unique<ApiService>(o);
    service->attach(*engine, *codec);
  }
  // Runs a request to completion; returns {status, body}.
  std::pair<int, std::string> call(const std::string& method, const std::string& path, const std::string& body,
                                   const std::string& auth = "") {
    HttpReply r = service->handle({method, path, body, auth});
    if (!r.stream) return {r.status, r.body};
    std::string out;
    while (!r.stream->take(out)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return {r.stream->streaming() ? 200 : r.stream->status(), out};
  }
};

struct BadCase {
  const char* name;
  const char* path;
  std::string body;
  int status;
  const char* param;  // expected error.param ("" = null)
};

std::string big(size_t n) { return std::string(n, 'a'); }

TEST(Protocol, BadInputGetsOpenAiErrorsAndServerStaysUp) {
  Fixture f;
  const char* chat = "/v1/chat/completions";
  const char* cmpl = "/v1/completions";
  const std::vector<BadCase> cases = {
      {"malformed json", chat, "{\"messages\": [", 400, ""},
      {"body not object", chat, "[1,2]", 400, ""},
      {"missing messages", chat, R"({"model":"deepseek-v4"})", 400, "messages"},
      {"messages not array", chat, R"({"messages":"hi"})", 400, "messages"},
      {"empty messages", chat, R"({"messages":[]})", 400, "messages"},
      {"message not object", chat, R"({"messages":["hi"]})", 400, "messages[0]"},
      {"bad role", chat, R"({"messages":[{"role":"wizard","content":"hi"}]})", 400, "messages[0].role"},
      {"role not string", chat, R"({"messages":[{"role":1,"content":"hi"}]})", 400, "messages[0].role"},
      {"content wrong type", chat, R"({"messages":[{"role":"user","content":5}]})", 400, "messages[0].content"},
      {"missing user content", chat, R"({"messages":[{"role":"user"}]})", 400, "messages[0].content"},
      {"bad content part", chat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", 400,
       "messages[0].content"},
      {"tool without id", chat, R"({"messages":[{"role":"tool","content":"x"}]})", 400, "messages[0].tool_call_id"},
      {"unknown model", chat, R"({"model":"gpt-9","messages":[{"role":"user","content":"hi"}]})", 404, "model"},
      {"model not string", chat, R"({"model":3,"messages":[{"role":"user","content":"hi"}]})", 400, "model"},
      {"max_tokens zero", chat, R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":0})", 400, "max_tokens"},
      {"max_tokens negative", chat, R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":-5})", 400,
       "max_tokens"},
      {"max_tokens string", chat, R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":"10"})", 400,
       "max_tokens"},
      {"max_tokens beyond context", chat, R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":100000})", 400,
       "max_tokens"},
      {"prompt plus max_tokens beyond context", chat,
       R"({"messages":[{"role":"user","content":")" + big(300) + R"("}],"max_tokens":300})", 400, "max_tokens"},
      {"max_completion_tokens zero", chat,
       R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0})", 400, "max_completion_tokens"},
      {"prompt longer than context", chat, R"({"messages":[{"role":"user","content":")" + big(600) + R"("}]})", 400,
       "messages"},
      {"temperature too high", chat, R"({"messages":[{"role":"user","content":"hi"}],"temperature":3})", 400,
       "temperature"},
      {"temperature negative", chat, R"({"messages":[{"role":"user","content":"hi"}],"temperature":-0.1})", 400,
       "temperature"},
      {"temperature string", chat, R"({"messages":[{"role":"user","content":"hi"}],"temperature":"hot"})", 400,
       "temperature"},
      {"top_p zero", chat, R"({"messages":[{"role":"user","content":"hi"}],"top_p":0})", 400, "top_p"},
      {"top_p above one", chat, R"({"messages":[{"role":"user","content":"hi"}],"top_p":1.5})", 400, "top_p"},
      {"top_k below -1", chat, R"({"messages":[{"role":"user","content":"hi"}],"top_k":-2})", 400, "top_k"},
      {"min_p above one", chat, R"({"messages":[{"role":"user","content":"hi"}],"min_p":2})", 400, "min_p"},
      {"presence_penalty", chat, R"({"messages":[{"role":"user","content":"hi"}],"presence_penalty":3})", 400,
       "presence_penalty"},
      {"frequency_penalty", chat, R"({"messages":[{"role":"user","content":"hi"}],"frequency_penalty":-2.5})", 400,
       "frequency_penalty"},
      {"repetition_penalty zero", chat, R"({"messages":[{"role":"user","content":"hi"}],"repetition_penalty":0})", 400,
       "repetition_penalty"},
      {"seed not integer", chat, R"({"messages":[{"role":"user","content":"hi"}],"seed":1.5})", 400, "seed"},
      {"stop wrong type", chat, R"({"messages":[{"role":"user","content":"hi"}],"stop":7})", 400, "stop"},
      {"stop too many", chat,
       R"({"messages":[{"role":"user","content":"hi"}],"stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
       400, "stop"},
      {"n not one", chat, R"({"messages":[{"role":"user","content":"hi"}],"n":2})", 400, "n"},
      {"stream not bool", chat, R"({"messages":[{"role":"user","content":"hi"}],"stream":"yes"})", 400, "stream"},
      {"stream_options without stream", chat,
       R"({"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}})", 400,
       "stream_options"},
      {"top_logprobs without logprobs", chat, R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":3})", 400,
       "top_logprobs"},
      {"top_logprobs too many", chat,
       R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":50})", 400, "top_logprobs"},
      {"bad reasoning_effort", chat, R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"extreme"})",
       400, "reasoning_effort"},
      {"chat_template_kwargs not object", chat,
       R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":true})", 400, "chat_template_kwargs"},
      {"invalid utf-8", chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, ""},
      {"completion missing prompt", cmpl, R"({"max_tokens":5})", 400, "prompt"},
      {"completion prompt wrong type", cmpl, R"({"prompt":{"a":1}})", 400, "prompt"},
      {"completion batched prompts", cmpl, R"({"prompt":["a","b"]})", 400, "prompt"},
      {"completion token id out of range", cmpl, R"({"prompt":[1,2,99999]})", 400, "prompt"},
      {"completion empty token list", cmpl, R"({"prompt":[]})", 400, "prompt"},
      {"completion logprobs too many", cmpl, R"({"prompt":"hi","logprobs":99})", 400, "logprobs"},
      {"generate neither text nor ids", "/generate", R"({"sampling_params":{}})", 400, "text"},
      {"generate bad sampling param", "/generate", R"({"text":"hi","sampling_params":{"max_new_tokens":0}})", 400,
       "sampling_params.max_new_tokens"},
      {"generate sampling_params not object", "/generate", R"({"text":"hi","sampling_params":[]})", 400,
       "sampling_params"},
      {"body too large", chat, R"({"messages":[{"role":"user","content":")" + big(70000) + R"("}]})", 413, ""},
      {"unknown path", "/v1/embeddings", "{}", 404, ""},
  };
  ASSERT_GE(cases.size(), 25u);
  for (const BadCase& c : cases) {
    auto [status, body] = f.call("POST", c.path, c.body);
    EXPECT_EQ(status, c.status) << c.name << ": " << body;
    const json j = json::parse(body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << c.name << ": " << body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.name;
    EXPECT_TRUE(e.contains("type") && e.contains("param") && e.contains("code")) << c.name;
    if (std::string(c.param).empty()) {
      EXPECT_TRUE(e["param"].is_null()) << c.name << ": " << body;
    } else {
      EXPECT_EQ(e["param"], c.param) << c.name << ": " << body;
    }
  }
  // Still serving.
  auto [status, body] = f.call("POST", chat, R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4})");
  EXPECT_EQ(status, 200) << body;
}

TEST(Protocol, ChatCompletionShape) {
  Fixture f;
  auto [status, body] = f.call("POST", "/v1/chat/completions",
                               R"({"model":"deepseek-v4","messages":[{"role":"user","content":"hi"}],"max_tokens":5,
                                   "logprobs":true,"top_logprobs":2,"seed":3})");
  ASSERT_EQ(status, 200) << body;
  const json j = json::parse(body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 5);
  ASSERT_EQ(j["choices"][0]["logprobs"]["content"].size(), 5u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
}

TEST(Protocol, StreamingChunksUsageAndDone) {
  Fixture f;
  auto [status, body] = f.call("POST", "/v1/completions",
                               R"({"prompt":"hello","max_tokens":6,"stream":true,"stream_options":{"include_usage":true},
                                   "ignore_eos":true})");  // an unseeded EOS draw made this flaky (~1 in 40)
  ASSERT_EQ(status, 200);
  ASSERT_NE(body.find("data: [DONE]\n\n"), std::string::npos);
  std::vector<json> chunks;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string payload = body.substr(pos + 6, end - pos - 6);
    if (payload != "[DONE]") chunks.push_back(json::parse(payload));
    pos = end;
  }
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks.back()["choices"].size(), 0u);
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 6);
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
}

TEST(Protocol, ThinkingModeSplitsReasoning) {
  ReasoningSplitter s(true);
  auto a = s.push("let me think</th");
  EXPECT_EQ(a.reasoning, "let me think");
  auto b = s.push("ink>The answer");
  EXPECT_EQ(b.reasoning, "");
  EXPECT_EQ(b.content, "The answer");
  Fixture f;
  auto [status, body] = f.call("POST", "/v1/chat/completions",
                               R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"chat_template_kwargs":{"thinking":true}})");
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(json::parse(body)["choices"][0]["message"].contains("reasoning_content"));
}

TEST(Protocol, GenerateAndModelsAndHealthAndMetrics) {
  Fixture f;
  auto [s1, b1] = f.call("POST", "/generate", R"({"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4,"temperature":0}})");
  ASSERT_EQ(s1, 200) << b1;
  const json g = json::parse(b1);
  EXPECT_EQ(g["output_ids"].size(), 4u);
  EXPECT_EQ(g["meta_info"]["finish_reason"]["type"], "length");
  auto [s2, b2] = f.call("GET", "/v1/models", "");
  EXPECT_EQ(s2, 200);
  EXPECT_EQ(json::parse(b2)["data"][0]["id"], "deepseek-v4");
  EXPECT_EQ(f.call("GET", "/health", "").first, 200);
  auto [s3, b3] = f.call("GET", "/metrics", "");
  EXPECT_EQ(s3, 200);
  EXPECT_NE(b3.find("dsv4:generation_tokens_total"), std::string::npos);
  EXPECT_NE(b3.find("dsv4:time_to_first_token_seconds_bucket"), std::string::npos);
  EXPECT_NE(b3.find("dsv4:cache_pool_usage{pool=\"layer0.window\"}"), std::string::npos);
  f.service->begin_drain();
  EXPECT_EQ(f.call("GET", "/health", "").first, 503);
  EXPECT_EQ(f.call("POST", "/v1/completions", R"({"prompt":"x"})").first, 503);
}

TEST(Protocol, ApiKeyAndNotReady) {
  Fixture f("sekret");
  EXPECT_EQ(f.call("POST", "/v1/completions", R"({"prompt":"x","max_tokens":1})").first, 401);
  EXPECT_EQ(f.call("POST", "/v1/completions", R"({"prompt":"x","max_tokens":1})", "Bearer wrong").first, 401);
  EXPECT_EQ(f.call("POST", "/v1/completions", R"({"prompt":"x","max_tokens":1})", "Bearer sekret").first, 200);
  EXPECT_EQ(f.call("GET", "/health", "").first, 200);
  ApiService idle(ServiceOptions{});
  EXPECT_EQ(idle.handle({"GET", "/health", "", ""}).status, 503);
  EXPECT_EQ(idle.handle({"POST", "/v1/completions", "{}", ""}).status, 503);
}

TEST(Protocol, DeterministicWithSeed) {
  Fixture f;
  const std::string req = R"({"prompt":"abc","max_tokens":12,"temperature":1.0,"seed":42,"stop":["zz"]})";
  auto [s1, b1] = f.call("POST", "/v1/completions", req);
  auto [s2, b2] = f.call("POST", "/v1/completions", req);
  ASSERT_EQ(s1, 200);
  EXPECT_EQ(json::parse(b1)["choices"][0]["text"], json::parse(b2)["choices"][0]["text"]);
}

}  // namespace
}  // namespace dsv4::server
