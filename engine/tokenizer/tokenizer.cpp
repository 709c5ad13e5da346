// Hugging Face tokenizer.json loader and encoder (byte-level BPE), decoder, Qwen chat template.
#include "engine/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "engine/tokenizer/bpe.hpp"
#include "engine/tokenizer/pretokenizer.hpp"
#include "engine/tokenizer/unicode.hpp"

namespace quarry::engine {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& reason) {
  throw std::runtime_error("tokenizer: " + file.string() + ": " + reason);
}

json read_json(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::parse_error& e) {
    fail(file, std::string("invalid JSON: ") + e.what());
  }
}

/// An entry of tokenizer.json "added_tokens".
struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

/// Leftmost-longest multi-pattern matcher over bytes (a trie; there are few added tokens).
class AddedTokenMatcher {
 public:
  void add(const std::string& pattern, std::size_t token_index) {
    if (pattern.empty()) return;
    std::size_t node = 0;
    for (const char ch : pattern) {
      const auto b = static_cast<unsigned char>(ch);
      auto it = nodes_[node].next.find(b);
      if (it == nodes_[node].next.end()) {
        nodes_.push_back(Node{});
        it = nodes_[node].next.emplace(b, nodes_.size() - 1).first;
      }
      node = it->second;
    }
    nodes_[node].token = static_cast<long>(token_index);
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  }
  bool empty() const { return nodes_.size() == 1; }
  /// Longest pattern starting at `pos`: (token index, length) or token index -1.
  std::pair<long, std::size_t> longest_at(std::string_view s, std::size_t pos) const {
    std::pair<long, std::size_t> best{-1, 0};
    if (!first_byte_[static_cast<unsigned char>(s[pos])]) return best;
    std::size_t node = 0;
    for (std::size_t i = pos; i < s.size(); ++i) {
      const auto it = nodes_[node].next.find(static_cast<unsigned char>(s[i]));
      if (it == nodes_[node].next.end()) break;
      node = it->second;
      if (nodes_[node].token >= 0) best = {nodes_[node].token, i + 1 - pos};
    }
    return best;
  }

 private:
  struct Node {
    std::map<unsigned char, std::size_t> next;
    long token = -1;
  };
  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};
};

/// A piece of the input: either an added token or text to normalize / pre-tokenize / merge.
struct Split {
  long token = -1;  // index into added_, or -1 for text
  std::size_t begin = 0, end = 0;
};

// Rust char predicates used by AddedVocabulary (tokenizers/src/tokenizer/added_vocabulary.rs).
bool is_alphanumeric(char32_t cp) {
  const unicode::Props p = unicode::props(cp);
  return p.is_alphabetic() || p.is_number();
}
bool is_whitespace(char32_t cp) { return unicode::props(cp).is_whitespace(); }

char32_t last_char(std::string_view s, std::size_t& start) {
  std::size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  // i is now the start of the last UTF-8 sequence (or of a stray continuation run).
  start = i;
  std::size_t j = i;
  return unicode::decode_utf8(s, j);
}

enum class ChatVariant { kNone, kPlainChatMl, kQwen3Hybrid, kQwen3ThinkingOnly };

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const std::filesystem::path& file, const json& j, const std::optional<json>& config,
              const std::filesystem::path& config_file, const std::optional<json>& model_config,
              const std::optional<json>& generation_config);

  std::vector<TokenId> encode(std::string_view text) const override;
  std::string decode(const std::vector<TokenId>& ids, bool skip_special) const override;
  const std::string& token_bytes(TokenId id) const override {
    static const std::string kEmpty;  // immutable
    if (id < 0 || static_cast<std::size_t>(id) >= bytes_.size()) return kEmpty;
    return bytes_[static_cast<std::size_t>(id)];
  }
  std::size_t vocab_size() const override { return bytes_.size(); }
  bool is_special(TokenId id) const override {
    return id >= 0 && static_cast<std::size_t>(id) < special_.size() && special_[static_cast<std::size_t>(id)];
  }
  std::optional<TokenId> token_to_id(std::string_view content) const override {
    for (const AddedToken& t : added_) {
      if (t.content == content) return t.id;
    }
    const auto it = vocab_.find(std::string(content));
    if (it != vocab_.end()) return it->second;
    return std::nullopt;
  }
  const std::vector<TokenId>& eos_ids() const override { return eos_; }
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                  bool enable_thinking) const override;

 private:
  std::vector<Split> find_matches(std::string_view s, const AddedTokenMatcher& matcher) const;
  void encode_text(std::string_view normalized, std::vector<TokenId>& out) const;
  std::string normalize(std::string_view s) const { return nfc_ ? unicode::nfc(s) : std::string(s); }

  std::filesystem::path file_;
  bool nfc_ = false;
  std::optional<RegexSplitter> splitter_;
  ByteLevelAlphabet alphabet_;
  std::unique_ptr<BpeModel> bpe_;
  std::unordered_map<std::string, TokenId> vocab_;  // byte-level token string -> id
  std::vector<AddedToken> added_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::vector<std::string> bytes_;
  std::vector<bool> special_;
  std::vector<TokenId> eos_;
  ChatVariant chat_ = ChatVariant::kNone;
};

