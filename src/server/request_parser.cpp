// Request parsing for protocol.h. Every rejection names the field (ApiError::param) and
// says what was expected; JSON never leaves this file and response_writer.cpp.
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "base/check.h"
#include "server/protocol.h"

namespace dsv4::server {

namespace {
using nlohmann::json;

[[noreturn]] void fail(const std::string& param, const std::string& message, int status = 400,
                       std::string code = "") {
  throw ApiError{status, message, status == 404 ? "not_found_error" : "invalid_request_error", param, std::move(code)};
}

std::string num_str(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return json(v).dump();
}

const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> get_number(const json& obj, const char* key, double lo, double hi, bool lo_open = false) {
  const json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) fail(key, std::string("'") + key + "' must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
    fail(key, std::string("'") + key + "' must be " + (lo_open ? "> " : ">= ") + num_str(lo) + " and <= " +
                  num_str(hi) + ", got " + num_str(x));
  }
  return x;
}

std::optional<int64_t> get_int(const json& obj, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) fail(key, std::string("'") + key + "' must be an integer");
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                        ? std::numeric_limits<int64_t>::max()
                        : v->get<int64_t>();
  if (x < lo || x > hi) {
    fail(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                  ", got " + std::to_string(x));
  }
  return x;
}

std::optional<bool> get_bool(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) fail(key, std::string("'") + key + "' must be a boolean");
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) fail(key, std::string("'") + key + "' must be a string");
  return v->get<std::string>();
}

std::vector<int32_t> get_ids(const json& v, const char* key, const ParseLimits& limits, bool allow_empty) {
  if (!v.is_array()) fail(key, std::string("'") + key + "' must be an array of token ids");
  if (v.empty() && !allow_empty) fail(key, std::string("'") + key + "' must not be empty");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& e : v) {
    if (!e.is_number_integer()) fail(key, std::string("'") + key + "' must contain only integers");
    const int64_t id = e.get<int64_t>();
    if (id < 0 || id >= limits.vocab_size) {
      fail(key, std::string("token id ") + std::to_string(id) + " in '" + key + "' is outside [0, " +
                    std::to_string(limits.vocab_size) + ")");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

json parse_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    fail("", std::string("Invalid JSON body: ") + e.what());
  }
  if (!j.is_object()) fail("", "The request body must be a JSON object");
  return j;
}

void parse_model(const json& j, const ParseLimits& limits, ParsedRequest& r) {
  if (auto m = get_string(j, "model")) {
    r.model = *m;
    if (!m->empty() && *m != limits.served_model && *m != "default") {
      fail("model", "The model `" + *m + "` does not exist. This server serves `" + limits.served_model + "`.", 404,
           "model_not_found");
    }
  }
  if (r.model.empty() || r.model == "default") r.model = limits.served_model;
}

void parse_stop(const json& j, const ParseLimits& limits, engine::SamplingParams& p) {
  const json* v = field(j, "stop");
  if (v == nullptr) return;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) p.stop.push_back(v->get<std::string>());
    return;
  }
  if (!v->is_array()) fail("stop", "'stop' must be a string or an array of strings");
  if (static_cast<int64_t>(v->size()) > limits.max_stop) {
    fail("stop", "'stop' has " + std::to_string(v->size()) + " entries; at most " + std::to_string(limits.max_stop) +
                     " are allowed");
  }
  for (const json& s : *v) {
    if (!s.is_string()) fail("stop", "'stop' must contain only strings");
    if (!s.get<std::string>().empty()) p.stop.push_back(s.get<std::string>());
  }
}

