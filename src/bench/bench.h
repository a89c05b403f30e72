// `dsv4 bench` end to end: build the dataset, run one measured pass per --max-concurrency value
// (each preceded by its warm-up requests), print the result blocks and the sweep table, and write
// the JSON result file and the SVG chart next to it.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "bench/bench_config.h"
#include "bench/report.h"

namespace dsv4::bench {

struct BenchOutcome {
  std::vector<SweepPoint> points;  // in --max-concurrency order
  std::string json_path, svg_path;
};

// Runs the whole benchmark; tables go to out, the progress bar to stderr (when enabled).
// Throws dsv4::Error for configuration or file errors; request failures are counted, not thrown.
BenchOutcome run_bench(const BenchConfig& cfg, std::ostream& out);

// "dsv4_bench_<backend>_<YYYYmmdd-HHMMSS>.json" (local time of the call), in the current directory.
std::string default_output_file(Backend backend);

// The chart path for a result path: "x.json" / "x.jsonl" -> "x.svg", anything else -> "<path>.svg".
std::string svg_path_for(const std::string& json_path);

}  // namespace dsv4::bench
