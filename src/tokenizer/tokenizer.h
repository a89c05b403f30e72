// Tokenizer: HF tokenizer.json byte-level BPE as shipped by DeepSeek (V3 and V4).
//
// encode(text):
//   1. Ill-formed UTF-8 is repaired first: each maximal ill-formed subpart becomes U+FFFD (what HF
//      sees after any UTF-8 -> string decoding; see utf8.h). Never throws for any bytes.
//   2. Added tokens (special or not) are split out (AddedVocabulary); e.g. "<｜User｜>" in the
//      text becomes id 128803. A string that is not an added token of the file (e.g. "<think>" in
//      the V3 file) is tokenized as plain text.
//   3. The rest is pre-tokenized (PreTokenizer) and each piece BPE-encoded (BpeModel).
//   No BOS/EOS is added (DeepSeek's post_processor adds none; the chat encoder writes BOS itself).
// decode(ids): tokens are mapped back to bytes with HF's ByteLevel decoder rule and the result is
//   made valid UTF-8 the from_utf8_lossy way. Ids outside the tokenizer's range are skipped (HF).
//
// Thread safety: a Tokenizer is immutable after from_file(); all const methods may be called
// concurrently. IncrementalDetokenizer is single-threaded state that borrows a Tokenizer (which
// must outlive it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::tokenizer {

class AddedVocabulary;
class BpeModel;
class PreTokenizer;

class Tokenizer {
 public:
  // Loads tokenizer.json; reads tokenizer_config.json beside it (if present) for bos_token /
  // eos_token, else uses DeepSeek's "<｜begin▁of▁sentence｜>" / "<｜end▁of▁sentence｜>".
  // Throws dsv4::Error for unreadable files and unsupported tokenizer kinds.
  static Tokenizer from_file(const std::filesystem::path& path);
  // Same from the JSON text (config_json may be empty).
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Special-token strings map to their ids; no BOS/EOS added. Any bytes are accepted.
  std::vector<int32_t> encode(std::string_view text) const;
  // Appends to out (for callers that batch).
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;
  // Valid UTF-8 always. skip_special_tokens drops added tokens marked special.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Number of ids the tokenizer can produce (max id + 1): the valid range is [0, vocab_size()).
  // Logits at ids >= vocab_size() must be masked (the model may have more embedding rows).
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string (byte-level form for BPE tokens, e.g. "Ġthe"); "" for unknown ids.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // Throws dsv4::Error when the tokenizer can produce ids >= model_vocab_size (the model's
  // embedding rows); returns normally when vocab_size() <= model_vocab_size.
  void check_model_vocab(int64_t model_vocab_size) const;

  // Bytes of one id as the decoder emits them before UTF-8 repair ("" when unknown or skipped).
  std::string_view token_bytes(int32_t id, bool skip_special_tokens) const;

 private:
  Tokenizer();
  std::unique_ptr<AddedVocabulary> added_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::vector<std::string> id_bytes_;  // [vocab_size_] decoder bytes per id
  std::vector<uint8_t> id_special_;    // [vocab_size_] 1 for special added tokens
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
};

// Streaming decoder: push() ids one at a time and get text that is safe to emit. Never returns a
// partial UTF-8 sequence; the concatenation of all push() results and flush() equals
// Tokenizer::decode() of the same ids (same replacement characters for ill-formed bytes).
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  // Returns the newly complete text (possibly empty).
  std::string push(int32_t id);
  // Returns what is left (an incomplete sequence becomes one U+FFFD) and resets the state.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes not yet emitted: always a valid prefix of one character
};

}  // namespace dsv4::tokenizer
