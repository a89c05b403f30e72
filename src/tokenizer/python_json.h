// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it: ", " and ": "
// separators, keys in document order, non-ASCII kept, control characters escaped. The DeepSeek-V4
// encoder (encoding_dsv4.py) embeds tool schemas and non-string arguments this way, so the prompt
// bytes depend on it. Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsv4::tokenizer {

std::string python_json_dumps(const nlohmann::ordered_json& value);
// A JSON string literal for s (quotes included).
std::string python_json_string(std::string_view s);

}  // namespace dsv4::tokenizer
