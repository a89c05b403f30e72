#include "gpu/kernel_attribution.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

namespace dsv4::gpu::prof {
namespace {

void sort_by_time(std::vector<KernelRecord>& r) {
  std::stable_sort(r.begin(), r.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return std::tie(a.start_ns, a.end_ns, a.correlation) <
           std::tie(b.start_ns, b.end_ns, b.correlation);
  });
}

// Index of the '(' that opens the top-level parameter list, or npos.
size_t parameter_list_start(const std::string& s) {
  if (s.empty() || s.back() != ')') return std::string::npos;
  int depth = 0;
  for (size_t i = s.size(); i-- > 0;) {
    const char c = s[i];
    if (c == ')' || c == '>') ++depth;
    if (c == '(' || c == '<') --depth;
    if (depth == 0 && c == '(') {
      // "(anonymous namespace)" is part of the name, not a parameter list.
      if (s.compare(i, 21, "(anonymous namespace)") == 0) return std::string::npos;
      return i;
    }
  }
  return std::string::npos;
}

}  // namespace

std::string short_kernel_name(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  if (status != 0 || d == nullptr) return mangled;
  std::string s(d.get());
  const size_t p = parameter_list_start(s);
  if (p != std::string::npos) s.resize(p);
  // Function templates demangle with their return type first ("void name<...>").
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  const std::string anon = "(anonymous namespace)::";
  for (size_t at = s.find(anon); at != std::string::npos; at = s.find(anon, at))
    s.erase(at, anon.size());
  return s;
}

KernelMap build_kernel_map(std::vector<KernelRecord> step_records,
                           const std::vector<LaunchEntry>& launches) {
  KernelMap m;
  for (const LaunchEntry& l : launches) {
    m.bytes_per_step[l.launcher] += l.bytes;
    m.launches_per_step[l.launcher] += 1;
  }
  sort_by_time(step_records);
  for (const KernelRecord& r : step_records) {
    const bool known = r.launch >= 1 && r.launch <= launches.size();
    m.occurrences[r.name].push_back(known ? launches[r.launch - 1].launcher : std::string());
  }
  return m;
}

Attribution attribute(std::vector<KernelRecord> records, const KernelMap& map, int steps) {
  Attribution a;
  sort_by_time(records);
  std::map<std::string, int64_t> seen;  // executions so far, per function
  std::map<std::string, KernelStat> rows;
  std::map<std::string, std::vector<double>> spans;  // per launcher, µs per execution
  for (const KernelRecord& r : records) {
    ++a.records;
    if (r.graph_id != 0) ++a.graph_records;
    const int64_t i = seen[r.name]++;
    std::string launcher;
    const auto it = map.occurrences.find(r.name);
    if (it != map.occurrences.end() && !it->second.empty()) {
      launcher = it->second[static_cast<size_t>(i) % it->second.size()];
    }
    if (launcher.empty()) launcher = short_kernel_name(r.name);
    KernelStat& row = rows[launcher];
    row.kernel = launcher;
    row.calls += 1;
    const double us = r.end_ns > r.start_ns ? double(r.end_ns - r.start_ns) * 1e-3 : 0.0;
    row.us += us;
    spans[launcher].push_back(us);
  }
  for (const auto& [name, count] : seen) {
    const auto it = map.occurrences.find(name);
    if (it == map.occurrences.end()) {
      ++a.unmapped_functions;
    } else if (count != int64_t{steps} * static_cast<int64_t>(it->second.size())) {
      ++a.mismatched_functions;
    }
  }
  for (auto& [name, row] : rows) {
    const auto b = map.bytes_per_step.find(name);
    if (b != map.bytes_per_step.end()) row.bytes = b->second * steps;
    std::vector<double>& v = spans[name];
    std::sort(v.begin(), v.end());
    row.median_call_us = v[v.size() / 2];
    row.max_call_us = v.back();
    a.rows.push_back(std::move(row));
  }
  std::sort(a.rows.begin(), a.rows.end(), [](const KernelStat& x, const KernelStat& y) {
    return x.us != y.us ? x.us > y.us : x.kernel < y.kernel;
  });
  return a;
}

}  // namespace dsv4::gpu::prof

namespace dsv4::gpu::prof {

std::vector<CollectiveDevice> collective_sync(const std::vector<KernelRecord>& records, const std::string& name_part) {
  std::map<uint32_t, std::vector<KernelRecord>> by_device;
  for (const KernelRecord& r : records) {
    if (r.name.find(name_part) != std::string::npos) by_device[r.device].push_back(r);
  }
  std::vector<CollectiveDevice> out;
  if (by_device.size() < 2) return out;
  size_t calls = SIZE_MAX;
  for (auto& [dev, v] : by_device) {
    sort_by_time(v);
    calls = std::min(calls, v.size());
  }
  std::vector<uint64_t> last_arrival(calls, 0);
  for (size_t i = 0; i < calls; ++i) {
    for (const auto& [dev, v] : by_device) last_arrival[i] = std::max(last_arrival[i], v[i].start_ns);
  }
  for (const auto& [dev, v] : by_device) {
    CollectiveDevice c{.device = dev, .calls = static_cast<int64_t>(calls)};
    std::vector<double> after(calls);
    for (size_t i = 0; i < calls; ++i) {
      c.mean_span_us += static_cast<double>(v[i].end_ns - v[i].start_ns) * 1e-3;
      c.mean_wait_us += static_cast<double>(last_arrival[i] - v[i].start_ns) * 1e-3;
      after[i] = (static_cast<double>(v[i].end_ns) - static_cast<double>(last_arrival[i])) * 1e-3;
      c.mean_after_last_us += after[i];
    }
    if (calls > 0) {
      c.mean_span_us /= static_cast<double>(calls);
      c.mean_wait_us /= static_cast<double>(calls);
      c.mean_after_last_us /= static_cast<double>(calls);
      std::nth_element(after.begin(), after.begin() + static_cast<std::ptrdiff_t>(calls / 2), after.end());
      c.median_after_last_us = after[calls / 2];
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace dsv4::gpu::prof
