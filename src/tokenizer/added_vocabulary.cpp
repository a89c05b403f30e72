#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/check.h"

namespace dsv4::tokenizer {

void AddedVocabulary::Matcher::add(std::string_view content, int32_t id) {
  if (content.empty()) return;
  first_byte[static_cast<uint8_t>(content[0])] = true;
  ids.emplace(content, id);
  lengths.push_back(static_cast<uint32_t>(content.size()));
}

void AddedVocabulary::Matcher::finish() {
  std::sort(lengths.begin(), lengths.end(), std::greater<>());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
}

void AddedVocabulary::Matcher::split(std::string_view text, Segment seg,
                                     std::vector<Segment>& out) const {
  if (ids.empty()) {
    out.push_back(seg);
    return;
  }
  const uint32_t end = seg.begin + seg.length;
  uint32_t gap = seg.begin;
  uint32_t pos = seg.begin;
  while (pos < end) {
    if (!first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    int32_t id = -1;
    uint32_t len = 0;
    for (const uint32_t l : lengths) {  // longest first
      if (l > end - pos) continue;
      const auto it = ids.find(text.substr(pos, l));
      if (it != ids.end()) {
        id = it->second;
        len = l;
        break;
      }
    }
    if (id < 0) {
      ++pos;
      continue;
    }
    if (pos > gap) out.push_back({gap, pos - gap, -1});
    out.push_back({pos, len, id});
    pos += len;
    gap = pos;
  }
  if (end > gap) out.push_back({gap, end - gap, -1});
}

AddedVocabulary::AddedVocabulary(const nlohmann::json& added_tokens) {
  if (added_tokens.is_null()) return;
  tokens_.reserve(added_tokens.size());
  for (const auto& t : added_tokens) {
    AddedToken tok{t.at("id").get<int32_t>(), t.at("content").get<std::string>(),
                   t.value("special", false), t.value("normalized", !t.value("special", false))};
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      DSV4_CHECK(!t.value(key, false), "added token '", tok.content, "': ", key,
                 "=true is not supported");
    }
    DSV4_CHECK(tok.id >= 0, "added token '", tok.content, "' has a negative id");
    tokens_.push_back(std::move(tok));
  }
  // Views into tokens_ stay valid: the vector is not resized after this point.
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    by_content_.emplace(t.content, i);
    (t.normalized ? normalized_ : raw_).add(t.content, t.id);
  }
  raw_.finish();
  normalized_.finish();
}

void AddedVocabulary::split(std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  if (text.empty()) return;
  std::vector<Segment> first;
  raw_.split(text, {0, static_cast<uint32_t>(text.size()), -1}, first);
  for (const Segment& s : first) {
    if (s.id >= 0) {
      out.push_back(s);
    } else {
      normalized_.split(text, s, out);
    }
  }
}

const AddedToken* AddedVocabulary::find(std::string_view content) const {
  const auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace dsv4::tokenizer
