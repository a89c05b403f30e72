#include "server/api_service.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "base/check.h"

namespace dsv4::server {

// ---------------------------------------------------------------- ResponseStream

ResponseStream::ResponseStream(engine::Engine& engine, std::unique_ptr<ResponseWriter> writer, bool streaming)
    : engine_(engine), streaming_(streaming), writer_(std::move(writer)) {
  pending_ = writer_->start();
}

engine::OutputSink ResponseStream::sink() {
  // The sink keeps the stream alive until the engine drops it (when the request ends).
  return [self = shared_from_this()](engine::OutputEvent&& ev) {
    std::function<void()> notify;
    {
      std::lock_guard lock(self->mu_);
      self->events_.push_back(std::move(ev));
      notify = self->notify_;
    }
    if (notify) notify();
  };
}

void ResponseStream::set_notify(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  notify_ = std::move(fn);
}

bool ResponseStream::take(std::string& out) {
  std::lock_guard lock(mu_);
  out += pending_;
  pending_.clear();
  while (!events_.empty() && !done_) {
    engine::OutputEvent ev = std::move(events_.front());
    events_.pop_front();
    out += writer_->on_event(ev);
    if (ev.finished) done_ = true;
  }
  return done_;
}

int ResponseStream::status() const {
  std::lock_guard lock(mu_);
  return writer_->status();
}

void ResponseStream::set_id(engine::SequenceId id) {
  bool abort = false;
  {
    std::lock_guard lock(mu_);
    id_ = id;
    abort = cancelled_;
  }
  if (abort) engine_.abort(id);
}

void ResponseStream::cancel() {
  engine::SequenceId id = -1;
  {
    std::lock_guard lock(mu_);
    if (cancelled_ || done_) return;
    cancelled_ = true;
    id = id_;
    notify_ = nullptr;
  }
  if (id >= 0) engine_.abort(id);
}

// ---------------------------------------------------------------- ApiService

ApiService::ApiService(ServiceOptions options) : options_(std::move(options)) {}

void ApiService::attach(engine::Engine& engine, const TextCodec& codec) {
  DSV4_CHECK(engine_ == nullptr, "ApiService::attach called twice");
  engine_ = &engine;
  codec_ = &codec;
  limits_.served_model = options_.served_model;
  limits_.max_context = engine.max_context();
  limits_.vocab_size = std::min<int64_t>(codec.vocab_size(), engine.vocab_size());
  if (draining_.load()) engine.begin_drain();
  ready_.store(true);
}

void ApiService::begin_drain() {
  draining_.store(true);
  if (ready_.load()) engine_->begin_drain();
}

HttpReply ApiService::error(const ApiError& e) { return HttpReply{e.status, "application/json", error_json(e), nullptr}; }

void ApiService::count_response(int status) {
  const int k = status / 100;
  if (k >= 0 && k < 6) responses_[k]++;
}

HttpReply ApiService::handle(const HttpRequest& request) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  const bool get = request.method == "GET" || request.method == "HEAD";
  if (path == "/health" || path == "/health_generate") {
    if (!get) return error({405, "Use GET " + path, "invalid_request_error", "", ""});
    if (ready()) return HttpReply{200, "application/json", "{}", nullptr};
    const bool draining = draining_.load();
    return error({503, draining ? "The server is shutting down" : "The server is not ready yet",
                  "service_unavailable_error", "", ""});
  }
  if (path == "/metrics") {
    if (!get) return error({405, "Use GET /metrics", "invalid_request_error", "", ""});
    return metrics();
  }
  const bool is_models = path == "/v1/models";
  Endpoint endpoint;
  if (path == "/v1/chat/completions") endpoint = Endpoint::kChat;
  else if (path == "/v1/completions") endpoint = Endpoint::kCompletion;
  else if (path == "/generate") endpoint = Endpoint::kGenerate;
  else if (!is_models) return error({404, "Unknown path " + path, "not_found_error", "", ""});

  if (!options_.api_key.empty() && request.authorization != "Bearer " + options_.api_key) {
    return error({401, "Invalid or missing API key (send 'Authorization: Bearer <key>')", "authentication_error",
                  "", "invalid_api_key"});
  }
  if (is_models) {
    if (!get) return error({405, "Use GET /v1/models", "invalid_request_error", "", ""});
    if (!ready_.load()) return error({503, "The server is not ready yet", "service_unavailable_error", "", ""});
    return models();
  }
  if (request.method != "POST") return error({405, "Use POST " + path, "invalid_request_error", "", ""});
  if (draining_.load()) {
    return error({503, "The server is shutting down and does not accept new requests", "service_unavailable_error",
                  "", ""});
  }
  if (!ready_.load()) return error({503, "The server is not ready yet", "service_unavailable_error", "", ""});
  if (static_cast<int64_t>(request.body.size()) > options_.max_body_bytes) {
    return error({413, "The request body exceeds " + std::to_string(options_.max_body_bytes) + " bytes",
                  "invalid_request_error", "", "request_too_large"});
  }
  return generate(endpoint, request.body);
}

