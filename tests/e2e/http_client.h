// Minimal blocking HTTP/1.1 client over POSIX sockets for tests (no Beast: keeps test
// compile times low). One request per connection ("Connection: close"); understands
// Content-Length and chunked bodies; SSE events can be consumed as they arrive.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsv4::testing {

struct HttpResult {
  int status = 0;
  std::string headers;
  std::string body;
};

class HttpConnection {
 public:
  explicit HttpConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~HttpConnection() { close(); }
  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void send_request(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& extra_headers = "") {
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers;
    if (!body.empty() || method == "POST") {
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    }
    req += "\r\n" + body;
    size_t off = 0;
    while (off < req.size()) {
      const ssize_t n = ::send(fd_, req.data() + off, req.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += static_cast<size_t>(n);
    }
  }

  // Reads the status line and headers. Returns false on EOF.
  bool read_head(HttpResult& r) {
    while (buf_.find("\r\n\r\n") == std::string::npos) {
      if (!fill()) return false;
    }
    const size_t end = buf_.find("\r\n\r\n");
    r.headers = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    r.status = std::stoi(r.headers.substr(9, 3));
    std::string lower;
    for (char c : r.headers) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    chunked_ = lower.find("transfer-encoding: chunked") != std::string::npos;
    const size_t cl = lower.find("content-length:");
    content_length_ = cl == std::string::npos ? -1 : std::stoll(lower.substr(cl + 15));
    return true;
  }

  // Calls on_data for each body piece as it arrives (chunk by chunk); false to stop early.
  void read_body(const std::function<bool(const std::string&)>& on_data) {
    if (!chunked_) {
      std::string body;
      while (content_length_ < 0 || static_cast<int64_t>(buf_.size()) < content_length_) {
        if (!fill()) break;
      }
      body = content_length_ < 0 ? buf_ : buf_.substr(0, static_cast<size_t>(content_length_));
      on_data(body);
      return;
    }
    while (true) {
      while (buf_.find("\r\n") == std::string::npos) {
        if (!fill()) return;
      }
      const size_t eol = buf_.find("\r\n");
      const size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
      while (buf_.size() < eol + 2 + size + 2) {
        if (!fill()) return;
      }
      const std::string data = buf_.substr(eol + 2, size);
      buf_.erase(0, eol + 2 + size + 2);
      if (size == 0) return;
      if (!on_data(data)) return;
    }
  }

 private:
  bool fill() {
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string buf_;
  bool chunked_ = false;
  int64_t content_length_ = -1;
};

inline HttpResult http_request(uint16_t port, const std::string& method, const std::string& path,
                               const std::string& body = "", const std::string& extra_headers = "") {
  HttpResult r;
  HttpConnection c(port);
  if (!c.ok()) return r;
  c.send_request(method, path, body, extra_headers);
  if (!c.read_head(r)) return r;
  c.read_body([&](const std::string& d) {
    r.body += d;
    return true;
  });
  return r;
}

// Splits an SSE body into the payloads of its "data: " lines.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6));
    if (end == std::string::npos) break;
    pos = end + 2;
  }
  return out;
}

}  // namespace dsv4::testing
