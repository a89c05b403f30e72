// Evaluates a golden set's gates (shared/golden/README.md "Tolerances") on engine output.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "eval/golden_manifest.h"

namespace dsv4::eval {

struct GateResult {
  Gate gate;
  bool passed = false;
  bool skipped = false;  // e.g. stream gate without x_layers in the output
  double value = 0;      // the measured statistic (worst rel, quantile, agreement, ...)
  std::string detail;    // human-readable: where it failed or what was measured
};

struct TensorSummary {
  std::string tensor;  // logits | mtp_logits
  int rows = 0;
  double rel_max = 0, rel_p50 = 0, rel_p90 = 0;
  double argmax_agreement = 0;
};

struct GoldenReport {
  std::string set_name;
  std::vector<GateResult> gates;
  std::vector<TensorSummary> summaries;
  bool passed() const;
  std::string to_string() const;  // a table for humans
};

// Compares `output` (a `dsv4 logits` file) with the set's golden.safetensors.
GoldenReport evaluate_gates(const GoldenManifest& manifest,
                            const std::filesystem::path& golden_path,
                            const std::filesystem::path& output_path);

// rel(row) = max_v |e − g| / std(g) (n−1 denominator); +inf when e has a non-finite value.
double row_rel_error(const float* engine, const float* golden, int64_t n);
// First index of the maximum.
int64_t first_argmax(const float* v, int64_t n);
// sorted(values)[ceil(q·n) − 1].
double quantile(std::vector<double> values, double q);

}  // namespace dsv4::eval
