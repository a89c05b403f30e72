// Hand-written SVG chart of a concurrency sweep: two panels side by side, output throughput
// (tok/s) and median TPOT (ms) against max concurrency (evenly spaced categories, in run order).
#pragma once

#include <string>
#include <vector>

#include "bench/report.h"

namespace dsv4::bench {

// A complete standalone SVG document. Works for one point too (a single marker per panel).
std::string render_chart_svg(const std::vector<SweepPoint>& points, const std::string& title);

// The smallest "nice" number (1, 2 or 5 times a power of ten) >= v; 1 for v <= 0.
double nice_ceiling(double v);

}  // namespace dsv4::bench
