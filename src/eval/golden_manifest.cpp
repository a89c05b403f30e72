#include "eval/golden_manifest.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace dsv4::eval {
namespace {

std::vector<int> int_list(const nlohmann::json& j) {
  std::vector<int> out;
  for (const auto& v : j) out.push_back(v.get<int>());
  return out;
}

}  // namespace

std::filesystem::path golden_root(const std::filesystem::path& compiled_default) {
  if (const char* env = std::getenv("DSV4_GOLDEN_DIR"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::exists(compiled_default)) return compiled_default;
  return std::filesystem::path("tests") / "data" / "golden";
}

GoldenManifest load_manifest(const std::filesystem::path& path) {
  std::ifstream in(path);
  DSV4_CHECK(in.good(), "cannot open golden manifest ", path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    DSV4_FAIL(path.string(), ": invalid JSON: ", e.what());
  }
  GoldenManifest m;
  try {
    m.name = j.value("name", path.parent_path().filename().string());
    for (const auto& c : j.at("cases")) {
      GoldenCase gc;
      gc.index = c.at("index").get<int>();
      for (const auto& v : c.at("prompt_ids")) gc.prompt_ids.push_back(v.get<int32_t>());
      for (const auto& v : c.at("generated_ids")) gc.generated_ids.push_back(v.get<int32_t>());
      gc.decode_steps = c.at("decode_steps").get<int>();
      gc.x_layers_all = c.value("x_layers_steps", std::string()) == "all";
      DSV4_CHECK(static_cast<int>(gc.generated_ids.size()) == gc.decode_steps + 1, path.string(),
                 ": case ", gc.index, ": generated_ids has ", gc.generated_ids.size(),
                 " entries, expected decode_steps+1 = ", gc.decode_steps + 1);
      m.cases.push_back(std::move(gc));
    }
    if (j.contains("gates")) {
      for (const auto& g : j.at("gates")) {
        Gate gate;
        gate.tier = g.at("tier").get<std::string>();
        gate.name = g.at("name").get<std::string>();
        gate.kind = g.at("kind").get<std::string>();
        gate.tensor = g.value("tensor", std::string("logits"));
        if (g.contains("cases") && g["cases"].is_array()) gate.cases = int_list(g["cases"]);
        if (g.contains("rows") && g["rows"].is_array()) gate.rows = int_list(g["rows"]);
        gate.max = g.value("max", 0.0);
        gate.q = g.value("q", 0.0);
        gate.min = g.value("min", 0.0);
        gate.min_margin = g.value("min_margin", 0.0);
        gate.max_rel = g.value("max_rel", 0.0);
        m.gates.push_back(std::move(gate));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    DSV4_FAIL(path.string(), ": malformed manifest: ", e.what());
  }
  return m;
}

}  // namespace dsv4::eval
