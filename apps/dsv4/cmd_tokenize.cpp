// `dsv4 tokenize --tokenizer PATH --input IN.jsonl --output OUT.jsonl`: each input line
// {"text": "..."} gives one output line {"ids": [...]}, in order. No BOS/EOS is added; special-token
// strings in the text map to their ids. A malformed line throws dsv4::Error naming its number.
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/dsv4/commands.h"
#include "apps/dsv4/jsonl_io.h"
#include "base/check.h"
#include "tokenizer/tokenizer.h"

namespace {
struct TokenizeArgs {
  std::string tokenizer, input, output;
};

void run_tokenize(const TokenizeArgs& a) {
  const auto tok = dsv4::tokenizer::Tokenizer::from_file(a.tokenizer);
  dsv4::app::map_jsonl(a.input, a.output, [&](const nlohmann::json& j, size_t n) {
    DSV4_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), a.input, " line ", n,
               ": expected {\"text\": \"...\"}");
    return nlohmann::json{{"ids", tok.encode(j["text"].get<std::string>())}};
  });
}

const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = root.add_subcommand("tokenize", "Encode JSONL {\"text\"} lines to {\"ids\"} lines");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json")->required();
  cmd->add_option("--input", args->input, "input JSONL")->required();
  cmd->add_option("--output", args->output, "output JSONL")->required();
  cmd->callback([args] { run_tokenize(*args); });
});
}  // namespace
