#include "bench/protocol.h"

#include <nlohmann/json.hpp>

#include "base/check.h"

namespace dsv4::bench {

using nlohmann::json;

BaseUrl parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  DSV4_CHECK(url.rfind(scheme, 0) == 0, "base URL must start with http:// (got '", url, "')");
  std::string rest = url.substr(scheme.size());
  BaseUrl out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.prefix = rest.substr(slash);
    rest.resize(slash);
  }
  while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']', colon) == std::string::npos) {
    out.host = rest.substr(0, colon);
    out.port = rest.substr(colon + 1);
  } else {
    out.host = rest;
    out.port = "80";
  }
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  DSV4_CHECK(!out.host.empty() && !out.port.empty(), "bad base URL '", url, "'");
  return out;
}

std::string endpoint_path(Backend backend) {
  switch (backend) {
    case Backend::kOpenAiChat: return "/v1/chat/completions";
    case Backend::kOpenAiCompletions: return "/v1/completions";
    case Backend::kGenerate: return "/generate";
  }
  return "/";
}

std::string build_request_body(Backend backend, const BenchPrompt& prompt,
                               const ClientConfig& cfg) {
  json body;
  if (backend == Backend::kGenerate) {
    if (!prompt.ids.empty()) {
      body["input_ids"] = prompt.ids;
    } else {
      body["text"] = prompt.text;
    }
    json sp = {{"temperature", 0.0}, {"max_new_tokens", prompt.output_len}};
    if (cfg.ignore_eos) {
      sp["ignore_eos"] = true;
      sp["min_new_tokens"] = prompt.output_len;
    }
    body["sampling_params"] = sp;
    body["stream"] = true;
    return body.dump();
  }
  body["model"] = cfg.model;
  if (backend == Backend::kOpenAiChat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt.text}}});
  } else if (!prompt.ids.empty()) {
    body["prompt"] = prompt.ids;
  } else {
    body["prompt"] = prompt.text;
  }
  body["max_tokens"] = prompt.output_len;
  body["temperature"] = 0.0;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (cfg.ignore_eos) {
    body["ignore_eos"] = true;
    body["min_tokens"] = prompt.output_len;
  }
  return body.dump();
}

int StreamDecoder::feed(std::string_view bytes) {
  int content = 0;
  pending_.append(bytes);
  size_t pos = 0;
  for (;;) {
    const size_t nl = pending_.find('\n', pos);
    if (nl == std::string::npos) break;
    std::string_view line(pending_.data() + pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {  // end of event
      if (!event_data_.empty()) {
        if (handle_event(event_data_)) ++content;
        event_data_.clear();
      }
      continue;
    }
    if (line.substr(0, 5) == "data:") {
      line.remove_prefix(5);
      if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      if (!event_data_.empty()) event_data_ += '\n';
      event_data_.append(line);
    }
    // Other fields (event:, id:, comments) are ignored.
  }
  pending_.erase(0, pos);
  content_events_ += content;
  return content;
}

namespace {
std::optional<int> int_field(const json& obj, const char* key) {
  if (obj.is_object() && obj.contains(key) && obj[key].is_number_integer()) {
    return obj[key].get<int>();
  }
  return std::nullopt;
}

bool non_empty_string(const json& obj, const char* key) {
  return obj.is_object() && obj.contains(key) && obj[key].is_string() &&
         !obj[key].get_ref<const std::string&>().empty();
}
}  // namespace

bool StreamDecoder::handle_event(const std::string& data) {
  if (data == "[DONE]") {
    done_ = true;
    return false;
  }
  const json ev = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (ev.is_discarded() || !ev.is_object()) return false;
  if (ev.contains("error") && !ev["error"].is_null()) {
    const json& e = ev["error"];
    error_ = e.is_object() && e.contains("message") ? e["message"].dump() : e.dump();
    return false;
  }
  if (backend_ == Backend::kGenerate) {
    bool content = false;
    if (ev.contains("meta_info")) {
      const json& meta = ev["meta_info"];
      if (auto p = int_field(meta, "prompt_tokens")) prompt_tokens_ = *p;
      if (auto c = int_field(meta, "completion_tokens")) {
        content = *c > completion_tokens_.value_or(0);
        completion_tokens_ = *c;
        return content;
      }
    }
    if (ev.contains("text") && ev["text"].is_string()) {
      const size_t len = ev["text"].get_ref<const std::string&>().size();
      content = len > generate_text_len_;
      generate_text_len_ = std::max(len, generate_text_len_);
    }
    return content;
  }
  if (ev.contains("usage") && ev["usage"].is_object()) {
    if (auto p = int_field(ev["usage"], "prompt_tokens")) prompt_tokens_ = *p;
    if (auto c = int_field(ev["usage"], "completion_tokens")) completion_tokens_ = *c;
  }
  if (!ev.contains("choices") || !ev["choices"].is_array() || ev["choices"].empty()) return false;
  const json& choice = ev["choices"][0];
  if (backend_ == Backend::kOpenAiChat) {
    if (!choice.contains("delta")) return false;
    const json& delta = choice["delta"];
    return non_empty_string(delta, "content") || non_empty_string(delta, "reasoning_content");
  }
  return non_empty_string(choice, "text");
}

}  // namespace dsv4::bench
