// TextCodec over dsv4::tokenizer (the DeepSeek tokenizer.json and chat encoding).
#include "base/check.h"
#include "server/text_codec.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

namespace {

class TokenizerDetokenizer : public engine::Detokenizer {
 public:
  TokenizerDetokenizer(std::shared_ptr<const tokenizer::Tokenizer> tok, bool skip_special)
      : tok_(std::move(tok)), inner_(*tok_, skip_special) {}
  std::string push(int32_t id) override { return inner_.push(id); }
  std::string flush() override { return inner_.flush(); }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;  // keeps the tokenizer alive
  tokenizer::IncrementalDetokenizer inner_;
};

class TokenizerCodec : public TextCodec {
 public:
  explicit TokenizerCodec(tokenizer::Tokenizer tok)
      : tok_(std::make_shared<const tokenizer::Tokenizer>(std::move(tok))) {}

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    if (tok_->bos_id() >= 0) ids.push_back(tok_->bos_id());
    tok_->encode_into(text, ids);
    return ids;
  }
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) const override {
    std::vector<tokenizer::ChatMessage> msgs;
    msgs.reserve(messages.size());
    for (const auto& m : messages) {
      tokenizer::ChatMessage t;
      t.role = m.role;
      t.content = m.content;
      t.reasoning_content = m.reasoning_content;
      for (const auto& c : m.tool_calls) t.tool_calls.push_back({c.id, c.name, c.arguments_json});
      t.tool_call_id = m.tool_call_id;
      t.name = m.name;
      msgs.push_back(std::move(t));
    }
    tokenizer::ChatOptions o;
    o.thinking = options.thinking;
    o.reasoning_effort = options.reasoning_effort;
    o.tools_json = options.tools_json;
    o.add_generation_prompt = options.add_generation_prompt;
    return tokenizer::encode_chat(*tok_, msgs, o);
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    return tok_->decode(ids, skip_special);
  }
  std::string token_text(int32_t id) const override {
    const int32_t one[] = {id};
    return tok_->decode(one, false);
  }
  ParsedReply parse_reply(std::string_view text, bool thinking) const override {
    tokenizer::ParsedReply r = tokenizer::parse_reply(text, thinking);
    ParsedReply out{std::move(r.content), std::move(r.reasoning_content), {}};
    for (auto& c : r.tool_calls) out.tool_calls.push_back({c.id, c.name, c.arguments_json});
    return out;
  }
  int64_t vocab_size() const override { return tok_->vocab_size(); }
  int32_t eos_id() const override { return tok_->eos_id(); }
  engine::DetokenizerFactory detokenizer_factory() const override {
    auto tok = tok_;
    return [tok](bool skip) { return std::make_unique<TokenizerDetokenizer>(tok, skip); };
  }
  std::string name() const override { return "deepseek"; }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
};

}  // namespace

std::unique_ptr<TextCodec> make_tokenizer_codec(const std::string& path) {
  return std::make_unique<TokenizerCodec>(tokenizer::Tokenizer::from_file(path));
}

}  // namespace dsv4::server
