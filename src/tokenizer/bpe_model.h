// Byte-level BPE model of HF tokenizer.json ("model": {"type": "BPE", ...}).
//
// The model works directly on UTF-8 bytes: each byte maps to the vocabulary id of its GPT-2
// byte-level character (the ByteLevel pre-tokenizer step folded in), then adjacent pairs are merged
// lowest merge rank first, leftmost first among equal ranks (HF's order). Supports vocab + merges
// with merges as "a b" strings or ["a", "b"] pairs; dropout, unk_token, byte_fallback and
// continuing-subword / end-of-word affixes must be off (checked at load).
//
// Thread safety: immutable after construction; encode_word() is safe to call concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dsv4::tokenizer {

// GPT-2 byte <-> unicode table: byte b is shown as code point byte_to_code_point(b).
uint32_t byte_to_code_point(uint8_t b);

// Decodes a byte-level token string to bytes with HF's ByteLevel decoder rule: when every
// character of token is in the byte table, the mapped bytes; otherwise the token's raw UTF-8.
std::string byte_level_decode(std::string_view token);

// Encodes raw bytes as their byte-level string (e.g. " " -> "Ġ").
std::string byte_level_encode(std::string_view bytes);

class BpeModel {
 public:
  explicit BpeModel(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized piece (raw UTF-8 bytes) to out.
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

  // The vocabulary: id -> byte-level token string ("" for ids not in the vocab).
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct MergeEntry {
    uint64_t key;  // (left id + 1) << 32 | (right id + 1); 0 = empty slot
    int32_t rank;
    int32_t merged_id;
  };
  // Looks up the pair; returns nullptr when the pair never merges.
  const MergeEntry* find_merge(int32_t left, int32_t right) const;
  void insert_merge(int32_t left, int32_t right, int32_t rank, int32_t merged_id);
  void merge_short(std::vector<int32_t>& ids) const;  // O(n^2) scan, best for short words
  void merge_long(std::vector<int32_t>& ids) const;   // heap, O(n log n)

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::array<int32_t, 256> byte_id_{};  // -1 when the byte's character is not in the vocab
  std::vector<MergeEntry> merges_;      // open addressing, power-of-two size
  uint64_t merge_mask_ = 0;
};

}  // namespace dsv4::tokenizer
