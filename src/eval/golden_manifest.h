// Golden manifests (shared/golden/README.md): cases to run and the gates that judge them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dsv4::eval {

struct GoldenCase {
  int index = 0;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;  // S+1 ids; rows j >= 1 are fed generated_ids[j-1]
  int decode_steps = 0;                // S
  bool x_layers_all = false;           // x_layers dumped for every call (else prefill only)
};

// One gate of manifest.json → "gates" (README "Tolerances").
struct Gate {
  std::string tier, name, kind;
  std::string tensor = "logits";          // logits | mtp_logits
  std::optional<std::vector<int>> cases;  // nullopt = all
  std::optional<std::vector<int>> rows;   // nullopt = all
  double max = 0, q = 0, min = 0, min_margin = 0, max_rel = 0;
};

struct GoldenManifest {
  std::string name;
  std::vector<GoldenCase> cases;
  std::vector<Gate> gates;
};

// Where the golden sets are: $DSV4_GOLDEN_DIR if set, else `compiled_default` when it exists,
// else tests/data/golden below the current directory (binaries carried to another machine).
std::filesystem::path golden_root(const std::filesystem::path& compiled_default);

// Parses manifest.json; errors name the file and the field.
GoldenManifest load_manifest(const std::filesystem::path& path);

}  // namespace dsv4::eval
