// Token-level constrained decoding: vocabulary preprocessing (TokenizerInfo), compiled grammars with
// token-mask caches (CompiledGrammar, GrammarCompiler) and the per-sequence matcher (GrammarMatcher).
//
// Sources: XGrammar (Dong et al. 2024): sorted vocabulary walked as a trie with shared prefixes,
// adaptive token mask cache (per grammar position: tokens accepted / rejected whatever the stack holds
// are precomputed; the context-dependent rest is checked against the real stack at run time),
// persistent stack and rollback; Outlines (Willard & Louf 2023): masks from an automaton over tokens;
// llguidance: byte-level lexing, masks computed from the parser state on demand.
//
// Token bitmask layout: uint32 words, bit (i % 32) of word (i / 32) set = token id i allowed;
// (vocab_size + 31) / 32 words.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.hpp"
#include "engine/grammar/json_schema.hpp"

namespace quarry::engine {
class Tokenizer;
}

namespace quarry::engine::grammar {

using TokenId = std::int32_t;

/// The vocabulary as the grammar sees it, preprocessed once per tokenizer (sorted byte strings and
/// their common-prefix lengths = a trie in array form). Immutable; share it.
class TokenizerInfo {
 public:
  /// token_bytes[i] = raw bytes of token id i (empty for unused ids). eos_ids end generation.
  /// special_ids (non-EOS control tokens such as <|im_start|>) are never allowed by a grammar.
  TokenizerInfo(std::vector<std::string> token_bytes, std::vector<TokenId> eos_ids,
                std::vector<TokenId> special_ids = {});

  /// From the engine tokenizer: token_bytes() of every id, its EOS ids, its special tokens excluded.
  static std::shared_ptr<const TokenizerInfo> from_tokenizer(const Tokenizer& tok);

  std::size_t vocab_size() const { return tokens_.size(); }
  std::size_t mask_words() const { return (tokens_.size() + 31) / 32; }
  const std::string& token(TokenId id) const { return tokens_[static_cast<std::size_t>(id)]; }
  const std::vector<TokenId>& eos_ids() const { return eos_; }
  bool is_eos(TokenId id) const { return id >= 0 && static_cast<std::size_t>(id) < kind_.size() && kind_[id] == kEos; }
  /// Tokens a grammar may allow (non-empty, not special, not EOS), sorted by bytes.
  const std::vector<TokenId>& sorted_ids() const { return sorted_; }
  /// lcp()[k] = common prefix length of sorted_ids()[k-1] and sorted_ids()[k] (lcp()[0] = 0).
  const std::vector<std::uint16_t>& lcp() const { return lcp_; }
  std::size_t max_token_len() const { return max_len_; }
  /// Bytes of the k-th token in sorted order, contiguous in memory (the walk reads them in order).
  std::string_view sorted_token(std::size_t k) const {
    return {sorted_blob_.data() + sorted_off_[k], sorted_off_[k + 1] - sorted_off_[k]};
  }
  bool is_regular(TokenId id) const { return id >= 0 && static_cast<std::size_t>(id) < kind_.size() && kind_[id] == kRegular; }