// Sampling fields shared by chat and completions; `names` map SGLang spellings for /generate.
void parse_sampling(const json& j, const ParseLimits& limits, ParsedRequest& r, bool sglang) {
  engine::SamplingParams& p = r.params;
  const int64_t max_new = limits.max_context - 1;
  if (auto v = get_number(j, "temperature", 0, 2)) p.temperature = static_cast<float>(*v);
  if (auto v = get_number(j, "top_p", 0, 1, /*lo_open=*/true)) p.top_p = static_cast<float>(*v);
  if (auto v = get_int(j, "top_k", -1, 1 << 30)) p.top_k = static_cast<int32_t>(*v);
  if (auto v = get_number(j, "min_p", 0, 1)) p.min_p = static_cast<float>(*v);
  if (auto v = get_number(j, "frequency_penalty", -2, 2)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = get_number(j, "presence_penalty", -2, 2)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = get_number(j, "repetition_penalty", 0, 10, /*lo_open=*/true)) p.repetition_penalty = static_cast<float>(*v);
  const char* seed_key = sglang && j.contains("sampling_seed") ? "sampling_seed" : "seed";
  if (auto v = get_int(j, seed_key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    p.seed = static_cast<uint64_t>(*v);
  }
  for (const char* key : sglang ? std::vector<const char*>{"max_new_tokens"}
                                : std::vector<const char*>{"max_tokens", "max_completion_tokens"}) {
    const json* v = field(j, key);
    if (v == nullptr) continue;
    if (!v->is_number_integer()) fail(key, std::string("'") + key + "' must be an integer");
    const int64_t n = v->get<int64_t>();
    if (n <= 0) fail(key, std::string("'") + key + "' must be at least 1, got " + std::to_string(n));
    if (n > max_new) {
      fail(key, std::string("'") + key + "' is " + std::to_string(n) + ", beyond this model's context of " +
                    std::to_string(limits.max_context) + " tokens",
           400, "context_length_exceeded");
    }
    p.max_tokens = n;
    r.max_tokens_given = true;
  }
  if (auto v = get_int(j, sglang ? "min_new_tokens" : "min_tokens", 0, max_new)) p.min_tokens = *v;
  parse_stop(j, limits, p);
  if (const json* v = field(j, "stop_token_ids")) p.stop_token_ids = get_ids(*v, "stop_token_ids", limits, true);
  if (auto v = get_bool(j, "ignore_eos")) p.ignore_eos = *v;
  if (auto v = get_bool(j, "skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = get_int(j, "n", 1, 1); !v && field(j, "n") != nullptr) fail("n", "'n' must be 1");
}

void parse_stream(const json& j, ParsedRequest& r) {
  if (auto v = get_bool(j, "stream")) r.stream = *v;
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) fail("stream_options", "'stream_options' must be an object");
    if (!r.stream) fail("stream_options", "'stream_options' is only allowed when 'stream' is true");
    const json* iu = field(*so, "include_usage");
    if (iu != nullptr && !iu->is_boolean()) fail("stream_options.include_usage", "'include_usage' must be a boolean");
    r.include_usage = iu != nullptr && iu->get<bool>();
  }
}

std::string content_text(const json& m, size_t index, bool allow_null) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  const json* c = field(m, "content");
  if (c == nullptr) {
    if (allow_null) return {};
    fail(where, "'" + where + "' is required");
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) fail(where, "'" + where + "' must be a string or an array of text parts");
  std::string text;
  for (const json& part : *c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
      fail(where, "'" + where + "' parts must be {\"type\": \"text\", \"text\": string}");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

void parse_messages(const json& j, ParsedRequest& r) {
  const json* msgs = field(j, "messages");
  if (msgs == nullptr) fail("messages", "'messages' is required");
  if (!msgs->is_array()) fail("messages", "'messages' must be an array");
  if (msgs->empty()) fail("messages", "'messages' must contain at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail(at, "'" + at + "' must be an object");
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) fail(at + ".role", "'" + at + ".role' must be a string");
    ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role != "system" && msg.role != "developer" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool") {
      fail(at + ".role", "'" + at + ".role' must be one of system, developer, user, assistant, tool; got '" +
                             msg.role + "'");
    }
    const bool assistant = msg.role == "assistant";
    msg.content = content_text(m, i, assistant);
    if (const json* rc = field(m, "reasoning_content")) {
      if (!rc->is_string()) fail(at + ".reasoning_content", "'" + at + ".reasoning_content' must be a string");
      msg.reasoning_content = rc->get<std::string>();
    }
    if (const json* tc = field(m, "tool_calls")) {
      if (!assistant || !tc->is_array()) fail(at + ".tool_calls", "'tool_calls' must be an array on assistant messages");
      for (const json& c : *tc) {
        const json* fn = c.is_object() ? field(c, "function") : nullptr;
        if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
          fail(at + ".tool_calls", "each tool call needs function.name");
        }
        ToolCallSpec spec;
        spec.id = c.value("id", "");
        spec.name = (*fn)["name"].get<std::string>();
        const json* args = field(*fn, "arguments");
        spec.arguments_json = args == nullptr ? "{}" : args->is_string() ? args->get<std::string>() : args->dump();
        msg.tool_calls.push_back(std::move(spec));
      }
    }
    if (msg.role == "tool") {
      auto id = get_string(m, "tool_call_id");
      if (!id) fail(at + ".tool_call_id", "'" + at + ".tool_call_id' is required for tool messages");
      msg.tool_call_id = *id;
    }
    if (auto name = get_string(m, "name")) msg.name = *name;
    r.messages.push_back(std::move(msg));
  }
}

void parse_thinking(const json& j, ParsedRequest& r) {
  if (const json* k = field(j, "chat_template_kwargs")) {
    if (!k->is_object()) fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (const json* t = field(*k, key)) {
        if (!t->is_boolean()) fail(std::string("chat_template_kwargs.") + key, std::string("'") + key + "' must be a boolean");
        r.chat.thinking = t->get<bool>();
      }
    }
  }
  if (auto e = get_string(j, "reasoning_effort")) {
    if (*e != "minimal" && *e != "low" && *e != "medium" && *e != "high" && *e != "max") {
      fail("reasoning_effort", "'reasoning_effort' must be one of minimal, low, medium, high, max; got '" + *e + "'");
    }
    r.chat.reasoning_effort = *e;
    r.chat.thinking = true;
  }
}

