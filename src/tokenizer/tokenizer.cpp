#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4::tokenizer {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  DSV4_CHECK(in.good(), "cannot open ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}.
std::string config_token(const nlohmann::json& config, const char* key, const char* fallback) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return fallback;
  const auto& v = config[key];
  return v.is_string() ? v.get<std::string>() : v.at("content").get<std::string>();
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  const std::string json = read_file(path);
  const auto config_path = path.parent_path() / "tokenizer_config.json";
  const std::string config = std::filesystem::exists(config_path) ? read_file(config_path) : "";
  try {
    return from_json(json, config);
  } catch (const dsv4::Error& e) {
    DSV4_FAIL("loading tokenizer ", path.string(), ": ", e.what());
  }
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(tokenizer_json);
  } catch (const nlohmann::json::exception& e) {
    DSV4_FAIL("tokenizer.json is not valid JSON: ", e.what());
  }
  Tokenizer t;
  try {
    const auto& norm = j.value("normalizer", nlohmann::json());
    DSV4_CHECK(norm.is_null() || (norm.value("type", "") == "Sequence" &&
                                  norm.value("normalizers", nlohmann::json::array()).empty()),
               "normalizer ", norm.dump(), " is not supported (only none or an empty Sequence)");
    t.added_ = std::make_unique<AddedVocabulary>(j.value("added_tokens", nlohmann::json()));
    t.pre_tokenizer_ = std::make_unique<PreTokenizer>(j.value("pre_tokenizer", nlohmann::json()));
    t.model_ = std::make_unique<BpeModel>(j.at("model"));
    const auto& dec = j.value("decoder", nlohmann::json());
    DSV4_CHECK(dec.is_null() || dec.value("type", "") == "ByteLevel", "decoder ",
               dec.value("type", "?"), " is not supported (only ByteLevel)");
  } catch (const nlohmann::json::exception& e) {
    DSV4_FAIL("tokenizer.json has an unexpected layout: ", e.what());
  }

  int32_t max_id = static_cast<int32_t>(t.model_->tokens().size()) - 1;
  for (const auto& a : t.added_->tokens()) max_id = std::max(max_id, a.id);
  t.vocab_size_ = max_id + 1;
  t.id_bytes_.assign(t.vocab_size_, std::string());
  t.id_special_.assign(t.vocab_size_, 0);
  const auto& tokens = t.model_->tokens();
  for (size_t id = 0; id < tokens.size(); ++id) t.id_bytes_[id] = byte_level_decode(tokens[id]);
  for (const auto& a : t.added_->tokens()) {  // added tokens win over the vocab (HF order)
    t.id_bytes_[a.id] = byte_level_decode(a.content);
    t.id_special_[a.id] = a.special ? 1 : 0;
  }

  nlohmann::json config;
  if (!config_json.empty()) {
    config = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  }
  const std::string bos = config_token(config, "bos_token", "<｜begin▁of▁sentence｜>");
  const std::string eos = config_token(config, "eos_token", "<｜end▁of▁sentence｜>");
  t.bos_id_ = t.token_to_id(bos).value_or(-1);
  t.eos_id_ = t.token_to_id(eos).value_or(-1);
  DSV4_CHECK(t.eos_id_ >= 0, "eos token '", eos, "' is not in the tokenizer");
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, out);
  return out;
}

void Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  DSV4_CHECK(text.size() < (1ull << 32) - 1, "text of ", text.size(), " bytes is too long to encode");
  thread_local std::vector<Segment> segments;
  thread_local std::vector<Piece> pieces;
  added_->split(text, segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    const std::string_view chunk = text.substr(s.begin, s.length);
    pre_tokenizer_->split(chunk, pieces);
    for (const Piece& p : pieces) model_->encode_word(chunk.substr(p.begin, p.length), out);
  }
}

std::string_view Tokenizer::token_bytes(int32_t id, bool skip_special_tokens) const {
  if (id < 0 || id >= vocab_size_) return {};
  if (skip_special_tokens && id_special_[id]) return {};
  return id_bytes_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) bytes += token_bytes(id, skip_special_tokens);
  return is_valid_utf8(bytes) ? bytes : to_valid_utf8(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = added_->find(token)) return a->id;
  const auto it = model_->vocab().find(std::string(token));
  if (it != model_->vocab().end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  for (const auto& a : added_->tokens()) {
    if (a.id == id) return a.content;
  }
  const auto& tokens = model_->tokens();
  return static_cast<size_t>(id) < tokens.size() ? tokens[id] : std::string();
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size_ && id_special_[id] != 0;
}

void Tokenizer::check_model_vocab(int64_t model_vocab_size) const {
  DSV4_CHECK(vocab_size_ <= model_vocab_size, "tokenizer produces ids up to ", vocab_size_ - 1,
             " but the model's embedding has only ", model_vocab_size,
             " rows (tokenizer and config.json vocab_size disagree)");
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  pending_ += tokenizer_->token_bytes(id, skip_special_tokens_);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step st = utf8_step(std::string_view(pending_).substr(i));
    if (st.kind == Utf8Step::kIncomplete) break;  // wait for more bytes
    if (st.kind == Utf8Step::kValid) {
      out.append(pending_, i, st.length);
    } else {
      out += kReplacementChar;
    }
    i += st.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacementChar);
  pending_.clear();
  return out;
}

}  // namespace dsv4::tokenizer
