// Hugging Face tokenizer.json (byte-level BPE) and the chat template of the Qwen family.
//
// Algorithm sources: Hugging Face tokenizers (normalizers::NFC, pre_tokenizers::Split + ByteLevel,
// models::BPE with merges ranked by order, decoders::ByteLevel, AddedVocabulary splitting of special
// tokens before normalisation); GPT-2 byte-to-unicode table (openai/gpt-2 encoder.py).
//
// Supported tokenizer.json (anything else is rejected by from_file with the file and the reason):
//   normalizer     null, NFC, or Sequence of NFC
//   pre_tokenizer  Sequence[Split(Regex = the Qwen2/Qwen3 or Llama-3 pattern, Isolated, invert=false),
//                  ByteLevel(add_prefix_space=false, use_regex=false)]   (engine/tokenizer/pretokenizer.hpp)
//   model          BPE: vocab, merges as "a b" or ["a", "b"], ignore_merges; no byte_fallback, dropout,
//                  continuing_subword_prefix or end_of_word_suffix
//   decoder        null or ByteLevel
//   added_tokens   special and non-special, with single_word / lstrip / rstrip / normalized
// Parity with tokenizers 0.23.2 is tested on real documents and every code point
// (tests/tokenizer). Known differences, both confined to characters few texts contain: NFC handles
// the characters of Unicode 9.0, as the reference's normaliser does; the regex classes \p{L}, \p{N},
// \s come from Unicode 15.0 where the reference has 16.0 (characters new in 16.0 count as "other").
//
// Thread safety: a loaded Tokenizer is immutable apart from an internal, locked word cache; all
// const methods may be called from several threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/types.hpp"

namespace quarry::engine {


/// One chat message: role is "system", "user", "assistant" or "tool".
struct ChatMessage {
  std::string role;
  std::string content;
};

class Tokenizer {
 public:
  /// Loads tokenizer.json (and, if present beside it, tokenizer_config.json for eos / chat settings).
  /// Throws std::runtime_error naming the file and the reason on a missing or malformed file or an
  /// unsupported model / pre-tokenizer type.
  static std::shared_ptr<const Tokenizer> from_file(const std::filesystem::path& tokenizer_json);

  /// Loads `dir/tokenizer.json` (+ tokenizer_config.json).
  static std::shared_ptr<const Tokenizer> from_dir(const std::filesystem::path& dir);

  virtual ~Tokenizer() = default;

  /// Same ids as Hugging Face `Tokenizer.encode(text, add_special_tokens=False).ids`: added tokens
  /// (e.g. <|im_start|>) found in the text become their ids; the rest is NFC-normalised,
  /// pre-tokenized and BPE-merged. Invalid UTF-8 is replaced by U+FFFD first.
  virtual std::vector<TokenId> encode(std::string_view text) const = 0;

  /// Concatenated bytes of the tokens (special tokens included unless skip_special). May end in an
  /// incomplete UTF-8 sequence; use StreamDecoder for streaming.
  virtual std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const = 0;

  /// The raw bytes a token stands for (byte-level decoded; for added tokens, their content).
  virtual const std::string& token_bytes(TokenId id) const = 0;

  /// Number of ids (base vocab + added tokens); ids are 0..vocab_size()-1, gaps have empty bytes.
  virtual std::size_t vocab_size() const = 0;

  virtual bool is_special(TokenId id) const = 0;
  virtual std::optional<TokenId> token_to_id(std::string_view token_content) const = 0;

  /// Ids that end generation: tokenizer_config.json eos_token, config.json / generation_config.json
  /// eos_token_id, and for ChatML templates <|im_end|> and <|endoftext|> (e.g. {151645, 151643}).
  virtual const std::vector<TokenId>& eos_ids() const = 0;

  /// ChatML prompt as the Qwen3 chat template renders it with add_generation_prompt=true; with
  /// enable_thinking=false the assistant turn starts with an empty <think>\n\n</think>\n\n block.
  ///
  /// Renders what the chat_template of tokenizer_config.json renders for system / user / assistant /
  /// tool messages without tools (history: reasoning inside <think>...</think> of assistant turns is
  /// kept only after the last user query). Three template families are recognised from its text:
  /// Qwen3 hybrid (mentions enable_thinking: thinking off adds the empty think block), Qwen3
  /// thinking-only (e.g. Qwen3-*-Thinking-2507: the prompt always opens "<think>\n"; thinking off
  /// closes it at once, i.e. the reference render + "\n</think>\n\n"), and plain ChatML.
  /// Throws std::runtime_error if tokenizer_config.json had no ChatML template,
  /// std::invalid_argument on no messages or an unknown role.
  virtual std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt = true,
                                          bool enable_thinking = false) const = 0;
};

/// Turns a stream of token ids into UTF-8 text pieces, holding back an incomplete UTF-8 sequence
/// until the bytes that complete it arrive.
class StreamDecoder {
 public:
  explicit StreamDecoder(std::shared_ptr<const Tokenizer> tok, bool skip_special = true);
  /// Returns the text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  /// Returns what is left (incomplete bytes become U+FFFD).
  std::string finish();

 private:
  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace quarry::engine
