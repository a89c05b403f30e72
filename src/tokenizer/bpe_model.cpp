#include "tokenizer/bpe_model.h"

#include <queue>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "tokenizer/utf8.h"

namespace dsv4::tokenizer {
namespace {

// code point -> byte for the byte-level table (index = code point, value = byte or -1).
const std::vector<int16_t>& code_point_to_byte_table() {
  static const std::vector<int16_t> table = [] {
    std::vector<int16_t> t(512, -1);
    for (int b = 0; b < 256; ++b) t[byte_to_code_point(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return t;
  }();
  return table;
}

uint64_t hash_key(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdull;
  key ^= key >> 33;
  return key;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) {
  // Printable Latin-1 stays itself; the other 68 bytes map to 256.. in byte order.
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
  uint32_t n = 0;
  for (uint32_t x = 0; x < b; ++x) {
    if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++n;
  }
  return 256 + n;
}

std::string byte_level_decode(std::string_view token) {
  const auto& table = code_point_to_byte_table();
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    const Utf8Step st = utf8_step(token.substr(i));
    if (st.kind != Utf8Step::kValid) return std::string(token);
    uint32_t cp = static_cast<uint8_t>(token[i]);
    if (st.length == 2) {
      cp = ((cp & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
    } else if (st.length > 2) {
      return std::string(token);  // code point >= 0x800: not in the table
    }
    if (cp >= table.size() || table[cp] < 0) return std::string(token);
    out.push_back(static_cast<char>(table[cp]));
    i += st.length;
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) append_code_point(byte_to_code_point(static_cast<uint8_t>(c)), out);
  return out;
}

BpeModel::BpeModel(const nlohmann::json& model) {
  DSV4_CHECK(model.value("type", "BPE") == "BPE", "tokenizer model type '", model.value("type", ""),
             "' is not supported (only BPE)");
  DSV4_CHECK(model.value("dropout", nlohmann::json()).is_null(), "BPE dropout is not supported");
  DSV4_CHECK(!model.value("byte_fallback", false), "BPE byte_fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto v = model.value(key, nlohmann::json());
    DSV4_CHECK(v.is_null() || v == "", "BPE ", key, " is not supported");
  }
  DSV4_CHECK(!model.value("ignore_merges", false), "BPE ignore_merges is not supported");

  const auto& vocab = model.at("vocab");
  int32_t max_id = -1;
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    DSV4_CHECK(id >= 0, "BPE vocab id ", id, " for '", it.key(), "' is negative");
    vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [tok, id] : vocab_) tokens_[id] = tok;

  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_code_point(byte_to_code_point(static_cast<uint8_t>(b)), ch);
    const auto it = vocab_.find(ch);
    byte_id_[b] = it == vocab_.end() ? -1 : it->second;
  }

  const auto& merges = model.at("merges");
  size_t cap = 16;
  while (cap < merges.size() * 2) cap <<= 1;
  merges_.assign(cap, MergeEntry{0, 0, 0});
  merge_mask_ = cap - 1;
  int32_t rank = 0;
  for (const auto& m : merges) {
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      DSV4_CHECK(sp != std::string::npos, "BPE merge '", s, "' has no space");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else {
      left = m.at(0).get<std::string>();
      right = m.at(1).get<std::string>();
    }
    const auto l = vocab_.find(left), r = vocab_.find(right), lr = vocab_.find(left + right);
    DSV4_CHECK(l != vocab_.end() && r != vocab_.end() && lr != vocab_.end(), "BPE merge '", left,
               " ", right, "' (rank ", rank, ") refers to a token missing from the vocab");
    if (find_merge(l->second, r->second) == nullptr) insert_merge(l->second, r->second, rank, lr->second);
    ++rank;
  }
}

const BpeModel::MergeEntry* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = (static_cast<uint64_t>(left + 1) << 32) | static_cast<uint32_t>(right + 1);
  for (uint64_t i = hash_key(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeEntry& e = merges_[i];
    if (e.key == key) return &e;
    if (e.key == 0) return nullptr;
  }
}

void BpeModel::insert_merge(int32_t left, int32_t right, int32_t rank, int32_t merged_id) {
  const uint64_t key = (static_cast<uint64_t>(left + 1) << 32) | static_cast<uint32_t>(right + 1);
  uint64_t i = hash_key(key) & merge_mask_;
  while (merges_[i].key != 0) i = (i + 1) & merge_mask_;
  merges_[i] = MergeEntry{key, rank, merged_id};
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  thread_local std::vector<int32_t> ids;
  ids.clear();
  for (const char c : bytes) {
    const int32_t id = byte_id_[static_cast<uint8_t>(c)];
    if (id >= 0) ids.push_back(id);  // HF drops characters missing from the vocab (no unk)
  }
  if (ids.size() > 1) {
    if (ids.size() <= 96) {
      merge_short(ids);
    } else {
      merge_long(ids);
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::merge_short(std::vector<int32_t>& ids) const {
  constexpr int32_t kNone = INT32_MAX;
  // rank[i]: rank of the pair (ids[i], ids[i + 1]); the vector is compacted after each merge.
  thread_local std::vector<int32_t> rank;
  thread_local std::vector<int32_t> merged;
  const size_t n = ids.size();
  rank.resize(n);
  merged.resize(n);
  for (size_t i = 0; i + 1 < n; ++i) {
    const MergeEntry* e = find_merge(ids[i], ids[i + 1]);
    rank[i] = e ? e->rank : kNone;
    merged[i] = e ? e->merged_id : -1;
  }
  size_t size = n;
  while (size > 1) {
    size_t best = 0;
    int32_t best_rank = kNone;
    for (size_t i = 0; i + 1 < size; ++i) {
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    }
    if (best_rank == kNone) break;
    ids[best] = merged[best];
    // Remove element best + 1.
    for (size_t i = best + 1; i + 1 < size; ++i) {
      ids[i] = ids[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --size;
    for (size_t i = best > 0 ? best - 1 : 0; i <= best; ++i) {
      if (i + 1 < size) {
        const MergeEntry* e = find_merge(ids[i], ids[i + 1]);
        rank[i] = e ? e->rank : kNone;
        merged[i] = e ? e->merged_id : -1;
      }
    }
  }
  ids.resize(size);
}

void BpeModel::merge_long(std::vector<int32_t>& ids) const {
  const int32_t n = static_cast<int32_t>(ids.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank, pos, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeEntry* e = find_merge(ids[i], ids[next[i]])) heap.push({e->rank, i, next[i]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (dead[c.pos] || next[c.pos] != c.right) continue;
    const MergeEntry* e = find_merge(ids[c.pos], ids[c.right]);
    if (e == nullptr || e->rank != c.rank) continue;  // stale: a side changed since the push
    ids[c.pos] = e->merged_id;
    dead[c.right] = true;
    next[c.pos] = next[c.right];
    if (next[c.pos] >= 0) prev[next[c.pos]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) ids[w++] = ids[i];
  ids.resize(w);
}

}  // namespace dsv4::tokenizer
