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

#include <algorithm>
#include <array>
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
#include "engine/grammar/grounding.hpp"
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

  /// The sorted vocabulary as an explicit byte trie in depth-first (= sorted) order, with per-subtree
  /// summaries that let a mask walk decide whole subtrees at once. Node 0 is the root (empty prefix).
  /// The children of node v are v + 1, trie()[v + 1].next, ... up to trie()[v].next.
  struct TrieNode {
    std::uint32_t lo = 0, hi = 0;  ///< tokens of the subtree: sorted positions [lo, hi)
    std::uint32_t next = 0;        ///< first node after this subtree
    std::uint32_t skip_plain = 0;  ///< first sibling at or after this node that is not kAllPlain (else the parent's next)
    std::uint16_t depth = 0;       ///< prefix length in bytes
    std::uint8_t byte = 0;         ///< edge byte into the node (its prefix's last byte)
    std::uint8_t flags = 0;        ///< kAllPlain | kSuffixUtf8 | kSuffixNonAscii | kHasToken
    std::uint8_t max_chars = 0;    ///< max code points of a token in the subtree (255 = more)
    std::uint8_t suffix_max_chars = 0;  ///< max code points of the edge-inclusive suffixes (see below)
    std::uint8_t suffix_min_chars = 0;  ///< min code points of the edge-inclusive suffixes
    std::uint8_t max_len = 0;           ///< max bytes of a token in the subtree (255 = more)
    std::uint64_t suffix_ascii[2] = {0, 0};  ///< ASCII bytes occurring in the edge-inclusive suffixes
  };
  /// Every token of the subtree is plain text: complete valid UTF-8 without '"', '\\' or bytes
  /// below 0x20 or 0x7F (what a free JSON string body accepts unescaped).
  static constexpr std::uint8_t kAllPlain = 1;
  /// The edge-inclusive suffixes (token bytes from depth - 1 on) are all complete valid UTF-8.
  static constexpr std::uint8_t kSuffixUtf8 = 2;
  /// Some edge-inclusive suffix holds a byte >= 0x80.
  static constexpr std::uint8_t kSuffixNonAscii = 4;
  /// A token ends at this node (its bytes are the node's prefix).
  static constexpr std::uint8_t kHasToken = 8;
  /// Read after the parent's prefix (whose UTF-8 may end inside a character), every edge-inclusive
  /// suffix continues as valid UTF-8 that may itself end inside a character.
  static constexpr std::uint8_t kPathUtf8Prefix = 16;
  /// Every edge-inclusive suffix is plain ASCII text (no '"' or '\\') up to a control byte (below
  /// 0x20), which suffix_ascii[0] then includes: a grammar position whose reachable text nodes take
  /// none of those control bytes rejects the whole subtree (the whitespace and code tokens ending
  /// in a newline or tab, at a string position).
  static constexpr std::uint8_t kCtlAfterAscii = 32;
  const std::vector<TrieNode>& trie() const { return trie_; }
  /// The same over the tokens that are not plain text only (a few percent of a vocabulary); its
  /// TrieNode::lo / hi index nonplain_positions(), which holds sorted positions.
  const std::vector<TrieNode>& nonplain_trie() const { return nonplain_trie_; }
  const std::vector<std::uint32_t>& nonplain_positions() const { return nonplain_pos_; }
  /// Token id bitset (mask_words() words) of the tokens that are not plain text.
  const std::uint32_t* nonplain_mask() const { return nonplain_mask_.data(); }
  /// The sorted positions of the non-plain tokens, longest first.
  const std::vector<std::uint32_t>& nonplain_by_length() const { return nonplain_by_len_; }
  /// Token id bitset (mask_words() words) of the plain tokens with at most c code points,
  /// c <= max_plain_chars() (cumulative: plain_upto(c) includes plain_upto(c - 1)).
  const std::uint32_t* plain_upto(std::size_t c) const {
    return plain_upto_.data() + std::min(c, max_plain_chars_) * mask_words();
  }
  std::size_t max_plain_chars() const { return max_plain_chars_; }
  /// Code points of the k-th token in sorted order (bytes that are not UTF-8 continuation bytes).
  std::uint8_t sorted_chars(std::size_t k) const { return sorted_chars_[k]; }
  /// Tokens of at least kLongToken bytes: their sorted positions (increasing) and the common prefix
  /// length of each with the previous one of this list (node tables derived from a similar node
  /// walk only these again; see CompiledGrammar).
  static constexpr std::size_t kLongToken = 24;
  const std::vector<std::uint32_t>& long_positions() const { return long_pos_; }
  const std::vector<std::uint16_t>& long_lcp() const { return long_lcp_; }

 private:
  void build_trie();
  std::vector<TrieNode> build_nodes(const std::vector<std::uint32_t>* pos, const std::vector<std::uint8_t>& plain,
                                    const std::vector<std::uint8_t>& chars) const;
  enum Kind : std::uint8_t { kRegular, kEos, kSpecial, kEmpty };
  std::vector<std::string> tokens_;
  std::vector<TokenId> eos_;
  std::vector<std::uint8_t> kind_;
  std::vector<TokenId> sorted_;
  std::vector<std::uint16_t> lcp_;
  std::string sorted_blob_;
  std::vector<std::uint32_t> sorted_off_;
  std::size_t max_len_ = 0;
  std::vector<TrieNode> trie_;
  std::vector<std::uint32_t> plain_upto_;
  std::vector<std::uint8_t> sorted_chars_;
  std::vector<TrieNode> nonplain_trie_;
  std::vector<std::uint32_t> nonplain_pos_;
  std::vector<std::uint32_t> nonplain_mask_;
  std::vector<std::uint32_t> nonplain_by_len_;
  std::size_t max_plain_chars_ = 0;
  std::vector<std::uint32_t> long_pos_;
  std::vector<std::uint16_t> long_lcp_;
};

