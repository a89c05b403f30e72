#include "eval/gates.h"

#include <algorithm>
#include <cmath>
#include <bit>
#include <limits>
#include <map>
#include <sstream>

#include "base/check.h"
#include "checkpoint/checkpoint.h"

namespace dsv4::eval {
namespace {

using checkpoint::Checkpoint;

bool selected(const std::optional<std::vector<int>>& list, int v) {
  return !list || std::find(list->begin(), list->end(), v) != list->end();
}

struct RowStat {
  int case_index, row;
  double rel;
  bool argmax_equal;
  double golden_margin;
};

std::vector<float> floats_of(const Checkpoint& c, const std::string& name) {
  return c.at(name).copy_as<float>();
}

std::vector<RowStat> row_stats(const GoldenManifest& m, const Checkpoint& golden,
                               const Checkpoint& out, const std::string& tensor) {
  std::vector<RowStat> stats;
  for (const GoldenCase& c : m.cases) {
    const std::string name = "case" + std::to_string(c.index) + "." + tensor;
    const auto* ot = out.find(name);
    DSV4_CHECK(ot != nullptr, "output has no tensor ", name);
    const auto& gt = golden.at(name);
    DSV4_CHECK(ot->shape == gt.shape, "output tensor ", name, " has shape ", ot->shape_string(),
               ", golden has ", gt.shape_string());
    const auto e = floats_of(out, name), g = floats_of(golden, name);
    const auto margin = floats_of(golden, "case" + std::to_string(c.index) + ".logit_margin");
    const int64_t rows = gt.shape[0], vocab = gt.shape[1];
    for (int64_t r = 0; r < rows; ++r) {
      const float* er = e.data() + r * vocab;
      const float* gr = g.data() + r * vocab;
      stats.push_back(RowStat{c.index, static_cast<int>(r), row_rel_error(er, gr, vocab),
                              first_argmax(er, vocab) == first_argmax(gr, vocab),
                              margin[static_cast<size_t>(r)]});
    }
  }
  return stats;
}

}  // namespace

double row_rel_error(const float* engine, const float* golden, int64_t n) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += golden[i];
  mean /= static_cast<double>(n);
  double var = 0, worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    var += (golden[i] - mean) * (golden[i] - mean);
    if (!std::isfinite(engine[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(static_cast<double>(engine[i]) - golden[i]));
  }
  const double sd = std::sqrt(var / static_cast<double>(n - 1));
  return worst / sd;
}

int64_t first_argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

double quantile(std::vector<double> values, double q) {
  DSV4_CHECK(!values.empty(), "quantile of no values");
  std::sort(values.begin(), values.end());
  auto k = static_cast<int64_t>(std::ceil(q * static_cast<double>(values.size()))) - 1;
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(values.size()) - 1);
  return values[static_cast<size_t>(k)];
}

bool GoldenReport::passed() const {
  return std::all_of(gates.begin(), gates.end(),
                     [](const GateResult& g) { return g.passed || g.skipped; });
}

std::string GoldenReport::to_string() const {
  std::ostringstream out;
  out << "golden set " << set_name << ": " << (passed() ? "PASS" : "FAIL") << "\n";
  for (const auto& s : summaries) {
    out << "  " << s.tensor << ": rows " << s.rows << ", rel max " << s.rel_max << ", p50 "
        << s.rel_p50 << ", p90 " << s.rel_p90 << ", argmax agreement " << s.argmax_agreement << "\n";
  }
  for (const auto& g : gates) {
    out << "  [" << (g.skipped ? "skip" : g.passed ? "pass" : "FAIL") << "] tier " << g.gate.tier
        << " " << g.gate.name << " (" << g.gate.kind << "): " << g.detail << "\n";
  }
  return out.str();
}

