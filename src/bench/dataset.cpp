#include "bench/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/check.h"

namespace dsv4::bench {
namespace {

// Common English words; each is (almost always) one BPE token when preceded by a space.
constexpr const char* kWords[] = {
    "the",    "of",    "and",   "to",    "in",    "is",    "you",   "that",  "it",    "he",
    "was",    "for",   "on",    "are",   "as",    "with",  "his",   "they",  "at",    "be",
    "this",   "have",  "from",  "or",    "one",   "had",   "by",    "word",  "but",   "not",
    "what",   "all",   "were",  "we",    "when",  "your",  "can",   "said",  "there", "use",
    "an",     "each",  "which", "she",   "do",    "how",   "their", "if",    "will",  "up",
    "other",  "about", "out",   "many",  "then",  "them",  "these", "so",    "some",  "her",
    "would",  "make",  "like",  "him",   "into",  "time",  "has",   "look",  "two",   "more",
    "write",  "go",    "see",   "number", "no",   "way",   "could", "people", "my",   "than",
    "first",  "water", "been",  "call",  "who",   "oil",   "its",   "now",   "find",  "long",
    "down",   "day",   "did",   "get",   "come",  "made",  "may",   "part",  "over",  "new",
    "sound",  "take",  "only",  "little", "work", "know",  "place", "year",  "live",  "me",
    "back",   "give",  "most",  "very",  "after", "thing", "our",   "just",  "name",  "good",
    "man",    "think", "say",   "great", "where", "help",  "through", "much", "before", "line",
    "right",  "too",   "mean",  "old",   "any",   "same",  "tell",  "boy",   "follow", "came",
    "want",   "show",  "also",  "around", "form", "three", "small", "set",   "put",   "end",
};
constexpr int kNumWords = static_cast<int>(sizeof(kWords) / sizeof(kWords[0]));

int sample_len(std::mt19937_64& rng, int len, double ratio) {
  const int lo = std::max(1, static_cast<int>(std::floor(ratio * len)));
  return std::uniform_int_distribution<int>(lo, len)(rng);
}

}  // namespace

int count_words(const std::string& text) {
  std::istringstream in(text);
  int n = 0;
  std::string w;
  while (in >> w) ++n;
  return n;
}

std::vector<BenchPrompt> make_random_dataset(int num_prompts, int input_len, int output_len,
                                             double range_ratio, int vocab_size, uint64_t seed) {
  DSV4_CHECK(vocab_size > 3, "vocab_size must be > 3");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id_dist(3, vocab_size - 1);
  std::uniform_int_distribution<int> word_dist(0, kNumWords - 1);
  std::vector<BenchPrompt> out(num_prompts);
  for (auto& p : out) {
    p.prompt_len = sample_len(rng, input_len, range_ratio);
    p.output_len = sample_len(rng, output_len, range_ratio);
    p.ids.resize(p.prompt_len);
    for (auto& id : p.ids) id = id_dist(rng);
    for (int i = 0; i < p.prompt_len; ++i) {
      if (i) p.text += ' ';
      p.text += kWords[word_dist(rng)];
    }
  }
  return out;
}

std::vector<BenchPrompt> load_sharegpt_dataset(const std::string& path, int num_prompts,
                                               int output_len_override, uint64_t seed) {
  std::ifstream in(path);
  DSV4_CHECK(in.good(), "cannot open ShareGPT file '", path, "'");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    DSV4_FAIL("ShareGPT file '", path, "' is not valid JSON: ", e.what());
  }
  DSV4_CHECK(doc.is_array(), "ShareGPT file '", path, "' must hold a JSON array");
  std::vector<BenchPrompt> all;
  for (const auto& entry : doc) {
    if (!entry.is_object() || !entry.contains("conversations")) continue;
    const auto& conv = entry["conversations"];
    if (!conv.is_array() || conv.size() < 2) continue;
    if (!conv[0].contains("value") || !conv[1].contains("value")) continue;
    BenchPrompt p;
    p.text = conv[0]["value"].get<std::string>();
    const std::string reply = conv[1]["value"].get<std::string>();
    p.prompt_len = static_cast<int>(std::lround(count_words(p.text) * 1.3));
    p.output_len = output_len_override > 0
                       ? output_len_override
                       : static_cast<int>(std::lround(count_words(reply) * 1.3));
    if (p.prompt_len < 1 || p.output_len < 1) continue;
    all.push_back(std::move(p));
  }
  DSV4_CHECK(!all.empty(), "ShareGPT file '", path, "' holds no usable conversation");
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  if (static_cast<int>(all.size()) > num_prompts) all.resize(num_prompts);
  return all;
}

}  // namespace dsv4::bench
