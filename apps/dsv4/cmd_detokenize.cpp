// `dsv4 detokenize --tokenizer PATH --input IN.jsonl --output OUT.jsonl [--skip-special-tokens]`:
// each input line {"ids": [...]} gives one output line {"text": "..."}, in order. Ids outside the
// tokenizer's range are skipped; the text is always valid UTF-8. A malformed line throws
// dsv4::Error naming its number.
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/dsv4/commands.h"
#include "apps/dsv4/jsonl_io.h"
#include "base/check.h"
#include "tokenizer/tokenizer.h"

namespace {
struct DetokenizeArgs {
  std::string tokenizer, input, output;
  bool skip_special = false;
};

void run_detokenize(const DetokenizeArgs& a) {
  const auto tok = dsv4::tokenizer::Tokenizer::from_file(a.tokenizer);
  dsv4::app::map_jsonl(a.input, a.output, [&](const nlohmann::json& j, size_t n) {
    std::vector<int32_t> ids;
    bool ok = j.is_object() && j.contains("ids") && j["ids"].is_array();
    if (ok) {
      for (const auto& v : j["ids"]) {
        if (!v.is_number_integer()) {
          ok = false;
          break;
        }
        ids.push_back(v.get<int32_t>());
      }
    }
    DSV4_CHECK(ok, a.input, " line ", n, ": expected {\"ids\": [integers]}");
    return nlohmann::json{{"text", tok.decode(ids, a.skip_special)}};
  });
}

const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
  auto args = std::make_shared<DetokenizeArgs>();
  auto* cmd = root.add_subcommand("detokenize", "Decode JSONL {\"ids\"} lines to {\"text\"} lines");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json")->required();
  cmd->add_option("--input", args->input, "input JSONL")->required();
  cmd->add_option("--output", args->output, "output JSONL")->required();
  cmd->add_flag("--skip-special-tokens", args->skip_special, "drop special added tokens");
  cmd->callback([args] { run_detokenize(*args); });
});
}  // namespace