bool get_bool(const json& obj, const char* key, bool dflt) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  return it->get<bool>();
}

bool null_or_empty_string(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

HfTokenizer::HfTokenizer(const std::filesystem::path& file, const json& j, const std::optional<json>& config,
                         const std::filesystem::path& config_file, const std::optional<json>& model_config,
                         const std::optional<json>& generation_config)
    : file_(file) {
  if (!j.is_object()) fail(file, "the top level is not a JSON object");
  // --- normalizer
  const json& norm = j.contains("normalizer") ? j["normalizer"] : json();
  auto add_normalizer = [&](const json& n) {
    const std::string type = n.value("type", "");
    if (type == "NFC") {
      nfc_ = true;
    } else {
      fail(file, "unsupported normalizer type '" + type + "' (supported: NFC, Sequence of NFC)");
    }
  };
  if (!norm.is_null()) {
    if (norm.value("type", "") == "Sequence") {
      for (const json& n : norm.at("normalizers")) add_normalizer(n);
    } else {
      add_normalizer(norm);
    }
  }
  // --- pre-tokenizer: Sequence[Split(regex, Isolated), ByteLevel(use_regex=false)]
  {
    const json& pt = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
    std::vector<json> steps;
    if (pt.is_object() && pt.value("type", "") == "Sequence") {
      for (const json& s : pt.at("pretokenizers")) steps.push_back(s);
    } else if (!pt.is_null()) {
      steps.push_back(pt);
    }
    bool byte_level = false;
    for (const json& s : steps) {
      const std::string type = s.value("type", "");
      if (type == "Split") {
        if (splitter_ || byte_level) fail(file, "unsupported pre_tokenizer: Split must come once, before ByteLevel");
        const json& pattern = s.at("pattern");
        if (!pattern.contains("Regex")) fail(file, "unsupported pre_tokenizer: Split with a String pattern");
        const std::string regex = pattern["Regex"].get<std::string>();
        splitter_ = RegexSplitter::for_pattern(regex);
        if (!splitter_) {
          fail(file, "unsupported pre_tokenizer Split regex '" + regex +
                         "' (supported: the Qwen2/Qwen3 and Llama-3 patterns)");
        }
        if (s.value("behavior", "") != "Isolated") fail(file, "unsupported Split behavior (supported: Isolated)");
        if (get_bool(s, "invert", false)) fail(file, "unsupported Split with invert=true");
      } else if (type == "ByteLevel") {
        if (get_bool(s, "add_prefix_space", false)) fail(file, "unsupported ByteLevel add_prefix_space=true");
        if (get_bool(s, "use_regex", true)) {
          fail(file, "unsupported ByteLevel use_regex=true (the GPT-2 split regex is not implemented)");
        }
        byte_level = true;
      } else {
        fail(file, "unsupported pre_tokenizer type '" + type + "' (supported: Sequence[Split, ByteLevel])");
      }
    }
    if (!byte_level) fail(file, "unsupported pre_tokenizer: a ByteLevel step is required (byte-level BPE only)");
  }
  // --- decoder
  if (j.contains("decoder") && !j["decoder"].is_null() && j["decoder"].value("type", "") != "ByteLevel") {
    fail(file, "unsupported decoder type '" + j["decoder"].value("type", "") + "' (supported: ByteLevel)");
  }
  // --- model
  if (!j.contains("model") || !j["model"].is_object()) fail(file, "no \"model\" object");
  const json& model = j["model"];
  if (model.value("type", "BPE") != "BPE") fail(file, "unsupported model type '" + model.value("type", "") + "'");
  if (get_bool(model, "byte_fallback", false)) fail(file, "unsupported BPE byte_fallback=true");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    fail(file, "unsupported BPE dropout");
  }
  if (!null_or_empty_string(model, "continuing_subword_prefix") || !null_or_empty_string(model, "end_of_word_suffix")) {
    fail(file, "unsupported BPE continuing_subword_prefix / end_of_word_suffix");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail(file, "model.vocab is missing or not an object");
  if (!model.contains("merges") || !model["merges"].is_array()) fail(file, "model.merges is missing or not an array");
  const bool ignore_merges = get_bool(model, "ignore_merges", false);

  std::size_t n_ids = 0;
  vocab_.reserve(model["vocab"].size() * 2);
  for (const auto& [tok, idj] : model["vocab"].items()) {
    if (!idj.is_number_integer() || idj.get<long long>() < 0 || idj.get<long long>() >= (1LL << 30)) {
      fail(file, "model.vocab['" + tok + "'] is not a valid id");
    }
    const auto id = idj.get<TokenId>();
    vocab_[tok] = id;
    n_ids = std::max(n_ids, static_cast<std::size_t>(id) + 1);
  }
  const json& added = j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"] : json::array();
  for (const json& a : added) {
    AddedToken t;
    t.content = a.at("content").get<std::string>();
    const long long id = a.at("id").get<long long>();
    if (id < 0 || id >= (1LL << 30)) fail(file, "added token '" + t.content + "' has an invalid id");
    t.id = static_cast<TokenId>(id);
    t.special = get_bool(a, "special", false);
    t.single_word = get_bool(a, "single_word", false);
    t.lstrip = get_bool(a, "lstrip", false);
    t.rstrip = get_bool(a, "rstrip", false);
    t.normalized = get_bool(a, "normalized", !t.special);
    added_.push_back(t);
    n_ids = std::max(n_ids, static_cast<std::size_t>(t.id) + 1);
  }

  // Token bytes (decoders::ByteLevel: a token whose characters are all in the byte alphabet becomes
  // those bytes; any other token stays its UTF-8 text).
  bytes_.assign(n_ids, std::string());
  special_.assign(n_ids, false);
  std::unordered_map<std::string, TokenId> raw_vocab;
  std::string raw;
  for (const auto& [tok, id] : vocab_) {
    if (!alphabet_.decode(tok, raw)) raw = tok;
    bytes_[static_cast<std::size_t>(id)] = raw;
    if (ignore_merges) raw_vocab.emplace(raw, id);
  }
  for (std::size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& t = added_[i];
    if (!alphabet_.decode(t.content, raw)) raw = t.content;
    bytes_[static_cast<std::size_t>(t.id)] = raw;
    special_[static_cast<std::size_t>(t.id)] = t.special;
    if (t.normalized) {
      normalized_matcher_.add(normalize(t.content), i);
    } else {
      raw_matcher_.add(t.content, i);
    }
  }

  std::array<TokenId, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, alphabet_.byte_to_cp[b]);
    const auto it = vocab_.find(s);
    byte_ids[b] = it == vocab_.end() ? -1 : it->second;
  }
  std::vector<std::array<TokenId, 3>> merges;
  merges.reserve(model["merges"].size());
  std::size_t rank = 0;
  for (const json& m : model["merges"]) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos) fail(file, "model.merges[" + std::to_string(rank) + "] '" + s + "' has no space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail(file, "model.merges[" + std::to_string(rank) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || ic == vocab_.end()) {
      fail(file, "model.merges[" + std::to_string(rank) + "] ('" + a + "', '" + b + "') uses a token not in the vocab");
    }
    merges.push_back({ia->second, ib->second, ic->second});
    ++rank;
  }
  bpe_ = std::make_unique<BpeModel>(byte_ids, merges, ignore_merges, std::move(raw_vocab));

  // --- eos ids and chat template (tokenizer_config.json, config.json, generation_config.json)
  auto add_eos = [&](TokenId id) {
    if (id >= 0 && static_cast<std::size_t>(id) < n_ids && std::find(eos_.begin(), eos_.end(), id) == eos_.end()) {
      eos_.push_back(id);
    }
  };
  auto add_eos_json = [&](const json& v) {
    if (v.is_number_integer()) add_eos(v.get<TokenId>());
    if (v.is_array()) {
      for (const json& e : v) {
        if (e.is_number_integer()) add_eos(e.get<TokenId>());
      }
    }
  };
  if (config) {
    if (!config->is_object()) fail(config_file, "the top level is not a JSON object");
    if (config->contains("eos_token")) {
      const json& e = (*config)["eos_token"];
      std::string content = e.is_string() ? e.get<std::string>() : e.is_object() ? e.value("content", "") : "";
      if (const auto id = token_to_id(content)) add_eos(*id);
    }
    const json tmpl = config->value("chat_template", json());
    std::string text;
    if (tmpl.is_string()) {
      text = tmpl.get<std::string>();
    } else if (tmpl.is_array()) {
      for (const json& t : tmpl) {
        if (t.value("name", "") == "default") text = t.value("template", "");
      }
    }
    if (text.find("<|im_start|>") != std::string::npos) {
      if (text.find("enable_thinking") != std::string::npos) {
        chat_ = ChatVariant::kQwen3Hybrid;
      } else if (text.find("<think>") != std::string::npos) {
        const auto gen = text.rfind("add_generation_prompt");
        chat_ = gen != std::string::npos && text.find("<think>", gen) != std::string::npos
                    ? ChatVariant::kQwen3ThinkingOnly
                    : ChatVariant::kQwen3Hybrid;
      } else {
        chat_ = ChatVariant::kPlainChatMl;
      }
    }
  }
  if (model_config && model_config->is_object() && model_config->contains("eos_token_id")) {
    add_eos_json((*model_config)["eos_token_id"]);
  }
  if (generation_config && generation_config->is_object() && generation_config->contains("eos_token_id")) {
    add_eos_json((*generation_config)["eos_token_id"]);
  }
  // ChatML models end a turn with <|im_end|> and a document with <|endoftext|>: both stop generation.
  if (chat_ != ChatVariant::kNone) {
    if (const auto id = token_to_id("<|im_end|>")) add_eos(*id);
    if (const auto id = token_to_id("<|endoftext|>")) add_eos(*id);
  }
}