GoldenReport evaluate_gates(const GoldenManifest& m, const std::filesystem::path& golden_path,
                            const std::filesystem::path& output_path) {
  const Checkpoint golden = Checkpoint::open(golden_path);
  const Checkpoint out = Checkpoint::open(output_path);
  GoldenReport report;
  report.set_name = m.name;
  std::map<std::string, std::vector<RowStat>> cache;
  auto stats_for = [&](const std::string& tensor) -> const std::vector<RowStat>* {
    if (!cache.count(tensor)) {
      if (out.find("case" + std::to_string(m.cases.front().index) + "." + tensor) == nullptr)
        return nullptr;
      cache[tensor] = row_stats(m, golden, out, tensor);
    }
    return &cache[tensor];
  };
  for (const std::string tensor : {"logits", "mtp_logits"}) {
    const auto* st = stats_for(tensor);
    if (st == nullptr) continue;
    TensorSummary s{.tensor = tensor, .rows = static_cast<int>(st->size())};
    std::vector<double> rels;
    int agree = 0;
    for (const auto& r : *st) {
      rels.push_back(r.rel);
      agree += r.argmax_equal;
    }
    s.rel_max = *std::max_element(rels.begin(), rels.end());
    s.rel_p50 = quantile(rels, 0.5);
    s.rel_p90 = quantile(rels, 0.9);
    s.argmax_agreement = static_cast<double>(agree) / static_cast<double>(rels.size());
    report.summaries.push_back(s);
  }
  for (const Gate& g : m.gates) {
    GateResult res;
    res.gate = g;
    std::ostringstream detail;
    if (g.kind == "stream_per_layer") {
      // x_layers [R, L, hc, D]: per layer, max |ΔX| <= max_rel · rms(X_golden).
      bool any = false, ok = true;
      double worst = 0;
      for (const GoldenCase& c : m.cases) {
        if (!selected(g.cases, c.index)) continue;
        const std::string name = "case" + std::to_string(c.index) + ".x_layers";
        if (out.find(name) == nullptr) continue;
        any = true;
        const auto e = out.at(name).copy_as<uint16_t>(), gl = golden.at(name).copy_as<uint16_t>();
        const auto& shape = golden.at(name).shape;
        const int64_t layers = shape[1], per_layer = shape[2] * shape[3];
        for (int64_t r = 0; r < shape[0]; ++r) {
          if (!selected(g.rows, static_cast<int>(r))) continue;
          for (int64_t l = 0; l < layers; ++l) {
            double ss = 0, md = 0;
            for (int64_t k = 0; k < per_layer; ++k) {
              const size_t i = static_cast<size_t>((r * layers + l) * per_layer + k);
              const double gv = std::bit_cast<float>(uint32_t{gl[i]} << 16);
              const double ev = std::bit_cast<float>(uint32_t{e[i]} << 16);
              ss += gv * gv;
              md = std::max(md, std::fabs(ev - gv));
            }
            const double rel = md / std::sqrt(ss / static_cast<double>(per_layer));
            worst = std::max(worst, rel);
            if (!(rel <= g.max_rel)) ok = false;
          }
        }
      }
      res.skipped = !any;
      res.passed = any && ok;
      res.value = worst;
      detail << (any ? "worst layer max|dX|/rms " : "no x_layers in output; ") << worst
             << " (limit " << g.max_rel << ")";
    } else {
      const auto* st = stats_for(g.tensor);
      if (st == nullptr) {
        res.skipped = true;
        detail << "output has no " << g.tensor;
      } else {
        std::vector<const RowStat*> rows;
        for (const auto& r : *st)
          if (selected(g.cases, r.case_index) && selected(g.rows, r.row)) rows.push_back(&r);
        DSV4_CHECK(!rows.empty(), "gate ", g.name, " selects no rows");
        if (g.kind == "per_row_max") {
          const RowStat* worst = rows.front();
          for (const auto* r : rows)
            if (!(r->rel <= worst->rel)) worst = r;
          res.value = worst->rel;
          res.passed = worst->rel <= g.max;
          detail << "worst rel " << worst->rel << " at case " << worst->case_index << " row "
                 << worst->row << " (limit " << g.max << ")";
        } else if (g.kind == "quantile") {
          std::vector<double> rels;
          for (const auto* r : rows) rels.push_back(r->rel);
          res.value = quantile(rels, g.q);
          res.passed = res.value <= g.max;
          detail << "q" << g.q << " rel " << res.value << " (limit " << g.max << ")";
        } else if (g.kind == "argmax_agreement") {
          int agree = 0;
          for (const auto* r : rows) agree += r->argmax_equal;
          res.value = static_cast<double>(agree) / static_cast<double>(rows.size());
          res.passed = res.value >= g.min;
          detail << "agreement " << res.value << " over " << rows.size() << " rows (min " << g.min
                 << ")";
        } else if (g.kind == "argmax_where_margin") {
          int checked = 0, bad = 0;
          std::string first_bad;
          for (const auto* r : rows) {
            if (r->golden_margin < g.min_margin) continue;
            ++checked;
            if (!r->argmax_equal) {
              if (bad++ == 0)
                first_bad = "case " + std::to_string(r->case_index) + " row " + std::to_string(r->row);
            }
          }
          res.value = bad;
          res.passed = bad == 0;
          detail << bad << " argmax mismatches on " << checked << " rows with margin >= "
                 << g.min_margin << (bad ? ", first at " + first_bad : "");
        } else {
          DSV4_FAIL("unknown gate kind ", g.kind, " in gate ", g.name);
        }
      }
    }
    res.detail = detail.str();
    report.gates.push_back(res);
  }
  return report;
}

}  // namespace dsv4::eval
