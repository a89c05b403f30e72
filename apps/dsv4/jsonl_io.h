// Line-by-line JSONL transformation shared by `dsv4 tokenize` and `dsv4 detokenize`.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/check.h"

namespace dsv4::app {

// Reads `input` line by line, writes transform(parsed_line, line_number) as one JSON line per
// input line to `output`. A line that is not JSON reaches transform as a discarded value;
// transform throws dsv4::Error (naming the line) for lines it cannot use.
template <class Transform>
void map_jsonl(const std::string& input, const std::string& output, Transform&& transform) {
  std::ifstream in(input, std::ios::binary);
  DSV4_CHECK(in.good(), "cannot open ", input);
  std::ofstream out(output, std::ios::binary);
  DSV4_CHECK(out.good(), "cannot write ", output);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    out << transform(j, n).dump() << '\n';
  }
  DSV4_CHECK(out.good(), "write to ", output, " failed");
}

}  // namespace dsv4::app
