// Added tokens of HF tokenizer.json ("added_tokens"): strings matched in the raw text before
// pre-tokenization, each becoming its own id.
//
// Matching follows HF's AddedVocabulary: first the tokens with normalized=false are split out of
// the whole text (leftmost-longest), then the tokens with normalized=true are split out of the
// remaining gaps (the normalizer is a no-op for the files we support). Special and non-special
// tokens are both matched (HF's default, encode_special_tokens=false). lstrip / rstrip /
// single_word must be false (checked at load).
//
// Thread safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dsv4::tokenizer {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;
  bool normalized;
};

// A run of text produced by splitting: either an added token (id >= 0) or plain text (id == -1).
struct Segment {
  uint32_t begin;
  uint32_t length;
  int32_t id;
};

class AddedVocabulary {
 public:
  explicit AddedVocabulary(const nlohmann::json& added_tokens);

  // Splits text into segments covering it in order; out is overwritten.
  void split(std::string_view text, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find(std::string_view content) const;

 private:
  // One leftmost-longest matcher over a set of strings.
  struct Matcher {
    std::array<bool, 256> first_byte{};
    std::unordered_map<std::string_view, int32_t> ids;  // content -> id (views into tokens_)
    std::vector<uint32_t> lengths;                       // distinct lengths, descending
    void add(std::string_view content, int32_t id);
    void finish();
    // Splits text[seg] (plain) into matches and gaps appended to out.
    void split(std::string_view text, Segment seg, std::vector<Segment>& out) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string_view, size_t> by_content_;
  Matcher raw_;         // normalized == false
  Matcher normalized_;  // normalized == true
};

}  // namespace dsv4::tokenizer
