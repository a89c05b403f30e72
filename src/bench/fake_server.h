// Test-only scripted HTTP server for the bench client (plain POSIX sockets, one thread per
// connection). It answers GET /v1/models and streams SSE for POST /v1/chat/completions,
// /v1/completions and /generate following a FakeReply chosen per request by the test's script.
// Chunk k (0-based) of a reply is written at request arrival + ttft_ms + k * token_ms, on an
// absolute schedule so delays do not accumulate. TCP_NODELAY is set so writes leave at once.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace dsv4::bench::testing {

struct FakeReply {
  int http_status = 200;     // != 200: an error response with a short JSON body
  int ttft_ms = 40;          // delay before the first content chunk
  int token_ms = 20;         // delay between content chunks
  int tokens = -1;           // content chunks to send; -1 = the request's max tokens
  int prompt_tokens = 0;     // reported in usage
  bool send_usage = true;    // final usage chunk (OpenAI) / meta_info (generate)
  bool role_chunk = true;    // chat: an immediate role-only chunk before the content
};

class FakeServer {
 public:
  using Script = std::function<FakeReply(const std::string& path, const nlohmann::json& body)>;

  // Binds 127.0.0.1 on a free port and starts accepting. Throws dsv4::Error on socket errors.
  explicit FakeServer(Script script);
  ~FakeServer();  // stops accepting and joins every connection thread
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int max_in_flight() const { return max_in_flight_.load(); }  // streaming POSTs at once
  int posts() const { return posts_.load(); }

 private:
  void accept_loop();
  void serve(int fd);

  Script script_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> in_flight_{0}, max_in_flight_{0}, posts_{0};
  std::thread acceptor_;
  std::mutex mu_;                       // guards workers_
  std::vector<std::thread> workers_;
};

}  // namespace dsv4::bench::testing
