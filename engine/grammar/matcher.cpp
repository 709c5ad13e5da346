// Token masks and the per-sequence matcher. See matcher.hpp for the design and sources.
#include "engine/grammar/matcher.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <stdexcept>

#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::engine::grammar {

// ---------------------------------------------------------------------------------------------
// TokenizerInfo
// ---------------------------------------------------------------------------------------------

TokenizerInfo::TokenizerInfo(std::vector<std::string> token_bytes, std::vector<TokenId> eos_ids,
                             std::vector<TokenId> special_ids)
    : tokens_(std::move(token_bytes)), eos_(std::move(eos_ids)) {
  kind_.assign(tokens_.size(), kRegular);
  for (std::size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i].empty()) kind_[i] = kEmpty;
  for (TokenId s : special_ids)
    if (s >= 0 && static_cast<std::size_t>(s) < tokens_.size()) kind_[s] = kSpecial;
  for (TokenId e : eos_) {
    if (e < 0 || static_cast<std::size_t>(e) >= tokens_.size())
      throw std::invalid_argument("TokenizerInfo: EOS id " + std::to_string(e) + " outside the vocabulary");
    kind_[e] = kEos;
  }
  for (std::size_t i = 0; i < tokens_.size(); ++i)
    if (kind_[i] == kRegular) sorted_.push_back(static_cast<TokenId>(i));
  std::sort(sorted_.begin(), sorted_.end(), [&](TokenId a, TokenId b) { return tokens_[a] < tokens_[b]; });
  sorted_off_.push_back(0);
  for (TokenId id : sorted_) {
    sorted_blob_ += tokens_[id];
    sorted_off_.push_back(static_cast<std::uint32_t>(sorted_blob_.size()));
  }
  lcp_.assign(sorted_.size(), 0);
  for (std::size_t k = 0; k < sorted_.size(); ++k) {
    const std::string& t = tokens_[sorted_[k]];
    max_len_ = std::max(max_len_, t.size());
    if (k == 0) continue;
    const std::string& p = tokens_[sorted_[k - 1]];
    std::size_t l = 0;
    while (l < p.size() && l < t.size() && p[l] == t[l]) ++l;
    lcp_[k] = static_cast<std::uint16_t>(std::min<std::size_t>(l, 65535));
  }
}

std::shared_ptr<const TokenizerInfo> TokenizerInfo::from_tokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(tok.vocab_size());
  std::vector<TokenId> special;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto id = static_cast<TokenId>(i);
    bytes[i] = tok.token_bytes(id);
    if (tok.is_special(id)) special.push_back(id);
  }
  return std::make_shared<const TokenizerInfo>(std::move(bytes), tok.eos_ids(), std::move(special));
}

// ---------------------------------------------------------------------------------------------
// Vocabulary walk (prefix-sharing trie traversal over a byte-sorted token list)
// ---------------------------------------------------------------------------------------------

namespace {

struct Walker {
  std::vector<ParseState> st;
  std::vector<char> exitf;

