// ApiService: the HTTP-independent part of the server. It routes a request, checks the API
// key, parses the body (protocol.h), encodes prompts (TextCodec), submits to the Engine and
// returns either a complete reply or a ResponseStream that the transport drains.
//
// Thread-safety: handle() may be called from many HTTP threads at once. A ResponseStream is
// fed by the engine thread and drained by one HTTP coroutine.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "server/protocol.h"
#include "server/response_writer.h"
#include "server/text_codec.h"

namespace dsv4::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path, query string allowed
  std::string body;
  std::string authorization;  // the Authorization header
};

// Output of one in-flight generation request.
class ResponseStream : public std::enable_shared_from_this<ResponseStream> {
 public:
  ResponseStream(engine::Engine& engine, std::unique_ptr<ResponseWriter> writer, bool streaming);

  bool streaming() const { return streaming_; }
  // Appends everything ready to `out`; true once the response is complete.
  bool take(std::string& out);
  // HTTP status of a non-streaming response; valid once take() returned true.
  int status() const;
  // Called from the engine thread whenever take() has something new. Set before submit.
  void set_notify(std::function<void()> fn);
  // The client went away: abort the request (its cache is freed within one engine step).
  void cancel();

  // For ApiService: the sink to give the engine, and the id it assigned.
  engine::OutputSink sink();
  void set_id(engine::SequenceId id);

 private:
  engine::Engine& engine_;
  const bool streaming_;
  mutable std::mutex mu_;
  std::unique_ptr<ResponseWriter> writer_;
  std::deque<engine::OutputEvent> events_;
  std::function<void()> notify_;
  std::string pending_;  // writer.start() output
  bool done_ = false;
  bool cancelled_ = false;
  engine::SequenceId id_ = -1;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::shared_ptr<ResponseStream> stream;  // set: body comes from the stream
};

struct ServiceOptions {
  std::string served_model = "deepseek-v4";
  std::string api_key;  // empty = no auth
  int64_t max_body_bytes = 32 << 20;
};

class ApiService {
 public:
  explicit ApiService(ServiceOptions options);

  // Connects the model once it is loaded, then marks the service ready (/health 200).
  // Until then every endpoint but /health and /metrics answers 503. Call once.
  void attach(engine::Engine& engine, const TextCodec& codec);

  HttpReply handle(const HttpRequest& request);

  bool ready() const { return ready_.load() && !draining_.load(); }
  // Stop accepting generation requests (503); in-flight ones finish.
  void begin_drain();
  bool draining() const { return draining_.load(); }
  int64_t num_inflight() const { return ready_.load() ? engine_->num_inflight() : 0; }
  const ServiceOptions& options() const { return options_; }
  void count_response(int status);  // HTTP responses by status class, for /metrics

 private:
  HttpReply generate(Endpoint endpoint, const std::string& body);
  HttpReply models() const;
  HttpReply metrics() const;
  static HttpReply error(const ApiError& e);

  engine::Engine* engine_ = nullptr;  // set by attach(), read only after ready_ (acquire)
  const TextCodec* codec_ = nullptr;
  ServiceOptions options_;
  ParseLimits limits_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_request_{1};
  std::atomic<uint64_t> responses_[6] = {};  // [status / 100]
};

}  // namespace dsv4::server
