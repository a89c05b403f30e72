// The acceptance test of the CPU reference backend: every case of every golden set in
// shared/golden must pass every gate of its manifest (shared/golden/README.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "cpu/model.h"
#include "eval/cpu_golden_backend.h"
#include "eval/gates.h"
#include "eval/logits_runner.h"

namespace dsv4::eval {
namespace fs = std::filesystem;

class GoldenSet : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenSet, CpuBackendPassesEveryGate) {
  const fs::path dir = golden_root(DSV4_GOLDEN_DIR) / GetParam();
  ASSERT_TRUE(fs::exists(dir / "manifest.json")) << "golden set missing: " << dir;
  const auto manifest = load_manifest(dir / "manifest.json");
  std::shared_ptr<const cpu::CpuModel> model = cpu::CpuModel::load(dir);
  CpuGoldenBackend backend(model);
  const auto tensors = run_golden_cases(backend, manifest, /*with_mtp=*/true, /*with_streams=*/true);
  const fs::path out = fs::temp_directory_path() / ("dsv4_golden_" + GetParam() + ".safetensors");
  write_output_tensors(tensors, out.string());
  const auto report = evaluate_gates(manifest, dir / "golden.safetensors", out);
  std::printf("%s", report.to_string().c_str());
  for (const auto& g : report.gates) EXPECT_TRUE(g.passed) << g.gate.name << ": " << g.detail;
  fs::remove(out);
}

INSTANTIATE_TEST_SUITE_P(AllSets, GoldenSet,
                         ::testing::Values("tiny-calm", "tiny-c4", "tiny-c4-w16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Gates, QuantileAndRelDefinitions) {
  EXPECT_EQ(quantile({3, 1, 2, 4}, 0.5), 2);   // sorted[ceil(2)-1]
  EXPECT_EQ(quantile({3, 1, 2, 4}, 0.9), 4);   // sorted[ceil(3.6)-1]
  const float g[4] = {0, 1, 2, 3};             // std (n-1) = 1.29099
  const float e[4] = {0, 1, 2, 4};
  EXPECT_NEAR(row_rel_error(e, g, 4), 1.0 / 1.2909944, 1e-6);
  const float bad[4] = {0, NAN, 2, 3};
  EXPECT_TRUE(std::isinf(row_rel_error(bad, g, 4)));
  const float v[4] = {1, 5, 5, 2};
  EXPECT_EQ(first_argmax(v, 4), 1);
}

}  // namespace dsv4::eval