std::vector<Split> HfTokenizer::find_matches(std::string_view s, const AddedTokenMatcher& matcher) const {
  std::vector<Split> splits;
  if (s.empty()) return splits;
  if (matcher.empty()) {
    splits.push_back(Split{-1, 0, s.size()});
    return splits;
  }
  std::size_t start_offset = 0;
  for (std::size_t pos = 0; pos < s.size();) {
    const auto [token, len] = matcher.longest_at(s, pos);
    if (token < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = added_[static_cast<std::size_t>(token)];
    std::size_t start = pos, stop = pos + len;
    pos = stop;
    if (t.single_word) {
      std::size_t unused;
      const bool start_space = start == 0 || !is_alphanumeric(last_char(s.substr(0, start), unused));
      std::size_t k = stop;
      const bool stop_space = stop == s.size() || !is_alphanumeric(unicode::decode_utf8(s, k));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      std::size_t new_start = start;
      while (new_start > 0) {
        std::size_t cstart;
        if (!is_whitespace(last_char(s.substr(0, new_start), cstart))) break;
        new_start = cstart;
      }
      start = std::max(new_start, start_offset);
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        std::size_t k = stop;
        if (!is_whitespace(unicode::decode_utf8(s, k))) break;
        stop = k;
      }
      pos = stop;
    }
    if (start_offset < start) splits.push_back(Split{-1, start_offset, start});
    splits.push_back(Split{token, start, stop});
    start_offset = stop;
  }
  if (start_offset < s.size()) splits.push_back(Split{-1, start_offset, s.size()});
  return splits;
}

