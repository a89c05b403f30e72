#include "server/response_writer.h"

#include <nlohmann/json.hpp>

#include <chrono>

namespace dsv4::server {

namespace {
using nlohmann::json;
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
// Token text as valid JSON text (a partial UTF-8 character becomes U+FFFD through dump()).
}  // namespace

ResponseWriter::ResponseWriter(const ParsedRequest& request, const TextCodec& codec, std::string id,
                               int64_t created, std::string prompt_text)
    : endpoint_(request.endpoint),
      stream_(request.stream),
      include_usage_(request.include_usage),
      thinking_(request.endpoint == Endpoint::kChat && request.chat.thinking),
      want_logprobs_(request.params.logprobs || request.params.top_logprobs > 0),
      has_tools_(!request.chat.tools_json.empty()),
      codec_(codec),
      id_(std::move(id)),
      created_(created),
      model_(request.model),
      splitter_(request.endpoint == Endpoint::kChat && request.chat.thinking),
      start_time_(now_seconds()) {
  if (endpoint_ == Endpoint::kCompletion && request.echo) text_ = std::move(prompt_text);
  echo_len_ = text_.size();
}

std::string ResponseWriter::start() {
  if (!stream_) return {};
  if (endpoint_ == Endpoint::kChat) return sse(chunk_json(R"({"role":"assistant","content":""})", "null", nullptr));
  if (endpoint_ == Endpoint::kCompletion && !text_.empty()) {
    return sse(chunk_json(dump(json(text_)), "null", nullptr));
  }
  return {};
}

std::string ResponseWriter::chunk_json(const std::string& delta, const std::string& logprobs,
                                       const char* finish) const {
  const std::string fin = finish == nullptr ? "null" : dump(json(finish));
  std::string s = R"({"id":)" + dump(json(id_)) + R"(,"object":)" +
                  (endpoint_ == Endpoint::kChat ? R"("chat.completion.chunk")" : R"("text_completion")") +
                  R"(,"created":)" + std::to_string(created_) + R"(,"model":)" + dump(json(model_)) +
                  R"(,"choices":[{"index":0,)" + (endpoint_ == Endpoint::kChat ? R"("delta":)" : R"("text":)") + delta +
                  R"(,"logprobs":)" + logprobs + R"(,"finish_reason":)" + fin + "}]";
  if (include_usage_) s += R"(,"usage":null)";
  return s + "}";
}

std::string ResponseWriter::logprobs_json(const std::vector<engine::TokenLogprob>& lps, size_t base_offset) const {
  if (!want_logprobs_ || lps.empty()) return "null";
  if (endpoint_ == Endpoint::kChat) {
    json content = json::array();
    for (const auto& lp : lps) {
      const std::string tok = codec_.token_text(lp.id);
      json top = json::array();
      for (const auto& [id, v] : lp.top) {
        const std::string t = codec_.token_text(id);
        top.push_back({{"token", t}, {"logprob", v}, {"bytes", bytes_of(t)}});
      }
      content.push_back({{"token", tok}, {"logprob", lp.logprob}, {"bytes", bytes_of(tok)}, {"top_logprobs", top}});
    }
    return dump(json{{"content", content}});
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = base_offset;
  for (const auto& lp : lps) {
    const std::string tok = codec_.token_text(lp.id);
    tokens.push_back(tok);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, v] : lp.top) top[codec_.token_text(id)] = v;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += tok.size();
  }
  return dump(json{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}});
}

std::string ResponseWriter::usage_json() const {
  return dump(json{{"prompt_tokens", prompt_tokens_},
                   {"completion_tokens", completion_tokens_},
                   {"total_tokens", prompt_tokens_ + completion_tokens_}});
}

std::string ResponseWriter::generate_json(bool cumulative_ids) const {
  (void)cumulative_ids;
  json meta = {{"id", id_},
               {"prompt_tokens", prompt_tokens_},
               {"completion_tokens", completion_tokens_},
               {"e2e_latency", now_seconds() - start_time_}};
  if (finish_reason_.empty()) {
    meta["finish_reason"] = nullptr;
  } else {
    json fr = {{"type", finish_reason_}};
    if (!matched_stop_.empty()) fr["matched"] = matched_stop_;
    if (!error_.empty()) fr["message"] = error_;
    meta["finish_reason"] = fr;
  }
  if (want_logprobs_) {
    json out = json::array();
    for (const auto& lp : logprobs_) out.push_back(json::array({lp.logprob, lp.id, nullptr}));
    meta["output_token_logprobs"] = out;
  }
  return dump(json{{"text", text_}, {"output_ids", output_ids_}, {"meta_info", meta}});
}

