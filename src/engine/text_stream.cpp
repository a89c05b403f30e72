#include "engine/text_stream.h"

#include <algorithm>

namespace dsv4::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result r;
  if (stops_.empty()) {
    r.emit.assign(text);
    return r;
  }
  held_.append(text);
  // Earliest match wins; at the same position the longest stop string.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const auto& s : stops_) {
    const size_t p = held_.find(s);
    if (p == std::string::npos) continue;
    if (p < best || (p == best && s.size() > best_stop->size())) {
      best = p;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    r.emit = held_.substr(0, best);
    r.stopped = true;
    r.matched = *best_stop;
    held_.clear();
    return r;
  }
  // Hold the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  r.emit = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return r;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace dsv4::engine