void HfTokenizer::encode_text(std::string_view text, std::vector<TokenId>& out) const {
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  if (splitter_) {
    splitter_->split(text, pieces);
  } else {
    pieces.emplace_back(0, text.size());
  }
  for (const auto& [b, e] : pieces) bpe_->encode_word(text.substr(b, e - b), out);
}

std::vector<TokenId> HfTokenizer::encode(std::string_view input) const {
  const std::string text = unicode::utf8_lossy(input);
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  for (const Split& sp : find_matches(text, raw_matcher_)) {
    if (sp.token >= 0) {
      out.push_back(added_[static_cast<std::size_t>(sp.token)].id);
      continue;
    }
    const std::string normalized = normalize(std::string_view(text).substr(sp.begin, sp.end - sp.begin));
    for (const Split& sp2 : find_matches(normalized, normalized_matcher_)) {
      if (sp2.token >= 0) {
        out.push_back(added_[static_cast<std::size_t>(sp2.token)].id);
      } else {
        encode_text(std::string_view(normalized).substr(sp2.begin, sp2.end - sp2.begin), out);
      }
    }
  }
  return out;
}

std::string HfTokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::string out;
  for (const TokenId id : ids) {
    if (skip_special && is_special(id)) continue;
    out += token_bytes(id);
  }
  return out;
}

