#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "base/check.h"

namespace dsv4::tokenizer {
namespace {

#include "tokenizer/unicode_classes.inc"

// Class items for \p{X} / \s, or empty when the escape is not one we replace.
std::string_view class_items(std::string_view name) {
  if (name == "L") return kClassL;
  if (name == "M") return kClassM;
  if (name == "N") return kClassN;
  if (name == "P") return kClassP;
  if (name == "S") return kClassS;
  return {};
}

// GPT-2's split pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace

std::string rewrite_unicode_classes(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  auto emit = [&](std::string_view items, bool negate) {
    if (in_class) {
      DSV4_CHECK(!negate, "tokenizer regex: a negated class escape inside [...] is not supported");
      out += items;
    } else {
      out += negate ? "[^" : "[";
      out += items;
      out += ']';
    }
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's' || e == 'S') {
        emit(kClassSpace, e == 'S');
        continue;
      }
      if ((e == 'p' || e == 'P') && i + 1 < pattern.size() && pattern[i + 1] == '{') {
        const size_t close = pattern.find('}', i);
        DSV4_CHECK(close != std::string::npos, "tokenizer regex: unterminated \\p{");
        const std::string_view items =
            class_items(std::string_view(pattern).substr(i + 2, close - i - 2));
        DSV4_CHECK(!items.empty(), "tokenizer regex: class ", pattern.substr(i - 1, close - i + 2),
                   " is not supported (only \\p{L} \\p{M} \\p{N} \\p{P} \\p{S})");
        emit(items, e == 'P');
        i = close;
        continue;
      }
      out += c;
      out += e;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

SplitRegex::SplitRegex(const std::string& pattern) {
  const std::string rewritten = rewrite_unicode_classes(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                             PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(error, msg, sizeof(msg));
    DSV4_FAIL("tokenizer regex does not compile at offset ", offset, ": ",
              reinterpret_cast<const char*>(msg), " (pattern ", pattern, ")");
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::~SplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void* SplitRegex::create_match_data() const {
  return pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(code_), nullptr);
}

void SplitRegex::free_match_data(void* match_data) {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data));
}

void SplitRegex::split_isolated(std::string_view text, Piece piece, void* match_data,
                                std::vector<Piece>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* md = static_cast<pcre2_match_data*>(match_data);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.begin);
  const PCRE2_SIZE length = piece.length;
  PCRE2_SIZE start = 0;  // search position
  PCRE2_SIZE last = 0;   // end of the previous match
  while (start < length) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, length, start, 0, md, nullptr)
                        : pcre2_match(code, subject, length, start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    DSV4_CHECK(rc > 0, "tokenizer regex match failed with PCRE2 error ", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const PCRE2_SIZE mb = ov[0], me = ov[1];
    if (me == mb) {  // empty match: not produced by HF patterns; skip one character
      start = mb + 1;
      while (start < length && (subject[start] & 0xC0) == 0x80) ++start;
      continue;
    }
    if (mb > last) out.push_back({piece.begin + static_cast<uint32_t>(last),
                                  static_cast<uint32_t>(mb - last)});
    out.push_back({piece.begin + static_cast<uint32_t>(mb), static_cast<uint32_t>(me - mb)});
    last = start = me;
  }
  if (last < length) out.push_back({piece.begin + static_cast<uint32_t>(last),
                                    static_cast<uint32_t>(length - last)});
}

PreTokenizer::PreTokenizer(const nlohmann::json& config) {
  std::vector<nlohmann::json> steps;
  if (config.is_null()) {
    // no pre-tokenization: the whole text is one piece
  } else if (config.value("type", "") == "Sequence") {
    for (const auto& s : config.at("pretokenizers")) steps.push_back(s);
  } else {
    steps.push_back(config);
  }
  for (const auto& s : steps) {
    const std::string type = s.value("type", "");
    if (type == "Split") {
      DSV4_CHECK(s.value("behavior", "") == "Isolated", "pre_tokenizer Split behavior ",
                 s.value("behavior", ""), " is not supported (only Isolated)");
      DSV4_CHECK(!s.value("invert", false), "pre_tokenizer Split invert=true is not supported");
      const auto& pat = s.at("pattern");
      if (pat.contains("Regex")) {
        splits_.push_back(std::make_unique<SplitRegex>(pat.at("Regex").get<std::string>()));
      } else {
        // A literal string: quote it for PCRE2.
        splits_.push_back(
            std::make_unique<SplitRegex>("\\Q" + pat.at("String").get<std::string>() + "\\E"));
      }
    } else if (type == "ByteLevel") {
      DSV4_CHECK(!s.value("add_prefix_space", false),
                 "pre_tokenizer ByteLevel add_prefix_space=true is not supported");
      if (s.value("use_regex", true)) splits_.push_back(std::make_unique<SplitRegex>(std::string(kGpt2Pattern)));
      // The byte -> unicode mapping itself is folded into the BPE model (it works on bytes).
    } else {
      DSV4_FAIL("pre_tokenizer type '", type, "' is not supported");
    }
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<Piece>& out) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({0, static_cast<uint32_t>(text.size())});
  if (splits_.empty()) return;
  std::vector<Piece> next;
  next.reserve(text.size() / 2 + 4);
  for (const auto& split : splits_) {
    void* md = split->create_match_data();
    next.clear();
    for (const Piece& p : out) split->split_isolated(text, p, md, next);
    SplitRegex::free_match_data(md);
    out.swap(next);
  }
}

}  // namespace dsv4::tokenizer