std::string ResponseWriter::on_event(const engine::OutputEvent& ev) {
  prompt_tokens_ = ev.prompt_tokens;
  completion_tokens_ = ev.completion_tokens;
  output_ids_.insert(output_ids_.end(), ev.token_ids.begin(), ev.token_ids.end());
  const bool failed = ev.finished && (ev.finish_reason == engine::FinishReason::kAbort ||
                                      ev.finish_reason == engine::FinishReason::kError);
  ReasoningSplitter::Piece piece = splitter_.push(ev.text);
  if (ev.finished) {
    ReasoningSplitter::Piece rest = splitter_.flush();
    piece.reasoning += rest.reasoning;
    piece.content += rest.content;
    finish_reason_ = engine::to_string(ev.finish_reason);
    matched_stop_ = ev.matched_stop;
    error_ = ev.error;
  }
  const std::string lp = logprobs_json(ev.logprobs, text_.size());  // before text_ grows (text_offset)
  if (want_logprobs_) logprobs_.insert(logprobs_.end(), ev.logprobs.begin(), ev.logprobs.end());
  text_ += piece.content;
  reasoning_ += piece.reasoning;

  if (!stream_) {
    if (!ev.finished) return {};
    if (failed) {
      status_ = ev.finish_reason == engine::FinishReason::kAbort ? 503 : 500;
      return error_json(ApiError{status_, "The request did not complete: " + ev.error,
                                 status_ == 503 ? "service_unavailable_error" : "internal_server_error", "", ""});
    }
    return final_body();
  }

  std::string out;
  if (endpoint_ == Endpoint::kGenerate) {
    if (!ev.token_ids.empty() || ev.finished) out += sse(generate_json(true));
  } else if (failed) {
    out += sse(error_json(ApiError{500, "The request did not complete: " + ev.error, "internal_server_error", "", ""}));
  } else {
    const bool has_text = !piece.content.empty() || !piece.reasoning.empty();
    const char* fin = ev.finished ? finish_reason_.c_str() : nullptr;
    if (endpoint_ == Endpoint::kChat) {
      json delta = json::object();
      if (!piece.reasoning.empty()) delta["reasoning_content"] = piece.reasoning;
      if (!piece.content.empty() || (!has_text && lp != "null")) delta["content"] = piece.content;
      if (has_text || lp != "null" || ev.finished) out += sse(chunk_json(dump(delta), lp, fin));
    } else if (has_text || lp != "null" || ev.finished) {
      out += sse(chunk_json(dump(json(piece.content)), lp, fin));
    }
    if (ev.finished && include_usage_) {
      out += sse(R"({"id":)" + dump(json(id_)) + R"(,"object":)" +
                 (endpoint_ == Endpoint::kChat ? R"("chat.completion.chunk")" : R"("text_completion")") +
                 R"(,"created":)" + std::to_string(created_) + R"(,"model":)" + dump(json(model_)) +
                 R"(,"choices":[],"usage":)" + usage_json() + "}");
    }
  }
  if (ev.finished) out += "data: [DONE]\n\n";
  return out;
}

std::string ResponseWriter::final_body() {
  if (endpoint_ == Endpoint::kGenerate) return generate_json(true);
  const json usage = json::parse(usage_json());
  json lp = json::parse(logprobs_json(logprobs_, echo_len_));
  if (endpoint_ == Endpoint::kCompletion) {
    return dump(json{{"id", id_},
                     {"object", "text_completion"},
                     {"created", created_},
                     {"model", model_},
                     {"choices", json::array({{{"index", 0}, {"text", text_}, {"logprobs", lp}, {"finish_reason", finish_reason_}}})},
                     {"usage", usage}});
  }
  json message = {{"role", "assistant"}};
  std::string content = text_;
  std::string reasoning = reasoning_;
  json tool_calls = json::array();
  if (has_tools_) {
    try {
      ParsedReply r = codec_.parse_reply(thinking_ ? reasoning + "</think>" + content : content, thinking_);
      content = r.content;
      reasoning = r.reasoning_content;
      for (size_t i = 0; i < r.tool_calls.size(); ++i) {
        tool_calls.push_back({{"id", "call_" + id_ + "_" + std::to_string(i)},
                              {"type", "function"},
                              {"function", {{"name", r.tool_calls[i].name}, {"arguments", r.tool_calls[i].arguments_json}}}});
      }
    } catch (const std::exception&) {
      // Keep the plain split when the reply does not parse (e.g. cut by max_tokens).
    }
  }
  message["content"] = content;
  if (thinking_) message["reasoning_content"] = reasoning;
  if (!tool_calls.empty()) message["tool_calls"] = tool_calls;
  const std::string finish = !tool_calls.empty() && finish_reason_ == "stop" ? "tool_calls" : finish_reason_;
  return dump(json{{"id", id_},
                   {"object", "chat.completion"},
                   {"created", created_},
                   {"model", model_},
                   {"choices", json::array({{{"index", 0}, {"message", message}, {"logprobs", lp}, {"finish_reason", finish}}})},
                   {"usage", usage}});
}

}  // namespace dsv4::server