// Python str methods the Qwen3 template uses.
std::string strip_newlines(std::string s, bool left, bool right) {
  if (right) {
    while (!s.empty() && s.back() == '\n') s.pop_back();
  }
  if (left) {
    std::size_t i = 0;
    while (i < s.size() && s[i] == '\n') ++i;
    s.erase(0, i);
  }
  return s;
}
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

std::string HfTokenizer::apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                             bool enable_thinking) const {
  if (chat_ == ChatVariant::kNone) {
    throw std::runtime_error("tokenizer: " + file_.string() +
                             ": no ChatML chat template (tokenizer_config.json missing or without <|im_start|>)");
  }
  if (messages.empty()) throw std::invalid_argument("apply_chat_template: no messages");
  const bool qwen3 = chat_ == ChatVariant::kQwen3Hybrid || chat_ == ChatVariant::kQwen3ThinkingOnly;
  const std::size_t n = messages.size();
  std::string out;
  if (messages[0].role == "system") out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  // Index of the last user query that is not a tool response.
  std::size_t last_query = n - 1;
  for (std::size_t k = n; k-- > 0;) {
    const ChatMessage& m = messages[k];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    std::string content = m.content;
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n" + content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      if (!qwen3) {
        out += "<|im_start|>assistant\n" + content + "<|im_end|>\n";
        continue;
      }
      std::string reasoning;
      const auto close = content.find("</think>");
      if (close != std::string::npos) {
        reasoning = strip_newlines(content.substr(0, close), false, true);
        const auto open = reasoning.rfind("<think>");
        if (open != std::string::npos) reasoning = reasoning.substr(open + 7);
        reasoning = strip_newlines(reasoning, true, false);
        content = strip_newlines(content.substr(content.rfind("</think>") + 8), true, false);
      }
      if (i > last_query && (i == n - 1 || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" +
               strip_newlines(content, true, false);
      } else {
        out += "<|im_start|>assistant\n" + content;
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + content + "\n</tool_response>";
      if (i == n - 1 || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    } else if (m.role != "system") {
      throw std::invalid_argument("apply_chat_template: unknown role '" + m.role + "'");
    }
  }
  if (add_generation_prompt) {
    switch (chat_) {
      case ChatVariant::kQwen3Hybrid:
        out += enable_thinking ? "<|im_start|>assistant\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
        break;
      case ChatVariant::kQwen3ThinkingOnly:
        // The template always opens a think block; with thinking off quarry closes it empty.
        out += enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
        break;
      default:
        out += "<|im_start|>assistant\n";
    }
  }
  return out;
}

std::optional<json> read_optional(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  return read_json(file);
}

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  const json j = read_json(tokenizer_json);
  const auto dir = tokenizer_json.parent_path();
  const auto config_file = dir / "tokenizer_config.json";
  const auto config = read_optional(config_file);
  const auto model_config = read_optional(dir / "config.json");
  const auto generation_config = read_optional(dir / "generation_config.json");
  try {
    return std::make_shared<HfTokenizer>(tokenizer_json, j, config, config_file, model_config, generation_config);
  } catch (const json::exception& e) {
    fail(tokenizer_json, std::string("malformed content: ") + e.what());
  }
}

std::shared_ptr<const Tokenizer> Tokenizer::from_dir(const std::filesystem::path& dir) {
  return from_file(dir / "tokenizer.json");
}

StreamDecoder::StreamDecoder(std::shared_ptr<const Tokenizer> tok, bool skip_special)
    : tok_(std::move(tok)), skip_special_(skip_special) {}

std::string StreamDecoder::push(TokenId id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  const std::size_t keep = unicode::incomplete_utf8_tail(pending_);
  std::string out = unicode::utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = unicode::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace quarry::engine
