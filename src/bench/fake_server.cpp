#include "bench/fake_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "base/check.h"

namespace dsv4::bench::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool write_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string chunk(const std::string& payload) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", payload.size());
  return size + payload + "\r\n";
}

std::string sse(const json& j) { return chunk("data: " + j.dump() + "\n\n"); }

// Reads one request; returns false on EOF or malformed input.
bool read_request(int fd, std::string& method, std::string& path, std::string& body) {
  std::string data;
  char buf[4096];
  size_t header_end;
  while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    data.append(buf, static_cast<size_t>(n));
  }
  const std::string head = data.substr(0, header_end);
  const size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) return false;
  method = head.substr(0, sp1);
  path = head.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t length = 0;
  for (const char* key : {"Content-Length: ", "content-length: "}) {
    const size_t at = head.find(key);
    if (at != std::string::npos) length = std::stoul(head.substr(at + std::strlen(key)));
  }
  body = data.substr(header_end + 4);
  while (body.size() < length) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    body.append(buf, static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

FakeServer::FakeServer(Script script) : script_(std::move(script)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  DSV4_CHECK(listen_fd_ >= 0, "socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  DSV4_CHECK(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0,
             "bind() failed");
  DSV4_CHECK(::listen(listen_fd_, 128) == 0, "listen() failed");
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

FakeServer::~FakeServer() {
  stop_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : workers_) t.join();
}

void FakeServer::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(mu_);
    workers_.emplace_back([this, fd] {
      serve(fd);
      ::close(fd);
    });
  }
}

void FakeServer::serve(int fd) {
  std::string method, path, body;
  if (!read_request(fd, method, path, body)) return;
  const auto arrival = Clock::now();
  if (method == "GET" && path == "/v1/models") {
    const std::string payload = R"({"object":"list","data":[{"id":"fake-model"}]})";
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(payload.size()) + "\r\nConnection: close\r\n\r\n" + payload);
    return;
  }
  ++posts_;
  const int now_in = ++in_flight_;
  for (int m = max_in_flight_.load(); now_in > m && !max_in_flight_.compare_exchange_weak(m, now_in);) {
  }
  const json req = json::parse(body, nullptr, /*allow_exceptions=*/false);
  FakeReply reply = script_(path, req);
  if (reply.http_status != 200) {
    --in_flight_;  // before the write, as at the end of a stream
    const std::string payload = R"({"error":{"message":"scripted failure"}})";
    write_all(fd, "HTTP/1.1 " + std::to_string(reply.http_status) +
                      " Error\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(payload.size()) + "\r\nConnection: close\r\n\r\n" + payload);
    return;
  }
  const bool generate = path == "/generate";
  const bool chat = path == "/v1/chat/completions";
  int tokens = reply.tokens;
  if (tokens < 0 && req.is_object()) {
    tokens = generate ? req["sampling_params"].value("max_new_tokens", 1)
                      : req.value("max_tokens", 1);
  }
  write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
  if (chat && reply.role_chunk) {
    write_all(fd, sse({{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}}}}}}}));
  }
  std::string text;
  for (int k = 0; k < tokens; ++k) {
    std::this_thread::sleep_until(arrival + std::chrono::milliseconds(reply.ttft_ms) +
                                  std::chrono::milliseconds(reply.token_ms) * k);
    const std::string piece = " t" + std::to_string(k);
    json ev;
    if (generate) {
      text += piece;
      ev = {{"text", text}};
      if (reply.send_usage) {
        ev["meta_info"] = {{"prompt_tokens", reply.prompt_tokens}, {"completion_tokens", k + 1}};
      }
    } else if (chat) {
      ev = {{"choices", {{{"index", 0}, {"delta", {{"content", piece}}}}}}};
    } else {
      ev = {{"choices", {{{"index", 0}, {"text", piece}}}}};
    }
    if (!write_all(fd, sse(ev))) break;
  }
  if (!generate && reply.send_usage) {
    write_all(fd, sse({{"choices", json::array()},
                       {"usage", {{"prompt_tokens", reply.prompt_tokens},
                                  {"completion_tokens", tokens}}}}));
  }
  --in_flight_;  // before the last write, so the client cannot start its next request first
  write_all(fd, chunk("data: [DONE]\n\n") + "0\r\n\r\n");
}

}  // namespace dsv4::bench::testing
