// Text side of generation inside the engine: an incremental detokenizer interface (the
// tokenizer library implements it; the engine never sees the tokenizer itself) and the
// stop-string matcher that holds back text which could still become a stop string.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::engine {

// Incremental detokenizer for one request. push() returns the newly completed text
// (complete UTF-8 characters only); flush() returns what is left at the end.
// Used by one thread at a time.
class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string flush() = 0;
};

// Creates a Detokenizer for one request. Must be callable from the engine thread.
using DetokenizerFactory = std::function<std::unique_ptr<Detokenizer>(bool skip_special)>;

// Matches stop strings on text across token boundaries. Text that may be the start of a
// stop string is held back until it is decided; a matched stop string and everything
// after it are never emitted.
class StopMatcher {
 public:
  StopMatcher() = default;
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;     // text safe to send now
    bool stopped = false;
    std::string matched;  // the stop string that matched
  };
  Result push(std::string_view text);
  // The held-back text, at the end of generation (no match happened).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace dsv4::engine