HttpReply ApiService::generate(Endpoint endpoint, const std::string& body) {
  ParseResult pr = endpoint == Endpoint::kChat         ? parse_chat_request(body, limits_)
                   : endpoint == Endpoint::kCompletion ? parse_completion_request(body, limits_)
                                                       : parse_generate_request(body, limits_);
  if (!pr.ok()) return error(pr.error);
  ParsedRequest& req = *pr.request;

  std::vector<int32_t> ids;
  const char* prompt_field = endpoint == Endpoint::kChat         ? "messages"
                             : endpoint == Endpoint::kCompletion ? "prompt"
                             : req.prompt_text                   ? "text"
                                                                 : "input_ids";
  try {
    if (endpoint == Endpoint::kChat) ids = codec_->encode_chat(req.messages, req.chat);
    else if (req.prompt_text) ids = codec_->encode(*req.prompt_text);
    else ids = std::move(req.input_ids);
  } catch (const std::exception& e) {
    return error({400, std::string("Cannot encode the prompt: ") + e.what(), "invalid_request_error", prompt_field, ""});
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t ctx = engine_->max_context();
  if (n == 0) return error({400, "The prompt is empty", "invalid_request_error", prompt_field, ""});
  if (n >= ctx) {
    return error({400,
                  "The prompt has " + std::to_string(n) + " tokens; this model's maximum context length is " +
                      std::to_string(ctx) + " tokens, including at least one generated token",
                  "invalid_request_error", prompt_field, "context_length_exceeded"});
  }
  if (req.max_tokens_given && n + req.params.max_tokens > ctx) {
    return error({400,
                  "The prompt (" + std::to_string(n) + " tokens) plus max_tokens (" +
                      std::to_string(req.params.max_tokens) + ") exceeds this model's context of " +
                      std::to_string(ctx) + " tokens",
                  "invalid_request_error", endpoint == Endpoint::kGenerate ? "sampling_params.max_new_tokens" : "max_tokens",
                  "context_length_exceeded"});
  }
  req.params.max_tokens = std::min(req.params.max_tokens, ctx - n);

  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(next_request_.fetch_add(1) * 0x9e3779b97f4a7c15ULL));
  const std::string id = std::string(endpoint == Endpoint::kChat         ? "chatcmpl-"
                                     : endpoint == Endpoint::kCompletion ? "cmpl-"
                                                                         : "") + hex;
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  auto writer = std::make_unique<ResponseWriter>(req, *codec_, id, created, req.echo && req.prompt_text ? *req.prompt_text : "");
  auto stream = std::make_shared<ResponseStream>(*engine_, std::move(writer), req.stream);

  engine::GenerateInput in;
  in.prompt = std::move(ids);
  in.params = req.params;
  in.sink = stream->sink();
  const engine::SubmitResult r = engine_->submit(std::move(in));
  switch (r.status) {
    case engine::SubmitStatus::kOk: break;
    case engine::SubmitStatus::kQueueFull:
      return error({503, r.message, "service_unavailable_error", "", "queue_full"});
    case engine::SubmitStatus::kShuttingDown:
      return error({503, r.message, "service_unavailable_error", "", ""});
    case engine::SubmitStatus::kInvalid:
      return error({400, r.message, "invalid_request_error", prompt_field, ""});
  }
  stream->set_id(r.id);
  return HttpReply{200, req.stream ? "text/event-stream" : "application/json", "", stream};
}

HttpReply ApiService::models() const {
  const std::string m = options_.served_model;
  return HttpReply{200, "application/json",
                   R"({"object":"list","data":[{"id":")" + m + R"(","object":"model","created":0,"owned_by":"dsv4","root":")" +
                       m + R"(","max_model_len":)" + std::to_string(engine_->max_context()) + "}]}",
                   nullptr};
}

HttpReply ApiService::metrics() const {
  std::string out = ready_.load() ? engine_->metrics().render_prometheus() : std::string();
  out += "# HELP dsv4:http_responses_total HTTP responses by status class.\n# TYPE dsv4:http_responses_total counter\n";
  for (int k = 1; k < 6; ++k) {
    out += "dsv4:http_responses_total{code=\"" + std::to_string(k) + "xx\"} " + std::to_string(responses_[k].load()) + "\n";
  }
  out += "# HELP dsv4:num_inflight_reqs Requests submitted and not yet finished.\n# TYPE dsv4:num_inflight_reqs gauge\n";
  out += "dsv4:num_inflight_reqs " + std::to_string(num_inflight()) + "\n";
  out += "# HELP dsv4:ready 1 when the model is loaded and the server accepts requests.\n# TYPE dsv4:ready gauge\n";
  out += std::string("dsv4:ready ") + (ready() ? "1" : "0") + "\n";
  return HttpReply{200, "text/plain; version=0.0.4", std::move(out), nullptr};
}

}  // namespace dsv4::server
