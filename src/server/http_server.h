// HttpServer: Boost.Beast transport (C++20 coroutines) for ApiService.
//
// One strand per connection; keep-alive; SSE via chunked transfer encoding. While a
// request waits for the engine, the connection watches its socket: a client that closes
// the connection cancels its request (ResponseStream::cancel), and the engine frees its
// cache at the start of the next step.
// SIGTERM/SIGINT: calls on_signal, puts the service in drain mode (new requests get 503),
// waits until the engine has nothing in flight and every response is written, then run()
// returns. Beast is included only in http_server.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/api_service.h"

namespace dsv4::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0 = any free port (see port())
  int num_threads = 4;
  int64_t idle_timeout_s = 300;   // keep-alive connections without a request
  int64_t drain_timeout_s = 600;  // SIGTERM: give up waiting after this long
};

class HttpServer {
 public:
  HttpServer(ApiService& service, HttpServerOptions options);
  ~HttpServer();

  // Binds and listens. Throws dsv4::Error (e.g. "port 8000 on 127.0.0.1 is already in use").
  void listen();
  uint16_t port() const;  // the bound port
  // Serves until stop() or a drained SIGTERM/SIGINT; handles signals only while running.
  void run(std::function<void(int signal)> on_signal);
  // Thread-safe: stops serving now (in-flight responses are cut).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
