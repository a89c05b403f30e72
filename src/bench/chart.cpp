#include "bench/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dsv4::bench {
namespace {

constexpr double kPanelW = 460, kPanelH = 320;          // one panel, with its margins
constexpr double kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;

std::string num(double v) {
  char buf[32];
  if (v != 0 && std::fabs(v) < 10) {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  }
  return buf;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// One panel at horizontal offset x0 (plus the title band above all panels).
std::string panel(double x0, double y0, const std::string& title, const std::string& y_label,
                  const std::string& color, const std::vector<std::string>& x_labels,
                  const std::vector<double>& ys) {
  const double plot_w = kPanelW - kLeft - kRight, plot_h = kPanelH - kTop - kBottom;
  const double px = x0 + kLeft, py = y0 + kTop;
  const double y_max = nice_ceiling(ys.empty() ? 1 : *std::max_element(ys.begin(), ys.end()));
  const size_t n = x_labels.size();
  auto x_at = [&](size_t i) { return px + plot_w * (n == 1 ? 0.5 : (i + 0.5) / n); };
  auto y_at = [&](double v) { return py + plot_h * (1 - v / y_max); };
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof(buf),
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\" "
                "font-weight=\"bold\">%s</text>\n",
                px + plot_w / 2, y0 + 22, xml_escape(title).c_str());
  s += buf;
  for (int t = 0; t <= 5; ++t) {  // horizontal grid and y tick labels
    const double v = y_max * t / 5, y = y_at(v);
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%s</text>\n",
                  px, y, px + plot_w, y, px - 6, y + 4, num(v).c_str());
    s += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                "stroke=\"#333\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">max "
                "concurrency</text>\n"
                "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
                "font-size=\"12\">%s</text>\n",
                px, py, plot_w, plot_h, px + plot_w / 2, py + plot_h + 38, x0 + 16,
                py + plot_h / 2, xml_escape(y_label).c_str());
  s += buf;
  std::string points;
  for (size_t i = 0; i < n; ++i) {
    const double x = x_at(i), y = y_at(ys[i]);
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n"
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\" "
                  "fill=\"%s\">%s</text>\n",
                  x, py + plot_h + 16, xml_escape(x_labels[i]).c_str(), x, y, color.c_str(), x,
                  y - 8, color.c_str(), num(ys[i]).c_str());
    s += buf;
    std::snprintf(buf, sizeof(buf), "%s%.1f,%.1f", i ? " " : "", x, y);
    points += buf;
  }
  if (n > 1) {
    s += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\" points=\"" + points +
         "\"/>\n";
  }
  return s;
}

}  // namespace

double nice_ceiling(double v) {
  if (!(v > 0) || !std::isfinite(v)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= v * (1 - 1e-12)) return m * p;
  }
  return 10 * p;
}

std::string render_chart_svg(const std::vector<SweepPoint>& points, const std::string& title) {
  std::vector<std::string> labels;
  std::vector<double> throughput, tpot;
  for (const auto& p : points) {
    labels.push_back(concurrency_label(p.max_concurrency));
    throughput.push_back(p.metrics.output_throughput);
    tpot.push_back(p.metrics.tpot_ms.median);
  }
  const double top = 30;
  char head[256];
  std::snprintf(head, sizeof(head),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\">\n",
                2 * kPanelW, kPanelH + top);
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += head;
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(kPanelW) + "\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">" +
       xml_escape(title) + "</text>\n";
  s += panel(0, top, "Output throughput", "output tok/s", "#1f77b4", labels, throughput);
  s += panel(kPanelW, top, "Median TPOT", "TPOT p50 (ms)", "#d62728", labels, tpot);
  s += "</svg>\n";
  return s;
}

}  // namespace dsv4::bench