  // Walks tokens given by positions in TokenizerInfo's sorted order (pos(i), increasing), with
  // lcp(i) = common prefix length of tokens i-1 and i of this list.
  // cb(i, accepted, exit_seen): exit_seen = the rule of the start node ended after >= 1 byte of the
  // token and the token went on (meaningful when the start state has an empty stack).
  template <class Pos, class Lcp, class Cb>
  void run(Parser& p, const ParseState& start, const TokenizerInfo& tok, std::size_t n, Pos&& pos, Lcp&& lcp,
           Cb&& cb) {
    if (st.size() < tok.max_token_len() + 1) {
      st.resize(tok.max_token_len() + 1);
      exitf.resize(tok.max_token_len() + 1);
    }
    st[0] = start;
    exitf[0] = 0;
    std::size_t valid = 0;
    for (std::size_t i = 0; i < n;) {
      std::string_view t = tok.sorted_token(pos(i));
      std::size_t d = std::min<std::size_t>(lcp(i), valid);
      bool ok = true;
      for (; d < t.size(); ++d) {
        if (!p.advance(st[d], static_cast<std::uint8_t>(t[d]), st[d + 1])) { ok = false; break; }
        exitf[d + 1] = exitf[d] || st[d + 1].can_end;
      }
      if (ok) {
        cb(i, true, false);
        valid = t.size();
        ++i;
        continue;
      }
      valid = d;
      bool ex = exitf[d];
      cb(i, false, ex);
      ++i;
      while (i < n && lcp(i) > d) cb(i++, false, ex);
    }
  }
};

inline void set_bit(std::uint32_t* m, TokenId id) { m[id >> 5] |= 1u << (id & 31); }
inline bool get_bit(const std::uint32_t* m, TokenId id) { return (m[id >> 5] >> (id & 31)) & 1u; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// CompiledGrammar
// ---------------------------------------------------------------------------------------------

struct CompiledGrammar::NodeTable {
  std::vector<std::uint32_t> accepted;   // bitset: accepted whatever the stack below holds
  std::vector<std::uint32_t> uncertain;  // positions in sorted_ids(): depends on the stack
};

struct CompiledGrammar::NodeCache {
  mutable std::shared_mutex mu;
  std::unordered_map<std::uint32_t, std::unique_ptr<NodeTable>> tables;
};

// A cached mask, stored compactly: the allowed ids when few are allowed, the disallowed ids when
// few are disallowed (string bodies), else the bitset.
struct StoredMask {
  enum Kind : std::uint8_t { kAllowedList, kDisallowedList, kBitset } kind = kBitset;
  std::vector<std::uint32_t> data;

  static StoredMask from(const std::uint32_t* mask, std::size_t words, std::size_t vocab) {
    StoredMask m;
    std::size_t ones = 0;
    for (std::size_t w = 0; w < words; ++w) ones += static_cast<std::size_t>(__builtin_popcount(mask[w]));
    std::size_t limit = words / 2;  // a list shorter than half the bitset
    if (ones <= limit) {
      m.kind = kAllowedList;
      for (std::size_t w = 0; w < words; ++w)
        for (std::uint32_t b = mask[w]; b; b &= b - 1) m.data.push_back(static_cast<std::uint32_t>(w * 32 + __builtin_ctz(b)));
    } else if (vocab - ones <= limit) {
      m.kind = kDisallowedList;
      for (std::size_t i = 0; i < vocab; ++i)
        if (!((mask[i >> 5] >> (i & 31)) & 1u)) m.data.push_back(static_cast<std::uint32_t>(i));
    } else {
      m.data.assign(mask, mask + words);
    }
    return m;
  }
  void restore(std::uint32_t* mask, std::size_t words, std::size_t vocab) const {
    switch (kind) {
      case kBitset: std::memcpy(mask, data.data(), words * sizeof(std::uint32_t)); break;
      case kAllowedList:
        std::memset(mask, 0, words * sizeof(std::uint32_t));
        for (std::uint32_t i : data) mask[i >> 5] |= 1u << (i & 31);
        break;
      case kDisallowedList:
        std::memset(mask, 0xFF, words * sizeof(std::uint32_t));
        if (vocab % 32) mask[words - 1] = (1u << (vocab % 32)) - 1;
        for (std::uint32_t i : data) mask[i >> 5] &= ~(1u << (i & 31));
        break;
    }
  }
  std::size_t bytes() const { return data.size() * sizeof(std::uint32_t) + 64; }
};

struct CompiledGrammar::StateCache {
  static constexpr std::size_t kMaxBytes = 256u << 20;  // cleared when it grows past 256 MiB
  mutable std::shared_mutex mu;
  std::unordered_map<std::string, StoredMask> masks;
  std::size_t bytes = 0;
};

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenizerInfo> tok,
                                 SchemaCompileResult meta)
    : grammar_(std::move(g)), tok_(std::move(tok)), meta_(std::move(meta)),
      state_cache_(std::make_unique<StateCache>()), node_cache_(std::make_unique<NodeCache>()) {
  if (!grammar_ || !tok_) throw std::invalid_argument("CompiledGrammar: null grammar or tokenizer");
  meta_.grammar = grammar_;
}

CompiledGrammar::~CompiledGrammar() = default;

MaskCacheStats CompiledGrammar::stats() const {
  MaskCacheStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  std::shared_lock lk(node_cache_->mu);
  s.node_tables = node_cache_->tables.size();
  return s;
}

void CompiledGrammar::fill_mask_walk(Parser& parser, const ParseState& st, std::uint32_t* mask) const {
  const TokenizerInfo& tok = *tok_;
  std::fill(mask, mask + tok.mask_words(), 0u);
  if (st.can_end)
    for (TokenId e : tok.eos_ids()) set_bit(mask, e);
  if (st.threads.empty()) return;
  Walker w;
  const auto& ids = tok.sorted_ids();
  const auto& lcp = tok.lcp();
  w.run(parser, st, tok, ids.size(), [](std::size_t k) { return k; }, [&](std::size_t k) { return lcp[k]; },
        [&](std::size_t k, bool ok, bool) {
          if (ok) set_bit(mask, ids[k]);
        });
}

void CompiledGrammar::build_node_table(std::uint32_t node, NodeTable& t) const {
  const TokenizerInfo& tok = *tok_;
  t.accepted.assign(tok.mask_words(), 0u);
  Parser local(*grammar_);
  std::vector<Thread> seeds{{node, 0}};
  ParseState start;
  local.close(seeds, start);
  start.can_end = false;  // an exit before the first byte is covered by the other threads of a state
  Walker w;
  const auto& ids = tok.sorted_ids();
  const auto& lcp = tok.lcp();
  w.run(local, start, tok, ids.size(), [](std::size_t k) { return k; }, [&](std::size_t k) { return lcp[k]; },
        [&](std::size_t k, bool ok, bool exit_seen) {
          if (ok) set_bit(t.accepted.data(), ids[k]);
          else if (exit_seen) t.uncertain.push_back(static_cast<std::uint32_t>(k));
        });
}

const CompiledGrammar::NodeTable& CompiledGrammar::node_table(std::uint32_t node) const {
  {
    std::shared_lock lk(node_cache_->mu);
    auto it = node_cache_->tables.find(node);
    if (it != node_cache_->tables.end()) return *it->second;
  }
  auto t = std::make_unique<NodeTable>();
  build_node_table(node, *t);
  std::unique_lock lk(node_cache_->mu);
  auto [it, inserted] = node_cache_->tables.emplace(node, std::move(t));
  return *it->second;
}

void CompiledGrammar::warm_up() const {
  // Every node that has byte edges can appear in a state.
  for (std::uint32_t n = 0; n < grammar_->nodes.size(); ++n)
    if (!grammar_->nodes[n].bytes.empty()) node_table(n);
}

void CompiledGrammar::fill_mask(Parser& parser, const ParseState& st, std::uint32_t* mask) const {
  const TokenizerInfo& tok = *tok_;
  const std::size_t words = tok.mask_words();
  // Per-state cache key: the threads' nodes with the content hashes of their stacks.
  std::string key;
  key.reserve(st.threads.size() * 12 + 1);
  key.push_back(st.can_end ? 1 : 0);
  for (const Thread& th : st.threads) {
    std::uint64_t h = parser.pool().hash(th.stack);
    key.append(reinterpret_cast<const char*>(&th.node), sizeof th.node);
    key.append(reinterpret_cast<const char*>(&h), sizeof h);
  }
  {
    std::shared_lock lk(state_cache_->mu);
    auto it = state_cache_->masks.find(key);
    if (it != state_cache_->masks.end()) {
      it->second.restore(mask, words, tok.vocab_size());
      hits_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  std::fill(mask, mask + words, 0u);
  std::vector<std::uint32_t> uncertain;
  std::uint32_t prev_node = UINT32_MAX;
  for (const Thread& th : st.threads) {
    if (th.node == prev_node) continue;  // threads are sorted by node
    prev_node = th.node;
    const NodeTable& t = node_table(th.node);
    for (std::size_t w = 0; w < words; ++w) mask[w] |= t.accepted[w];
    uncertain.insert(uncertain.end(), t.uncertain.begin(), t.uncertain.end());
  }
  if (!uncertain.empty()) {
    std::sort(uncertain.begin(), uncertain.end());
    uncertain.erase(std::unique(uncertain.begin(), uncertain.end()), uncertain.end());
    const auto& sorted = tok.sorted_ids();
    std::vector<std::uint32_t> pos;
    pos.reserve(uncertain.size());
    for (std::uint32_t k : uncertain)
      if (!get_bit(mask, sorted[k])) pos.push_back(k);
    std::vector<std::uint16_t> lcp(pos.size(), 0);
    for (std::size_t k = 1; k < pos.size(); ++k) {
      std::string_view a = tok.sorted_token(pos[k - 1]), b = tok.sorted_token(pos[k]);
      std::size_t l = 0;
      while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
      lcp[k] = static_cast<std::uint16_t>(l);
    }
    Walker w;
    w.run(parser, st, tok, pos.size(), [&](std::size_t k) { return pos[k]; }, [&](std::size_t k) { return lcp[k]; },
          [&](std::size_t k, bool ok, bool) {
            if (ok) set_bit(mask, sorted[pos[k]]);
          });
  }
  if (st.can_end)
    for (TokenId e : tok.eos_ids()) set_bit(mask, e);
  StoredMask stored = StoredMask::from(mask, words, tok.vocab_size());
  std::unique_lock lk(state_cache_->mu);
  if (state_cache_->bytes + stored.bytes() + key.size() > StateCache::kMaxBytes) {
    state_cache_->masks.clear();
    state_cache_->bytes = 0;
  }
  state_cache_->bytes += stored.bytes() + key.size();
  state_cache_->masks.emplace(std::move(key), std::move(stored));
}

// ---------------------------------------------------------------------------------------------
// GrammarCompiler
// ---------------------------------------------------------------------------------------------

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenizerInfo> tok, std::size_t max_cached)
    : tok_(std::move(tok)), max_cached_(max_cached) {}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile_json_schema(std::string_view schema_text,
                                                                            const SchemaOptions& o) {
  std::string key = std::string(schema_text) + '\0' + std::to_string(static_cast<int>(o.draft)) + ',' +
                    std::to_string(o.lenient) + ',' + std::to_string(o.max_whitespace) + ',' + std::to_string(o.strict);
  {
    std::lock_guard lk(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  SchemaCompileResult r = grammar::compile_json_schema(schema_text, o);
  auto g = r.grammar;
  auto cg = std::make_shared<const CompiledGrammar>(g, tok_, std::move(r));
  std::lock_guard lk(mu_);
  if (cache_.size() >= max_cached_) cache_.clear();
  cache_.emplace(std::move(key), cg);
  return cg;
}

// ---------------------------------------------------------------------------------------------
// GrammarMatcher
// ---------------------------------------------------------------------------------------------

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> g)
    : g_(std::move(g)), parser_(g_->grammar()) {
  reset();
}

void GrammarMatcher::reset() {
  history_.clear();
  history_.push_back(parser_.initial());
  terminated_ = false;
}

bool GrammarMatcher::accept_string(std::string_view bytes) {
  if (terminated_) return false;
  tmp_a_ = history_.back();
  for (char c : bytes) {
    if (!parser_.advance(tmp_a_, static_cast<std::uint8_t>(c), tmp_b_)) return false;
    std::swap(tmp_a_, tmp_b_);
  }
  history_.push_back(tmp_a_);
  return true;
}

bool GrammarMatcher::accept(TokenId id) {
  const TokenizerInfo& tok = g_->tokenizer();
  if (terminated_ || id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size()) return false;
  if (tok.is_eos(id)) {
    if (!history_.back().can_end) return false;
    ParseState end;  // terminal state: nothing more
    history_.push_back(end);
    terminated_ = true;
    return true;
  }
  if (!tok.is_regular(id)) return false;
  return accept_string(tok.token(id));
}

void GrammarMatcher::rollback(std::size_t n) {
  if (n >= history_.size()) n = history_.size() - 1;
  for (std::size_t k = 0; k < n; ++k) {
    history_.pop_back();
    terminated_ = false;
  }
}

void GrammarMatcher::fill_bitmask(std::span<std::uint32_t> mask) {
  const TokenizerInfo& tok = g_->tokenizer();
  std::size_t words = tok.mask_words();
  if (mask.size() < words)
    throw std::invalid_argument("fill_bitmask: span of " + std::to_string(mask.size()) + " words, need " +
                                std::to_string(words));
  std::fill(mask.begin() + static_cast<long>(words), mask.end(), 0u);
  if (terminated_) {
    std::fill(mask.begin(), mask.begin() + static_cast<long>(words), 0u);
    for (TokenId e : tok.eos_ids()) set_bit(mask.data(), e);
    return;
  }
  g_->fill_mask(parser_, history_.back(), mask.data());
}

void GrammarMatcher::fill_bitmask_uncached(std::span<std::uint32_t> mask) {
  const TokenizerInfo& tok = g_->tokenizer();
  std::size_t words = tok.mask_words();
  if (mask.size() < words) throw std::invalid_argument("fill_bitmask_uncached: span too small");
  std::fill(mask.begin(), mask.end(), 0u);
  if (terminated_) {
    for (TokenId e : tok.eos_ids()) set_bit(mask.data(), e);
    return;
  }
  g_->fill_mask_walk(parser_, history_.back(), mask.data());
}

std::string GrammarMatcher::jump_forward() const {
  std::string out;
  if (terminated_) return out;
  ParseState a = history_.back(), b;
  std::uint32_t words[8];
  while (!a.can_end && out.size() < 4096) {
    parser_.next_bytes(a, words);
    int count = 0, byte = -1;
    for (int w = 0; w < 8; ++w) {
      if (words[w]) {
        count += __builtin_popcount(words[w]);
        byte = w * 32 + __builtin_ctz(words[w]);
      }
    }
    if (count != 1) break;
    if (!parser_.advance(a, static_cast<std::uint8_t>(byte), b)) break;
    out.push_back(static_cast<char>(byte));
    std::swap(a, b);
  }
  // Cut at the last complete UTF-8 character.
  std::size_t cut = out.size();
  std::size_t k = out.size();
  while (k > 0 && (static_cast<unsigned char>(out[k - 1]) & 0xC0) == 0x80) --k;
  if (k > 0) {
    auto lead = static_cast<unsigned char>(out[k - 1]);
    std::size_t need = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
    if (out.size() - (k - 1) < need) cut = k - 1;
  }
  out.resize(cut);
  return out;
}

}  // namespace quarry::engine::grammar
