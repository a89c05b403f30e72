#include "tokenizer/python_json.h"

#include <cmath>
#include <cstdio>

namespace dsv4::tokenizer {
namespace {

void dump(const nlohmann::ordered_json& v, std::string& out) {
  switch (v.type()) {
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += python_json_string(it.key());
        out += ": ";
        dump(it.value(), out);
      }
      out += '}';
      break;
    }
    case nlohmann::json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        dump(v[i], out);
      }
      out += ']';
      break;
    }
    case nlohmann::json::value_t::string:
      out += python_json_string(v.get_ref<const std::string&>());
      break;
    case nlohmann::json::value_t::number_float: {
      const double d = v.get<double>();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        std::string s = v.dump();  // shortest round-trip form, like Python's repr
        if (s.find_first_of(".eE") == std::string::npos) s += ".0";
        out += s;
      }
      break;
    }
    default:
      out += v.dump();  // null, true, false, integers
  }
}

}  // namespace

std::string python_json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  dump(value, out);
  return out;
}

}  // namespace dsv4::tokenizer
