// Byte-level TextCodec (see text_codec.h) and the ReasoningSplitter.
#include <algorithm>

#include "base/check.h"
#include "server/text_codec.h"

namespace dsv4::server {

namespace {
constexpr int32_t kBos = 256;
constexpr int32_t kEos = 257;
constexpr std::string_view kThinkEnd = "</think>";

// Emits complete UTF-8 characters only; invalid bytes become U+FFFD at flush.
class ByteDetokenizer : public engine::Detokenizer {
 public:
  std::string push(int32_t id) override {
    if (id < 0 || id > 255) return {};
    pending_.push_back(static_cast<char>(id));
    return take_complete();
  }
  std::string flush() override {
    std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
    pending_.clear();
    return out;
  }

 private:
  static int char_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c >> 5) == 6) return 2;
    if ((c >> 4) == 14) return 3;
    if ((c >> 3) == 30) return 4;
    return 1;  // stray continuation or invalid: pass through as one byte
  }
  std::string take_complete() {
    size_t i = 0;
    while (i < pending_.size()) {
      const int n = char_len(static_cast<unsigned char>(pending_[i]));
      if (i + static_cast<size_t>(n) > pending_.size()) break;
      i += static_cast<size_t>(n);
    }
    std::string out = pending_.substr(0, i);
    pending_.erase(0, i);
    return out;
  }
  std::string pending_;
};

class ByteCodec : public TextCodec {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids{kBos};
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) const override {
    std::string s;
    for (const auto& m : messages) s += "<|" + m.role + "|>" + m.content + "\n";
    if (options.add_generation_prompt) s += options.thinking ? "<|assistant|><think>" : "<|assistant|>";
    return encode(s);
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) s.push_back(static_cast<char>(id));
      else if (!skip_special) s += id == kBos ? "<bos>" : id == kEos ? "<eos>" : "<special>";
    }
    return s;
  }
  std::string token_text(int32_t id) const override {
    const int32_t one[] = {id};
    return decode(one, false);
  }
  ParsedReply parse_reply(std::string_view text, bool thinking) const override {
    ReasoningSplitter split(thinking);
    ReasoningSplitter::Piece a = split.push(text), b = split.flush();
    return {a.content + b.content, a.reasoning + b.reasoning, {}};
  }
  int64_t vocab_size() const override { return 258; }
  int32_t eos_id() const override { return kEos; }
  engine::DetokenizerFactory detokenizer_factory() const override {
    return [](bool) { return std::make_unique<ByteDetokenizer>(); };
  }
  std::string name() const override { return "bytes"; }
};
}  // namespace

std::unique_ptr<TextCodec> make_byte_codec() { return std::make_unique<ByteCodec>(); }

ReasoningSplitter::Piece ReasoningSplitter::push(std::string_view text) {
  Piece p;
  if (!in_reasoning_) {
    p.content.assign(text);
    return p;
  }
  held_.append(text);
  const size_t end = held_.find(kThinkEnd);
  if (end != std::string::npos) {
    p.reasoning = held_.substr(0, end);
    p.content = held_.substr(end + kThinkEnd.size());
    held_.clear();
    in_reasoning_ = false;
    return p;
  }
  size_t hold = 0;
  for (size_t len = std::min(kThinkEnd.size() - 1, held_.size()); len > 0; --len) {
    if (std::string_view(held_).substr(held_.size() - len) == kThinkEnd.substr(0, len)) {
      hold = len;
      break;
    }
  }
  p.reasoning = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return p;
}

ReasoningSplitter::Piece ReasoningSplitter::flush() {
  Piece p;
  if (in_reasoning_) p.reasoning.swap(held_);
  held_.clear();
  return p;
}

}  // namespace dsv4::server
