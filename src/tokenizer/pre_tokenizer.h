// Pre-tokenization of HF tokenizer.json: a sequence of regex Splits (behavior "Isolated"),
// optionally a ByteLevel step, each applied to every piece produced by the previous step.
//
// Regexes run on PCRE2 with JIT (UTF + UCP). HF runs them on Oniguruma, whose Unicode tables are
// newer than PCRE2 10.42's (Unicode 14: e.g. U+1C89 is a letter for HF, unassigned for PCRE2) and
// whose \s excludes U+180E (PCRE2's includes it, stack.md §5). So before compiling, `\p{L|M|N|P|S}`
// and `\s` / `\S` are replaced with explicit code point classes probed from HF itself
// (unicode_classes.inc, scripts/tokenizer/gen_unicode_classes.mjs). Each piece is matched as its
// own subject, so `(?!\S)` at a piece's end sees the end of the subject, as in HF.
//
// Thread safety: a PreTokenizer is immutable after construction; split() may be called from any
// number of threads concurrently (match data is per call).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dsv4::tokenizer {

// A byte range of the text being pre-tokenized.
struct Piece {
  uint32_t begin;
  uint32_t length;
};

// One compiled PCRE2 pattern.
class SplitRegex {
 public:
  // pattern: an HF/Oniguruma pattern string, compiled verbatim except for \s / \S.
  explicit SplitRegex(const std::string& pattern);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // Splits text[piece] into matches and the gaps between them (both kept, in order, non-empty),
  // appending to out. text must be valid UTF-8.
  void split_isolated(std::string_view text, Piece piece, void* match_data,
                      std::vector<Piece>& out) const;
  void* create_match_data() const;
  static void free_match_data(void* match_data);

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Rewrites `\s`, `\S`, `\p{X}`, `\P{X}` (X in L M N P S) in an Oniguruma pattern to explicit
// classes (exposed for tests). Throws dsv4::Error for other \p{..} classes.
std::string rewrite_unicode_classes(const std::string& pattern);

class PreTokenizer {
 public:
  // Builds from the tokenizer.json "pre_tokenizer" object. Throws dsv4::Error for kinds this
  // implementation does not support (naming them).
  explicit PreTokenizer(const nlohmann::json& config);
  ~PreTokenizer();

  // Splits text (valid UTF-8) into pieces covering it in order; out is overwritten.
  void split(std::string_view text, std::vector<Piece>& out) const;

 private:
  std::vector<std::unique_ptr<SplitRegex>> splits_;
};

}  // namespace dsv4::tokenizer