 private:
  enum Kind : std::uint8_t { kRegular, kEos, kSpecial, kEmpty };
  std::vector<std::string> tokens_;
  std::vector<TokenId> eos_;
  std::vector<std::uint8_t> kind_;
  std::vector<TokenId> sorted_;
  std::vector<std::uint16_t> lcp_;
  std::string sorted_blob_;
  std::vector<std::uint32_t> sorted_off_;
  std::size_t max_len_ = 0;
};

/// Counters of one compiled grammar (atomic; read at any time).
struct MaskCacheStats {
  std::uint64_t hits = 0, misses = 0, node_tables = 0;
};

/// A grammar bound to a vocabulary, with the token-mask caches. Immutable from the outside and
/// shareable across threads: the caches fill lazily under a lock.
class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenizerInfo> tok,
                  SchemaCompileResult meta = {});
  ~CompiledGrammar();
  const Grammar& grammar() const { return *grammar_; }
  std::shared_ptr<const Grammar> grammar_ptr() const { return grammar_; }
  const TokenizerInfo& tokenizer() const { return *tok_; }
  const SchemaCompileResult& meta() const { return meta_; }
  MaskCacheStats stats() const;

  /// Fills `mask` (mask_words() words) for the parser state `st` of `parser` (whose pool owns the
  /// state's stacks). Uses the per-state cache, else the per-node adaptive cache plus run-time checks.
  void fill_mask(Parser& parser, const ParseState& st, std::uint32_t* mask) const;
  /// Reference implementation: walks the whole sorted vocabulary from the state (no caches).
  void fill_mask_walk(Parser& parser, const ParseState& st, std::uint32_t* mask) const;
  /// Precomputes the per-node adaptive tables for every reachable node (otherwise built lazily).
  void warm_up() const;

 private:
  struct NodeTable;
  const NodeTable& node_table(std::uint32_t node) const;
  void build_node_table(std::uint32_t node, NodeTable& t) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenizerInfo> tok_;
  SchemaCompileResult meta_;
  struct StateCache;
  std::unique_ptr<StateCache> state_cache_;
  struct NodeCache;
  std::unique_ptr<NodeCache> node_cache_;
  mutable std::atomic<std::uint64_t> hits_{0}, misses_{0};
};

/// Compiles JSON Schemas for one vocabulary; results are cached by (schema text, options) hash.
/// Thread-safe.
class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const TokenizerInfo> tok, std::size_t max_cached = 64);
  /// Throws SchemaError (see compile_json_schema).
  std::shared_ptr<const CompiledGrammar> compile_json_schema(std::string_view schema_text,
                                                             const SchemaOptions& options = {});

 private:
  std::shared_ptr<const TokenizerInfo> tok_;
  std::size_t max_cached_;
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const CompiledGrammar>> cache_;
};

/// Per-sequence matcher: what the sampler needs. Not thread-safe (one per sequence).
///
/// Token-boundary policy for jump-forward: jump_forward() returns the bytes the grammar forces
/// next (it does not change the state), cut at the last complete UTF-8 character. The caller
/// encodes them with the tokenizer and feeds the tokens through accept() (or the bytes through
/// accept_string()); because the model would often have produced a different tokenization across
/// the boundary, the engine should keep the forced text as prompt for the next forward (as
/// SGLang's jump-forward does), never splice partial tokens.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> g);

  /// Advances by one token. EOS is accepted only where the grammar may end (then the matcher is
  /// terminated). Returns false (state unchanged) for an illegal token.
  bool accept(TokenId id);
  /// Advances by raw bytes (e.g. a jump-forward string); counts as one step for rollback.
  bool accept_string(std::string_view bytes);
  /// Undoes the last n accepted steps (tokens / strings); n larger than the history -> reset.
  void rollback(std::size_t n);
  void reset();
  /// True after EOS was accepted.
  bool is_terminated() const { return terminated_; }
  /// True if the text so far is a complete value (EOS would be accepted).
  bool can_terminate() const { return !terminated_ && history_.back().can_end; }
  /// Writes the token bitmask of the next token into mask (at least mask_words() words; extra words
  /// are zeroed). After termination only the EOS ids are set. Throws std::invalid_argument if the
  /// span is too small.
  void fill_bitmask(std::span<std::uint32_t> mask);
  /// Same result as fill_bitmask, computed by walking the whole vocabulary from the state without
  /// any cache (the reference the caches are tested against; milliseconds per call).
  void fill_bitmask_uncached(std::span<std::uint32_t> mask);
  /// The bytes forced next (empty if there is a choice or the value may end here).
  std::string jump_forward() const;
  std::size_t num_steps() const { return history_.size() - 1; }
  const CompiledGrammar& compiled() const { return *g_; }
  /// Current parser state (for tests / diagnostics).
  const ParseState& state() const { return history_.back(); }

 private:
  std::shared_ptr<const CompiledGrammar> g_;
  mutable Parser parser_;
  std::vector<ParseState> history_;
  bool terminated_ = false;
  ParseState tmp_a_, tmp_b_;
};

}  // namespace quarry::engine::grammar