/// Counters of one compiled grammar (atomic; read at any time).
struct MaskCacheStats {
  std::uint64_t hits = 0, misses = 0, node_tables = 0;
  std::uint64_t derived_tables = 0;  ///< node tables derived from a similar node's (kTrie)
};

/// How the per-node adaptive mask tables are built.
enum class NodeTableMode {
  /// Walk of the vocabulary trie that decides whole subtrees at once (the default; see
  /// CompiledGrammar::fill_mask).
  kTrie,
  /// Walk over the whole sorted vocabulary, token by token with shared prefixes (the earlier
  /// implementation; kept as the bench baseline and a test reference).
  kFullWalk,
  /// The trie walk with one table per grammar node (kTrie shares one table between nodes of the
  /// same description: rule end, calls, byte edges and their targets); the test reference for it.
  kTrieUnshared,
};

/// A grammar bound to a vocabulary, with the token-mask caches. Immutable from the outside and
/// shareable across threads: the caches fill lazily under a lock.
///
/// Node tables (XGrammar's adaptive token mask cache, built on first use of a grammar position):
/// tokens accepted from the position whatever the stack holds, and the context-dependent ones
/// (which run past the end of the position's rule) left for a run-time check. They are built by a
/// walk of the vocabulary trie that settles whole subtrees without visiting them:
///  - plain text (complete UTF-8 without '"', '\\', controls): from the position, a per-node
///    analysis of the byte grammar over code points gives B = the length up to which every plain
///    string is accepted and L = the longest accepted plain string; plain tokens of at most B code
///    points come from a bitset precomputed per tokenizer, and when L == B (and no rule end is
///    reachable on the way) every other plain token is rejected: only subtrees holding non-plain
///    tokens are walked. This covers free text and length-bounded strings (where every position
///    would otherwise need a full walk).
///  - character-class runs: at a trie node reached in a single-thread state, if every character of
///    every token suffix below lies in a set the grammar accepts at each step (per-node analysis,
///    up to 32 code points), the subtree is accepted in one step.
///  - uniform character classes: when the text strings accepted from the position are exactly the
///    strings of at most L <= 32 characters over one class (every reachable text edge lies in the
///    class), the plain tokens come from a per-class bitset by code point count (built once per
///    class), and only the non-plain tokens are walked.
///  - inside a multibyte character: when every completion of the character leads from the single
///    thread to one node, the subtree is decided from that node's analysis as above.
///  - ASCII text ending in a control byte (TokenizerInfo::kCtlAfterAscii: whitespace and code tokens
///    ending in a newline or tab): rejected in one step when no node reachable through text takes
///    the control byte (every string position).
/// Grammar nodes with the same rule end, calls and byte edges (same targets) share one table
/// (NodeTableMode::kTrie; kTrieUnshared builds one per node). In kTrie, a node that agrees with an
/// already built node of the same shape on every byte string shorter than k bytes (bounded
/// bisimulation, similar_depth; the positions of a length counter: maxLength strings, the email
/// domain label) gets a table derived from that node's: at a free-text or character-class position
/// the non-plain tokens shorter than k <= 16 bytes are copied and only the subtrees of the non-plain
/// trie with longer tokens are walked; elsewhere (the email label) the tokens of kLongToken bytes or
/// more are walked again with the parser.
/// Context-dependent tokens are kept with the offset of their rule end, and checked per thread
/// against the state after popping the thread's stack, once per distinct continuation.
class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenizerInfo> tok,
                  SchemaCompileResult meta = {}, NodeTableMode mode = NodeTableMode::kTrie);
  ~CompiledGrammar();
  const Grammar& grammar() const { return *grammar_; }
  std::shared_ptr<const Grammar> grammar_ptr() const { return grammar_; }
  const TokenizerInfo& tokenizer() const { return *tok_; }
  const SchemaCompileResult& meta() const { return meta_; }
  MaskCacheStats stats() const;

  /// Fills `mask` (mask_words() words) for the parser state `st` of `parser` (whose pool owns the
  /// state's stacks). Uses the per-state cache, else the per-node adaptive cache plus run-time checks.
  /// A new state's mask is cached as its node tables plus the ids set on top of them (the string-
  /// closing tokens that passed the check), unless a short id list is smaller.
  void fill_mask(Parser& parser, const ParseState& st, std::uint32_t* mask) const;
  /// Reference implementation: walks the whole sorted vocabulary from the state (no caches).
  void fill_mask_walk(Parser& parser, const ParseState& st, std::uint32_t* mask) const;
  /// Precomputes the per-node adaptive tables for every reachable node (otherwise built lazily).
  void warm_up() const;

 private:
  struct NodeTable;
  const NodeTable& node_table(std::uint32_t node) const;
  /// Builds the table of `node`. With `base` (the table of a node y with similar_depth(node, y) >=
  /// k, and nonplain_walk(node)): the non-plain tokens shorter than k bytes are decided as in
  /// `base`, and only the subtrees of the non-plain trie holding longer ones are walked.
  void build_node_table(std::uint32_t node, NodeTable& t, const NodeTable* base = nullptr, std::size_t k = 0) const;
  void build_node_table_full(std::uint32_t node, NodeTable& t) const;
  /// The largest k <= cap such that nodes x and y accept the same byte strings of fewer than k
  /// bytes with the same rule ends on the way (bounded bisimulation over byte edges with identical
  /// calls, breadth first: each pair of nodes is compared once, at the depth where it is first
  /// reached). Gives up (returns the depth reached so far) after 4,096 pairs.
  std::size_t similar_depth(std::uint32_t x, std::uint32_t y, std::size_t cap) const;
  /// t = the table of node x from the table of a node y with similar_depth(x, y) >= kLongToken: the
  /// tokens shorter than kLongToken bytes are decided alike, the longer ones are walked from x.
  void derive_node_table(std::uint32_t x, const NodeTable& y, NodeTable& t) const;
  /// True if build_node_table walks only the non-plain trie from `node` (a single thread of byte
  /// edges at a free-text or uniform character-class position).
  bool nonplain_walk(std::uint32_t node) const;
  /// Sets in `mask` the context-dependent tokens of `t` (those that end the table's rule and go on)
  /// that the state after the rule end accepts, for a thread of that node with stack `stack` (!= 0).
  void check_rule_end(Parser& parser, std::uint32_t stack, const NodeTable& t, std::uint32_t* mask) const;
  struct NodeInfo;
  /// Code-point-level analysis of a grammar node (memoised; see the class comment).
  const NodeInfo& node_info(std::uint32_t node) const;
  /// Sets in `out` (mask_words() words) the plain tokens of at most `chars` code points (chars <= 32)
  /// whose characters all lie in the class (ASCII bytes ascii[0..1], every multibyte character if
  /// mb). The class's tokens, ordered by code point count, are found once per class by a walk of the
  /// vocabulary trie, then memoised.
  void class_tokens(const std::uint64_t ascii[2], bool mb, std::size_t chars, std::uint32_t* out) const;
  struct ClassCache;
  std::unique_ptr<ClassCache> class_cache_;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenizerInfo> tok_;
  SchemaCompileResult meta_;
  NodeTableMode mode_;
  struct InfoCache;
  std::unique_ptr<InfoCache> info_cache_;
  struct StateCache;
  std::unique_ptr<StateCache> state_cache_;
  struct NodeCache;
  std::unique_ptr<NodeCache> node_cache_;
  mutable std::atomic<std::uint64_t> hits_{0}, misses_{0}, derived_{0};
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

  /// Grounded decoding (grounding.hpp): from now on (the matcher is reset), the values of grounded
  /// schema locations (`x-quarry-source`) can only be what `index`'s document says; null turns it off.
  /// The mask at a position inside a grounded value is the grammar's AND GroundingIndex::inside_mask;
  /// at a position outside one, tokens starting with a byte that enters a grounded value are filtered by
  /// GroundingIndex::entry_mask. Tokens that enter or leave a grounded value in their middle and go on
  /// (GroundingVocab::entry_candidates, GroundMask::exact) are checked byte by byte with the parser.
  /// A GroundState is kept per accepted step, so rollback() restores it with the parser state;
  /// jump_forward() stops before the first byte of a grounded value.
  void set_grounding(std::shared_ptr<const GroundingIndex> index);
  bool grounded() const { return ground_ != nullptr; }
  /// The grounding state after the last accepted step (kind 0 outside a grounded value).
  const GroundState& ground_state() const { return gstates_.back(); }
  const CompiledGrammar& compiled() const { return *g_; }
  /// Current parser state (for tests / diagnostics).
  const ParseState& state() const { return history_.back(); }

 private:
  std::shared_ptr<const CompiledGrammar> g_;
  mutable Parser parser_;
  std::vector<ParseState> history_;
  bool terminated_ = false;
  ParseState tmp_a_, tmp_b_;
  // Grounding (set_grounding): one GroundState per entry of history_.
  std::shared_ptr<const GroundingIndex> ground_;
  std::vector<GroundState> gstates_;
  ParseState tmp_c_, tmp_d_;
  std::vector<std::uint32_t> grammar_mask_;  // fill_bitmask scratch
  /// The kind of grounded value some thread of `s` is inside (0: none).
  std::uint8_t region_kind(const ParseState& s) const;
  /// entry[b] = kind of the grounded value that byte b enters from `s`; false if none.
  bool entry_bytes(const ParseState& s, std::array<std::uint8_t, 256>& entry) const;
  /// Runs `bytes` from (from, g) with the parser and the grounding state; false if either rejects.
  /// On success `to` / `g` hold the states after them.
  bool advance_grounded(const ParseState& from, GroundState& g, std::string_view bytes, ParseState& to);
  /// Clears in mask the ids of `ids` it holds that advance_grounded rejects from the current state.
  void check_exact(const std::vector<TokenId>& ids, std::uint32_t* mask);
};

}  // namespace quarry::engine::grammar
