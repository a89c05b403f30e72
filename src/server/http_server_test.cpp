// HttpServer over loopback with the deterministic test runner.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine/test_runner.h"
#include "tests/e2e/http_client.h"

namespace dsv4::server {
namespace {

using dsv4::testing::HttpConnection;
using dsv4::testing::HttpResult;
using dsv4::testing::http_request;

struct LiveServer {
  std::unique_ptr<TextCodec> codec = make_byte_codec();
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<ApiService> service;
  std::unique_ptr<HttpServer> http;
  std::thread thread;
  uint16_t port = 0;

  LiveServer() {
    engine::EngineConfig c;
    c.cpu_cache_bytes = 1 << 20;
    c.eos_ids = {codec->eos_id()};
    c.sample_vocab_size = codec->vocab_size();
    c.detokenizer = codec->detokenizer_factory();
    c.decode_log_interval = 0;
    c.log_prefill = false;
    auto runner = std::make_unique<engine::testing::TestRunner>(260, 4096);
    runner->step_delay = std::chrono::milliseconds(2);
    engine = std::make_unique<engine::Engine>(c, std::move(runner));
    engine->start();
    service = std::make_unique<ApiService>(ServiceOptions{});
    service->attach(*engine, *codec);
    HttpServerOptions o;
    o.port = 0;
    o.num_threads = 2;
    http = std::make_unique<HttpServer>(*service, o);
    http->listen();
    port = http->port();
    thread = std::thread([this] { http->run(nullptr); });
  }
  ~LiveServer() {
    http->stop();
    thread.join();
    engine->stop();
  }
};

TEST(HttpServer, HealthChatAndStream) {
  LiveServer s;
  EXPECT_EQ(http_request(s.port, "GET", "/health").status, 200);
  HttpResult r = http_request(s.port, "POST", "/v1/chat/completions",
                              R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("chat.completion"), std::string::npos);
  r = http_request(s.port, "POST", "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true})");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.headers.find("text/event-stream"), std::string::npos);
  const auto data = dsv4::testing::sse_data(r.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  r = http_request(s.port, "POST", "/v1/chat/completions", "{bad json");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("\"error\""), std::string::npos);
}

TEST(HttpServer, DisconnectAbortsAndFreesCache) {
  LiveServer s;
  {
    HttpConnection c(s.port);
    ASSERT_TRUE(c.ok());
    c.send_request("POST", "/v1/completions", R"({"prompt":"hello","max_tokens":3000,"stream":true,"ignore_eos":true})");
    HttpResult head;
    ASSERT_TRUE(c.read_head(head));
    int chunks = 0;
    c.read_body([&](const std::string&) { return ++chunks < 5; });
  }  // closes the socket mid-stream
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.engine->num_inflight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.engine->num_inflight(), 0);
  EXPECT_EQ(s.engine->metrics().requests_aborted.load(), 1u);
  // The cache is released after the abort is counted: poll (a fixed 100 ms sleep raced on a
  // loaded CI machine).
  const auto freed = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.engine->metrics().cache_used_bytes.load() != 0 && std::chrono::steady_clock::now() < freed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.engine->metrics().cache_used_bytes.load(), 0);

  // Non-streaming request whose client goes away is aborted too.
  {
    HttpConnection c(s.port);
    c.send_request("POST", "/v1/completions", R"({"prompt":"hello","max_tokens":3000,"ignore_eos":true})");
    // Close once the engine holds the request. (This check failed on CI once: the abort reached
    // the engine's inbox before the submit it followed and was dropped; the engine now defers
    // such aborts — Engine.AbortFromAnotherThreadRightAfterSubmitIsNeverLost.)
    const auto admitted = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (s.engine->num_inflight() == 0 && std::chrono::steady_clock::now() < admitted) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  const auto deadline2 = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.engine->metrics().requests_aborted.load() < 2 && std::chrono::steady_clock::now() < deadline2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.engine->metrics().requests_aborted.load(), 2u);
}

// The client sends a request and closes at once: the server reads the request with the EOF
// already queued behind it, and its abort follows the submit within microseconds, possibly from
// another I/O thread. The request must end aborted, not run 3000 tokens for nobody.
TEST(HttpServer, CloseRightAfterSendingAborts) {
  LiveServer s;
  for (int i = 1; i <= 3; ++i) {
    {
      HttpConnection c(s.port);
      ASSERT_TRUE(c.ok());
      c.send_request("POST", "/v1/completions",
                     i % 2 ? R"({"prompt":"hi","max_tokens":3000,"ignore_eos":true})"
                           : R"({"prompt":"hi","max_tokens":3000,"ignore_eos":true,"stream":true})");
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (s.engine->metrics().requests_aborted.load() < uint64_t(i) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(s.engine->metrics().requests_aborted.load(), uint64_t(i));
  }
  EXPECT_EQ(s.engine->metrics().requests_finished.load(), 0u);
}

TEST(HttpServer, PortTakenIsAClearError) {
  LiveServer s;
  ApiService other(ServiceOptions{});
  HttpServerOptions o;
  o.port = s.port;
  HttpServer second(other, o);
  try {
    second.listen();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsv4::server