template <typename Fn>
ParseResult guarded(Fn&& fn) {
  ParseResult out;
  try {
    out.request = fn();
  } catch (const ApiError& e) {
    out.error = e;
  } catch (const json::exception& e) {
    out.error = ApiError{400, std::string("Invalid request: ") + e.what(), "invalid_request_error", "", ""};
  }
  return out;
}

}  // namespace

ParseResult parse_chat_request(std::string_view body, const ParseLimits& limits) {
  return guarded([&] {
    const json j = parse_body(body);
    ParsedRequest r;
    r.endpoint = Endpoint::kChat;
    parse_model(j, limits, r);
    parse_messages(j, r);
    parse_sampling(j, limits, r, false);
    parse_stream(j, r);
    parse_thinking(j, r);
    const bool lp = get_bool(j, "logprobs").value_or(false);
    const auto top = get_int(j, "top_logprobs", 0, 20);
    if (top && !lp) fail("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r.params.logprobs = lp;
    r.params.top_logprobs = static_cast<int32_t>(top.value_or(0));
    if (const json* tools = field(j, "tools")) {
      if (!tools->is_array()) fail("tools", "'tools' must be an array");
      if (!tools->empty()) r.chat.tools_json = tools->dump();
    }
    if (const json* rf = field(j, "response_format")) {
      if (!rf->is_object() || rf->value("type", "") != "text") {
        fail("response_format", "'response_format' supports only {\"type\": \"text\"}");
      }
    }
    if (!r.max_tokens_given) r.params.max_tokens = limits.max_context;  // clipped to the context later
    return r;
  });
}

ParseResult parse_completion_request(std::string_view body, const ParseLimits& limits) {
  return guarded([&] {
    const json j = parse_body(body);
    ParsedRequest r;
    r.endpoint = Endpoint::kCompletion;
    parse_model(j, limits, r);
    const json* prompt = field(j, "prompt");
    if (prompt == nullptr) fail("prompt", "'prompt' is required");
    if (prompt->is_string()) {
      r.prompt_text = prompt->get<std::string>();
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_string()) {
      if (prompt->size() != 1 || !(*prompt)[0].is_string()) fail("prompt", "batched prompts are not supported; send one prompt per request");
      r.prompt_text = (*prompt)[0].get<std::string>();
    } else if (prompt->is_array()) {
      r.input_ids = get_ids(*prompt, "prompt", limits, false);
    } else {
      fail("prompt", "'prompt' must be a string or an array of token ids");
    }
    parse_sampling(j, limits, r, false);
    parse_stream(j, r);
    if (auto e = get_bool(j, "echo")) r.echo = *e;
    if (auto lp = get_int(j, "logprobs", 0, 20)) {
      r.params.logprobs = true;
      r.params.top_logprobs = static_cast<int32_t>(*lp);
    }
    return r;
  });
}

ParseResult parse_generate_request(std::string_view body, const ParseLimits& limits) {
  return guarded([&] {
    const json j = parse_body(body);
    ParsedRequest r;
    r.endpoint = Endpoint::kGenerate;
    r.model = limits.served_model;
    r.params.max_tokens = 128;  // SGLang's default max_new_tokens
    const json* text = field(j, "text");
    const json* ids = field(j, "input_ids");
    if ((text == nullptr) == (ids == nullptr)) fail("text", "exactly one of 'text' and 'input_ids' is required");
    if (text != nullptr) {
      if (!text->is_string()) fail("text", "'text' must be a string (batched requests are not supported)");
      r.prompt_text = text->get<std::string>();
    } else {
      r.input_ids = get_ids(*ids, "input_ids", limits, false);
    }
    if (const json* sp = field(j, "sampling_params")) {
      if (!sp->is_object()) fail("sampling_params", "'sampling_params' must be an object");
      try {
        parse_sampling(*sp, limits, r, true);
      } catch (ApiError& e) {
        e.param = "sampling_params." + e.param;
        throw;
      }
    }
    if (auto s = get_bool(j, "stream")) r.stream = *s;
    if (auto lp = get_bool(j, "return_logprob")) r.return_logprob = *lp;
    if (auto n = get_int(j, "top_logprobs_num", 0, 20)) r.params.top_logprobs = static_cast<int32_t>(*n);
    r.params.logprobs = r.return_logprob;
    if (!r.return_logprob) r.params.top_logprobs = 0;
    return r;
  });
}

std::string error_json(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace dsv4::server
