// Token masks and the per-sequence matcher. See matcher.hpp for the design and sources.
#include "engine/grammar/matcher.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <stdexcept>
#include <tuple>

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
  for (std::size_t k = 0; k < sorted_.size(); ++k) {
    std::string_view t = tokens_[sorted_[k]];
    if (t.size() < kLongToken) continue;
    std::uint16_t l = 0;
    if (!long_pos_.empty()) {
      std::string_view p = tokens_[sorted_[long_pos_.back()]];
      while (l < p.size() && l < t.size() && p[l] == t[l]) ++l;
    }
    long_pos_.push_back(static_cast<std::uint32_t>(k));
    long_lcp_.push_back(l);
  }
  build_trie();
}

namespace {

// UTF-8 validation automaton (RFC 3629 well-formed sequences): 0 = at a character boundary,
// 1..3 = that many continuation bytes (80-BF) still needed, 4 = after E0 (A0-BF next),
// 5 = after ED (80-9F next), 6 = after F0 (90-BF next), 7 = after F4 (80-8F next), 8 = invalid.
constexpr int kUtf8Dead = 8;
inline int utf8_step(int u, std::uint8_t b) {
  switch (u) {
    case 0:
      if (b < 0x80) return 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 2;
      if (b == 0xED) return 5;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      if (b == 0xF4) return 7;
      return kUtf8Dead;
    case 1: return b >= 0x80 && b <= 0xBF ? 0 : kUtf8Dead;
    case 2: return b >= 0x80 && b <= 0xBF ? 1 : kUtf8Dead;
    case 3: return b >= 0x80 && b <= 0xBF ? 2 : kUtf8Dead;
    case 4: return b >= 0xA0 && b <= 0xBF ? 1 : kUtf8Dead;
    case 5: return b >= 0x80 && b <= 0x9F ? 1 : kUtf8Dead;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : kUtf8Dead;
    case 7: return b >= 0x80 && b <= 0x8F ? 2 : kUtf8Dead;
    default: return kUtf8Dead;
  }
}
inline bool is_cont(std::uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

std::vector<TokenizerInfo::TrieNode> TokenizerInfo::build_nodes(const std::vector<std::uint32_t>* pos,
                                                                const std::vector<std::uint8_t>& plain,
                                                                const std::vector<std::uint8_t>& chars) const {
  const std::size_t n = pos ? pos->size() : sorted_.size();
  auto P = [&](std::size_t k) -> std::size_t { return pos ? (*pos)[k] : k; };
  auto tok_len = [&](std::size_t k) { return sorted_off_[P(k) + 1] - sorted_off_[P(k)]; };
  // Trie nodes in depth-first order from the sorted list and its common-prefix lengths.
  std::vector<TrieNode> trie_(1, TrieNode{});
  trie_[0].hi = static_cast<std::uint32_t>(n);
  std::vector<std::uint32_t> path{0};
  std::vector<std::uint8_t> pstate(1, 0);  // per node: UTF-8 automaton state after its parent's prefix
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t l = 0, len = tok_len(k);
    if (k > 0) {
      std::string_view a = sorted_token(P(k - 1)), b = sorted_token(P(k));
      while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
    }
    while (path.size() > l + 1) {
      TrieNode& v = trie_[path.back()];
      v.hi = static_cast<std::uint32_t>(k);
      v.next = static_cast<std::uint32_t>(trie_.size());
      path.pop_back();
    }
    std::string_view t = sorted_token(P(k));
    int u = 0;
    for (std::size_t d = 1; d <= l && u != kUtf8Dead; ++d) u = utf8_step(u, static_cast<std::uint8_t>(t[d - 1]));
    for (std::size_t d = l + 1; d <= len; ++d) {
      pstate.push_back(static_cast<std::uint8_t>(u));
      if (u != kUtf8Dead) u = utf8_step(u, static_cast<std::uint8_t>(t[d - 1]));
      TrieNode v;
      v.lo = static_cast<std::uint32_t>(k);
      v.depth = static_cast<std::uint16_t>(d);
      v.byte = static_cast<std::uint8_t>(t[d - 1]);
      path.push_back(static_cast<std::uint32_t>(trie_.size()));
      trie_.push_back(v);
    }
  }
  while (!path.empty()) {
    TrieNode& v = trie_[path.back()];
    v.hi = static_cast<std::uint32_t>(n);
    v.next = static_cast<std::uint32_t>(trie_.size());
    path.pop_back();
  }
  // Subtree summaries, children before parents (reverse depth-first order).
  std::vector<std::uint16_t> utf8_ok(trie_.size(), 0);  // bit u: valid from automaton state u
  std::vector<std::uint16_t> utf8_pre(trie_.size(), 0);  // bit u: a valid prefix from state u
  for (std::size_t vi = trie_.size(); vi-- > 1;) {
    TrieNode& v = trie_[vi];
    bool all_plain = true, nonascii = v.byte >= 0x80;
    std::uint8_t maxc = 0, smaxc = 0, sminc = 255;
    std::uint64_t sa[2] = {0, 0};
    if (v.byte < 0x80) sa[v.byte >> 6] |= 1ull << (v.byte & 63);
    bool has_token = false;
    std::size_t maxl = 0;
    for (std::size_t p = v.lo; p < v.hi && tok_len(p) == v.depth; ++p) {
      has_token = true;
      maxl = v.depth;
      all_plain = all_plain && plain[P(p)];
      maxc = std::max(maxc, chars[P(p)]);
    }
    std::uint16_t child_ok = 0x1FF, child_pre = 0x1FF;
    for (std::uint32_t c = static_cast<std::uint32_t>(vi) + 1; c < v.next; c = trie_[c].next) {
      const TrieNode& ch = trie_[c];
      all_plain = all_plain && (ch.flags & kAllPlain);
      nonascii = nonascii || (ch.flags & kSuffixNonAscii);
      maxc = std::max(maxc, ch.max_chars);
      maxl = std::max<std::size_t>(maxl, ch.max_len);
      smaxc = std::max(smaxc, ch.suffix_max_chars);
      sminc = std::min(sminc, ch.suffix_min_chars);
      sa[0] |= ch.suffix_ascii[0];
      sa[1] |= ch.suffix_ascii[1];
      child_ok &= utf8_ok[c];
      child_pre &= utf8_pre[c];
    }
    std::uint16_t ok = 0;
    for (int u = 0; u < 8; ++u) {
      int u2 = utf8_step(u, v.byte);
      if (u2 != kUtf8Dead && (!has_token || u2 == 0) && ((child_ok >> u2) & 1)) ok |= static_cast<std::uint16_t>(1u << u);
    }
    utf8_ok[vi] = ok;
    std::uint16_t pre = 0;
    for (int u = 0; u < 8; ++u) {
      int u2 = utf8_step(u, v.byte);
      if (u2 != kUtf8Dead && ((child_pre >> u2) & 1)) pre |= static_cast<std::uint16_t>(1u << u);
    }
    utf8_pre[vi] = pre;
    const bool path_pre = pstate[vi] != kUtf8Dead && ((pre >> pstate[vi]) & 1);
    bool ctl = v.byte < 0x20;
    if (!ctl && v.byte >= 0x20 && v.byte < 0x7F && v.byte != '"' && v.byte != '\\' && !has_token && vi + 1 < v.next) {
      ctl = true;
      for (std::uint32_t c = static_cast<std::uint32_t>(vi) + 1; c < v.next && ctl; c = trie_[c].next)
        ctl = (trie_[c].flags & kCtlAfterAscii) != 0;
    }
    v.flags = static_cast<std::uint8_t>((all_plain ? kAllPlain : 0) | ((ok & 1) ? kSuffixUtf8 : 0) |
                                        (nonascii ? kSuffixNonAscii : 0) | (has_token ? kHasToken : 0) |
                                        (path_pre ? kPathUtf8Prefix : 0) | (ctl ? kCtlAfterAscii : 0));
    v.max_chars = maxc;
    v.max_len = static_cast<std::uint8_t>(std::min<std::size_t>(maxl, 255));
    v.suffix_max_chars = static_cast<std::uint8_t>(std::min(255, smaxc + (is_cont(v.byte) ? 0 : 1)));
    if (has_token) sminc = 0;
    v.suffix_min_chars = static_cast<std::uint8_t>(std::min(255, sminc + (is_cont(v.byte) ? 0 : 1)));
    v.suffix_ascii[0] = sa[0];
    v.suffix_ascii[1] = sa[1];
  }
  // skip_plain: the first sibling at or after a node that is not all-plain (or the parent's end).
  std::vector<std::uint32_t> kids;
  for (std::size_t vi = 0; vi < trie_.size(); ++vi) {
    const std::uint32_t end = trie_[vi].next;
    kids.clear();
    for (std::uint32_t c = static_cast<std::uint32_t>(vi) + 1; c < end; c = trie_[c].next) kids.push_back(c);
    std::uint32_t nxt = end;
    for (std::size_t i = kids.size(); i-- > 0;) {
      if (!(trie_[kids[i]].flags & kAllPlain)) nxt = kids[i];
      trie_[kids[i]].skip_plain = nxt;
    }
  }
  return trie_;
}

void TokenizerInfo::build_trie() {
  const std::size_t n = sorted_.size();
  // Per token (sorted position): plain text? code points.
  std::vector<std::uint8_t> plain(n), chars(n);
  max_plain_chars_ = 0;
  for (std::size_t k = 0; k < n; ++k) {
    std::string_view t = sorted_token(k);
    int u = 0;
    bool ok = true;
    std::size_t c = 0;
    for (char ch : t) {
      auto b = static_cast<std::uint8_t>(ch);
      u = utf8_step(u, b);
      if (u == kUtf8Dead || b < 0x20 || b == 0x7F || b == '"' || b == '\\') ok = false;
      if (!is_cont(b)) ++c;
    }
    plain[k] = ok && u == 0;
    chars[k] = static_cast<std::uint8_t>(std::min<std::size_t>(c, 255));
    if (plain[k]) max_plain_chars_ = std::max<std::size_t>(max_plain_chars_, chars[k]);
  }
  trie_ = build_nodes(nullptr, plain, chars);
  nonplain_pos_.clear();
  for (std::size_t k = 0; k < n; ++k)
    if (!plain[k]) nonplain_pos_.push_back(static_cast<std::uint32_t>(k));
  nonplain_trie_ = build_nodes(&nonplain_pos_, plain, chars);
  sorted_chars_ = std::move(chars);
  const std::size_t words = mask_words();
  nonplain_mask_.assign(words, 0u);
  for (std::uint32_t k : nonplain_pos_) nonplain_mask_[static_cast<std::size_t>(sorted_[k]) >> 5] |= 1u << (sorted_[k] & 31);
  nonplain_by_len_ = nonplain_pos_;
  std::stable_sort(nonplain_by_len_.begin(), nonplain_by_len_.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return sorted_token(a).size() > sorted_token(b).size(); });
  // Plain tokens by code point count, cumulative.
  plain_upto_.assign((max_plain_chars_ + 1) * words, 0u);
  for (std::size_t k = 0; k < n; ++k)
    if (plain[k]) {
      TokenId id = sorted_[k];
      plain_upto_[sorted_chars_[k] * words + (static_cast<std::size_t>(id) >> 5)] |= 1u << (id & 31);
    }
  for (std::size_t c = 1; c <= max_plain_chars_; ++c)
    for (std::size_t w = 0; w < words; ++w) plain_upto_[c * words + w] |= plain_upto_[(c - 1) * words + w];
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
  std::vector<std::uint32_t> uncertain;  // positions in sorted_ids(): depends on the stack (kFullWalk)
  // Context-dependent tokens with their rule ends (trie builders): the walk of the token from the
  // node (empty stack) ends the node's rule after `ctx_off` >= 1 bytes and the token goes on, so it
  // is accepted from a thread (node, S) iff the state after popping S accepts the rest of the token
  // (a token with several such offsets has one entry per offset). The run-time check groups the
  // entries by what follows the rule end (see fill_mask).
  std::vector<std::uint32_t> ctx_pos;  // positions in sorted_ids()
  std::vector<std::uint16_t> ctx_off;  // bytes of the token up to the rule end
};

struct CompiledGrammar::NodeCache {
  mutable std::shared_mutex mu;
  std::unordered_map<std::uint32_t, const NodeTable*> tables;  // grammar node -> its table
  // Tables by node description (see node_table): nodes with the same description share one.
  std::unordered_map<std::string, std::unique_ptr<NodeTable>> by_desc;
  // Built tables by node shape (rule end, calls, byte ranges without their targets): candidates
  // for derive_node_table (the positions of a length counter share a shape).
  std::unordered_map<std::string, std::vector<std::pair<std::uint32_t, const NodeTable*>>> by_shape;
};

// A cached mask, stored compactly: relative to the node tables it was built from (the tables'
// accepted bitsets, which live as long as the compiled grammar, plus the ids set on top of them),
// else the allowed ids when few are allowed, the disallowed ids when few are disallowed, else the
// bitset. The relative form avoids copying a 19 KB bitset per state on the first visit of a string
// position (most masks there are one table plus a few string-closing tokens).
struct StoredMask {
  enum Kind : std::uint8_t { kAllowedList, kDisallowedList, kBitset, kTables } kind = kBitset;
  std::vector<std::uint32_t> data;
  static constexpr std::size_t kMaxTables = 4;
  const std::vector<std::uint32_t>* tables[kMaxTables] = {};  // kTables: the masks ORed, then data set

  static StoredMask from(const std::uint32_t* mask, std::size_t words, std::size_t vocab,
                         const std::vector<const std::vector<std::uint32_t>*>& used) {
    StoredMask m;
    std::size_t ones = 0;
    for (std::size_t w = 0; w < words; ++w) ones += static_cast<std::size_t>(__builtin_popcount(mask[w]));
    std::size_t limit = words / 2;  // a list shorter than half the bitset
    // (Short lists restore fastest; the tables form only replaces long lists and the bitset.)
    const bool short_list = ones <= words / 16 || vocab - ones <= words / 16;
    if (!short_list && !used.empty() && used.size() <= kMaxTables) {
      // The ids of mask outside the tables' union (mask includes the union).
      std::size_t extra = 0;
      for (std::size_t w = 0; w < words; ++w) {
        std::uint32_t u = 0;
        for (const auto* t : used) u |= (*t)[w];
        std::uint32_t x = mask[w] & ~u;
        if (x) {
          extra += static_cast<std::size_t>(__builtin_popcount(x));
          if (extra > words / 4) break;
          for (; x; x &= x - 1) m.data.push_back(static_cast<std::uint32_t>(w * 32 + __builtin_ctz(x)));
        }
      }
      if (extra <= words / 4) {
        m.kind = kTables;
        for (std::size_t i = 0; i < used.size(); ++i) m.tables[i] = used[i];
        return m;
      }
      m.data.clear();
    }
    if (ones <= limit) {
      m.kind = kAllowedList;
      for (std::size_t w = 0; w < words; ++w)
        for (std::uint32_t b = mask[w]; b; b &= b - 1) m.data.push_back(static_cast<std::uint32_t>(w * 32 + __builtin_ctz(b)));
    } else if (vocab - ones <= limit) {
      m.kind = kDisallowedList;
      for (std::size_t w = 0; w < words; ++w)
        for (std::uint32_t b = ~mask[w]; b; b &= b - 1) {
          std::size_t i = w * 32 + static_cast<std::size_t>(__builtin_ctz(b));
          if (i < vocab) m.data.push_back(static_cast<std::uint32_t>(i));
        }
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
      case kTables:
        std::memcpy(mask, tables[0]->data(), words * sizeof(std::uint32_t));
        for (std::size_t t = 1; t < kMaxTables && tables[t]; ++t) {
          const std::uint32_t* src = tables[t]->data();
          for (std::size_t w = 0; w < words; ++w) mask[w] |= src[w];
        }
        for (std::uint32_t i : data) mask[i >> 5] |= 1u << (i & 31);
        break;
    }
  }
  std::size_t bytes() const { return data.size() * sizeof(std::uint32_t) + 96; }
};

struct CompiledGrammar::StateCache {
  static constexpr std::size_t kMaxBytes = 256u << 20;  // cleared when it grows past 256 MiB
  mutable std::shared_mutex mu;
  std::unordered_map<std::string, StoredMask> masks;
  std::size_t bytes = 0;
};

// ---------------------------------------------------------------------------------------------
// Code-point-level node analysis (for the trie walk)
// ---------------------------------------------------------------------------------------------

namespace {

constexpr std::size_t kCumChars = 32;  // character-class runs are analysed up to this many code points
constexpr std::uint8_t kInf = 255;     // "unbounded" for the plain-text lengths (tokens have fewer)

// A set of characters: ASCII bytes (bit per byte) and "every multibyte character".
struct CharSet {
  std::uint64_t a[2] = {0, 0};
  bool mb = false;
  void meet(const CharSet& o) {
    a[0] &= o.a[0];
    a[1] &= o.a[1];
    mb = mb && o.mb;
  }
};
constexpr CharSet kAllChars{{~0ull, ~0ull}, true};
// Plain ASCII: 0x20..0x7E without '"' and '\\'.
constexpr std::uint64_t kPlainLo = 0xFFFFFFFB00000000ull;  // 0x20..0x3F without 0x22
constexpr std::uint64_t kPlainHi = 0x7FFFFFFFEFFFFFFFull;  // 0x40..0x7E without 0x5C
constexpr std::uint64_t kQuote = 1ull << '"';
constexpr std::uint64_t kBackslash = 1ull << ('\\' - 64);

}  // namespace

struct CompiledGrammar::NodeInfo {
  // Every string of at most j code points whose characters all lie in cum[j] is accepted from the
  // node (by a single thread of byte edges, no rule calls). cum[0] = everything.
  std::array<CharSet, kCumChars + 1> cum;
  std::uint8_t plain_all = 0;  // B: every plain string of <= B code points is accepted (kInf: any)
  std::uint8_t plain_max = 0;  // L: no string of more than L text characters is accepted (kInf: unbounded)
  bool safe = false;           // no rule end nor call is reachable through text characters
  // The text characters that have an edge at some node reachable through text characters (mb: some
  // multibyte character has one). With safe, reach within cum[plain_max] and plain_max <= kCumChars,
  // the text strings accepted from the node are exactly the strings of at most plain_max characters
  // over cum[plain_max] (a "uniform character class", e.g. the positions of `[a-z0-9_.-]{1,16}`).
  CharSet reach;
};

struct CompiledGrammar::InfoCache {
  explicit InfoCache(std::size_t nodes) : ready(nodes) {}
  std::mutex mu;
  std::unordered_map<std::uint32_t, std::unique_ptr<NodeInfo>> infos;
  // Lock-free reads of finished analyses (published after the lock-protected computation).
  std::vector<std::atomic<const NodeInfo*>> ready;
};

// One code point step from a grammar node over "text" characters (every character except '"' and
// '\\', which end strings or start escapes): which ASCII bytes have an edge, whether every
// well-formed multibyte character is covered, the nodes reached after one character, and whether
// the intermediate (mid-character) nodes are plain byte nodes (no calls, no rule end).
namespace {
struct CharStep {
  std::uint64_t cov[2] = {0, 0};
  bool mb_all = true;
  bool mb_any = false;  // some lead byte C2..F4 has an edge
  bool mids_ok = true;
  std::vector<std::uint32_t> succ;
};

// Continuation ranges required from each UTF-8 automaton state (see utf8_step).
inline void utf8_need(int u, std::uint8_t& lo, std::uint8_t& hi) {
  switch (u) {
    case 4: lo = 0xA0; hi = 0xBF; break;
    case 5: lo = 0x80; hi = 0x9F; break;
    case 6: lo = 0x90; hi = 0xBF; break;
    case 7: lo = 0x80; hi = 0x8F; break;
    default: lo = 0x80; hi = 0xBF; break;
  }
}

CharStep char_step(const Grammar& g, std::uint32_t n) {
  CharStep r;
  const GNode& nd = g.nodes[n];
  for (const ByteEdge& e : nd.bytes) {
    if (e.lo >= 0x80) break;
    for (unsigned b = e.lo; b <= std::min<unsigned>(e.hi, 0x7F); ++b) {
      if (b == '"' || b == '\\') continue;
      r.cov[b >> 6] |= 1ull << (b & 63);
      r.succ.push_back(e.to);
    }
  }
  // Multibyte characters: product of the node's byte edges with the UTF-8 automaton.
  struct Item { std::uint32_t node; int u; };
  std::vector<Item> work;
  std::vector<std::pair<std::uint32_t, int>> seen;
  // Lead bytes C2..F4 from n.
  {
    std::uint32_t covered = 0;  // count of lead bytes with an edge
    for (const ByteEdge& e : nd.bytes) {
      unsigned lo = std::max<unsigned>(e.lo, 0xC2), hi = std::min<unsigned>(e.hi, 0xF4);
      for (unsigned b = lo; b <= hi; ++b) {
        ++covered;
        work.push_back({e.to, utf8_step(0, static_cast<std::uint8_t>(b))});
      }
    }
    if (covered < 0xF4 - 0xC2 + 1) r.mb_all = false;
    r.mb_any = covered > 0;
  }
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    if (std::find(seen.begin(), seen.end(), std::make_pair(it.node, it.u)) != seen.end()) continue;
    seen.push_back({it.node, it.u});
    if (seen.size() > 4096) { r.mb_all = false; r.mids_ok = false; break; }
    const GNode& m = g.nodes[it.node];
    if (!m.calls.empty() || m.final) r.mids_ok = false;
    std::uint8_t lo, hi;
    utf8_need(it.u, lo, hi);
    unsigned covered = 0;
    for (const ByteEdge& e : m.bytes) {
      unsigned a = std::max<unsigned>(e.lo, lo), b = std::min<unsigned>(e.hi, hi);
      if (a > b) continue;
      covered += b - a + 1;
      int u2 = utf8_step(it.u, static_cast<std::uint8_t>(a));
      if (u2 == 0) r.succ.push_back(e.to);
      else work.push_back({e.to, u2});
    }
    if (covered < static_cast<unsigned>(hi - lo + 1)) r.mb_all = false;
  }
  std::sort(r.succ.begin(), r.succ.end());
  r.succ.erase(std::unique(r.succ.begin(), r.succ.end()), r.succ.end());
  return r;
}
}  // namespace

const CompiledGrammar::NodeInfo& CompiledGrammar::node_info(std::uint32_t n0) const {
  if (const NodeInfo* r = info_cache_->ready[n0].load(std::memory_order_acquire)) return *r;
  std::lock_guard lk(info_cache_->mu);
  auto& infos = info_cache_->infos;
  if (auto it = infos.find(n0); it != infos.end()) return *it->second;
  const Grammar& g = *grammar_;
  // The graph of text-character steps reachable from n0 (nodes not analysed yet).
  std::unordered_map<std::uint32_t, std::uint32_t> index;  // grammar node -> local index
  std::vector<std::uint32_t> nodes;
  std::vector<CharStep> steps;
  std::vector<char> simple;
  auto add = [&](std::uint32_t n) {
    if (infos.count(n) || index.count(n)) return;
    index.emplace(n, static_cast<std::uint32_t>(nodes.size()));
    nodes.push_back(n);
    simple.push_back(g.nodes[n].calls.empty());
    steps.push_back(simple.back() ? char_step(g, n) : CharStep{});
  };
  add(n0);
  for (std::size_t i = 0; i < nodes.size(); ++i)
    for (std::uint32_t m : steps[i].succ) add(m);
  const std::size_t n = nodes.size();
  auto local = [&](std::uint32_t m) -> std::uint32_t {
    auto it = index.find(m);
    return it == index.end() ? UINT32_MAX : it->second;
  };
  // Strongly connected components (Tarjan, iterative); emitted sinks first.
  std::vector<std::uint32_t> low(n), num(n, UINT32_MAX), comp(n, UINT32_MAX), stk;
  std::vector<char> on(n, 0);
  std::vector<std::vector<std::uint32_t>> comps;
  std::uint32_t counter = 0;
  for (std::uint32_t r = 0; r < n; ++r) {
    if (num[r] != UINT32_MAX) continue;
    std::vector<std::pair<std::uint32_t, std::size_t>> call{{r, 0}};
    num[r] = low[r] = counter++;
    stk.push_back(r);
    on[r] = 1;
    while (!call.empty()) {
      auto& [v, i] = call.back();
      if (i < steps[v].succ.size()) {
        std::uint32_t w = local(steps[v].succ[i++]);
        if (w == UINT32_MAX) continue;
        if (num[w] == UINT32_MAX) {
          num[w] = low[w] = counter++;
          stk.push_back(w);
          on[w] = 1;
          call.push_back({w, 0});
        } else if (on[w]) {
          low[v] = std::min(low[v], num[w]);
        }
        continue;
      }
      if (low[v] == num[v]) {
        comps.emplace_back();
        std::uint32_t w;
        do {
          w = stk.back();
          stk.pop_back();
          on[w] = 0;
          comp[w] = static_cast<std::uint32_t>(comps.size() - 1);
          comps.back().push_back(w);
        } while (w != v);
      }
      std::uint32_t done = v;
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
    }
  }
  // Values per component (greatest fixpoints inside a component; see NodeInfo).
  std::vector<std::unique_ptr<NodeInfo>> out(n);
  for (std::uint32_t v = 0; v < n; ++v) out[v] = std::make_unique<NodeInfo>();
  auto info_of = [&](std::uint32_t m) -> const NodeInfo& {
    std::uint32_t w = local(m);
    return w == UINT32_MAX ? *infos.at(m) : *out[w];
  };
  for (std::size_t c = 0; c < comps.size(); ++c) {
    const auto& C = comps[c];
    bool cyclic = C.size() > 1;
    for (std::uint32_t v : C)
      for (std::uint32_t m : steps[v].succ)
        if (m == nodes[v]) cyclic = true;
    // L and safe are shared by the whole component.
    unsigned L = 0;
    bool safe = true;
    for (std::uint32_t v : C) {
      const GNode& gn = g.nodes[nodes[v]];
      if (!simple[v] || gn.final || !steps[v].mids_ok) safe = false;
      if (!simple[v]) L = kInf;
      for (std::uint32_t m : steps[v].succ) {
        std::uint32_t w = local(m);
        if (w != UINT32_MAX && comp[w] == c) continue;
        const NodeInfo& o = info_of(m);
        safe = safe && o.safe;
        L = std::max<unsigned>(L, o.plain_max >= kInf ? kInf : o.plain_max + 1u);
      }
      if (!steps[v].succ.empty()) L = std::max(L, 1u);
    }
    if (cyclic) L = kInf;
    // reach: the union over the component and everything after it (a component reaches all of it).
    CharSet reach;
    for (std::uint32_t v : C) {
      reach.a[0] |= steps[v].cov[0];
      reach.a[1] |= steps[v].cov[1];
      reach.mb = reach.mb || steps[v].mb_any;
      for (std::uint32_t m : steps[v].succ) {
        std::uint32_t w = local(m);
        if (w != UINT32_MAX && comp[w] == c) continue;
        const CharSet& o = info_of(m).reach;
        reach.a[0] |= o.a[0];
        reach.a[1] |= o.a[1];
        reach.mb = reach.mb || o.mb;
      }
    }
    for (std::uint32_t v : C) {
      out[v]->plain_max = static_cast<std::uint8_t>(std::min<unsigned>(L, kInf));
      out[v]->safe = safe;
      out[v]->reach = reach;
    }
    // B: start from "unbounded" and lower until stable.
    auto plain_cov = [&](std::uint32_t v) {
      const CharStep& st = steps[v];
      return simple[v] && (st.cov[0] & kPlainLo) == kPlainLo && (st.cov[1] & kPlainHi) == kPlainHi && st.mb_all;
    };
    for (std::uint32_t v : C) out[v]->plain_all = plain_cov(v) ? kInf : 0;
    for (bool changed = true; changed;) {
      changed = false;
      for (std::uint32_t v : C) {
        if (!out[v]->plain_all) continue;
        unsigned mn = kInf;
        for (std::uint32_t m : steps[v].succ) mn = std::min<unsigned>(mn, info_of(m).plain_all);
        unsigned b = mn >= kInf ? kInf : 1 + mn;
        if (b < out[v]->plain_all) {
          out[v]->plain_all = static_cast<std::uint8_t>(b);
          changed = true;
        }
      }
    }
    // cum, layer by layer (layer j only reads layer j - 1).
    for (std::uint32_t v : C) {
      out[v]->cum[0] = kAllChars;
      for (std::size_t j = 1; j <= kCumChars; ++j) out[v]->cum[j] = CharSet{};
    }
    for (std::size_t j = 1; j <= kCumChars; ++j)
      for (std::uint32_t v : C) {
        if (!simple[v]) continue;
        CharSet s{{steps[v].cov[0], steps[v].cov[1]}, steps[v].mb_all};
        for (std::uint32_t m : steps[v].succ) s.meet(info_of(m).cum[j - 1]);
        out[v]->cum[j] = s;
      }
  }
  for (std::uint32_t v = 0; v < n; ++v) {
    info_cache_->ready[nodes[v]].store(out[v].get(), std::memory_order_release);
    infos.emplace(nodes[v], std::move(out[v]));
  }
  return *infos.at(n0);
}

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenizerInfo> tok,
                                 SchemaCompileResult meta, NodeTableMode mode)
    : grammar_(std::move(g)), tok_(std::move(tok)), meta_(std::move(meta)), mode_(mode),
      info_cache_(std::make_unique<InfoCache>(grammar_ ? grammar_->nodes.size() : 0)), state_cache_(std::make_unique<StateCache>()),
      node_cache_(std::make_unique<NodeCache>()) {
  if (!grammar_ || !tok_) throw std::invalid_argument("CompiledGrammar: null grammar or tokenizer");
  meta_.grammar = grammar_;
  class_cache_ = std::make_unique<ClassCache>();
}

struct CompiledGrammar::ClassCache {
  struct Class {
    std::vector<std::uint32_t> ids;                // the class's plain tokens, by code point count
    std::array<std::uint32_t, kCumChars + 1> end;  // end[c]: ids[0, end[c]) have <= c code points
  };
  std::mutex mu;
  std::map<std::tuple<std::uint64_t, std::uint64_t, bool>, Class> classes;  // (ascii[0], ascii[1], mb)
};

void CompiledGrammar::class_tokens(const std::uint64_t ascii_in[2], bool mb, std::size_t chars,
                                   std::uint32_t* out) const {
  const TokenizerInfo& tok = *tok_;
  chars = std::min(chars, kCumChars);
  // Only plain characters matter (plain tokens hold no others).
  const std::uint64_t a0 = ascii_in[0] & kPlainLo, a1 = ascii_in[1] & kPlainHi;
  std::lock_guard lk(class_cache_->mu);
  auto [it, fresh] = class_cache_->classes.try_emplace({a0, a1, mb});
  ClassCache::Class& cls = it->second;
  if (fresh) {
    // Walk of the vocabulary trie along prefixes whose characters all lie in the class: a subtree
    // whose suffixes are complete UTF-8 over class characters is taken whole (summaries), a byte
    // outside the class ends the subtree.
    std::array<std::vector<std::uint32_t>, kCumChars + 1> by_chars;
    const auto& trie = tok.trie();
    const auto& ids = tok.sorted_ids();
    std::vector<int> u(tok.max_token_len() + 1, 0);  // UTF-8 automaton state after the prefix
    auto add = [&](std::uint32_t p) {
      std::size_t c = tok.sorted_chars(p);
      if (c <= kCumChars) by_chars[c].push_back(static_cast<std::uint32_t>(ids[p]));
    };
    const std::uint32_t end = trie[0].next;
    for (std::uint32_t v = 1; v < end;) {
      const TokenizerInfo::TrieNode& tn = trie[v];
      const std::size_t d = tn.depth;
      if (u[d - 1] == 0 && (tn.flags & TokenizerInfo::kSuffixUtf8) && (tn.suffix_ascii[0] & ~a0) == 0 &&
          (tn.suffix_ascii[1] & ~a1) == 0 && (mb || !(tn.flags & TokenizerInfo::kSuffixNonAscii))) {
        if (tn.suffix_min_chars <= kCumChars)
          for (std::uint32_t p = tn.lo; p < tn.hi; ++p) add(p);
        v = tn.next;
        continue;
      }
      const std::uint8_t b = tn.byte;
      const bool in_class = b < 0x80 ? ((b < 64 ? a0 >> b : a1 >> (b - 64)) & 1) != 0 : mb;
      const int u2 = utf8_step(u[d - 1], b);
      if (!in_class || u2 == kUtf8Dead) {
        v = tn.next;
        continue;
      }
      u[d] = u2;
      if ((tn.flags & TokenizerInfo::kHasToken) && u2 == 0)
        for (std::uint32_t p = tn.lo; p < tn.hi && tok.sorted_token(p).size() == d; ++p) add(p);
      ++v;
    }
    for (std::size_t c = 0; c <= kCumChars; ++c) {
      cls.ids.insert(cls.ids.end(), by_chars[c].begin(), by_chars[c].end());
      cls.end[c] = static_cast<std::uint32_t>(cls.ids.size());
    }
  }
  for (std::uint32_t k = 0; k < cls.end[chars]; ++k) set_bit(out, static_cast<TokenId>(cls.ids[k]));
}

CompiledGrammar::~CompiledGrammar() = default;

MaskCacheStats CompiledGrammar::stats() const {
  MaskCacheStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  std::shared_lock lk(node_cache_->mu);
  s.node_tables = node_cache_->tables.size();
  s.derived_tables = derived_.load(std::memory_order_relaxed);
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

bool CompiledGrammar::nonplain_walk(std::uint32_t node) const {
  // The condition of build_node_table for walking only the non-plain trie (exact plain decision
  // or a uniform character class).
  if (!grammar_->nodes[node].calls.empty()) return false;
  const NodeInfo& I = node_info(node);
  if (I.safe && I.plain_max == I.plain_all && I.plain_all > 0) return true;
  if (!I.safe || I.plain_max > kCumChars) return false;
  const CharSet& S = I.cum[I.plain_max];
  return (I.reach.a[0] & kPlainLo & ~S.a[0]) == 0 && (I.reach.a[1] & kPlainHi & ~S.a[1]) == 0 &&
         (!I.reach.mb || S.mb);
}

void CompiledGrammar::build_node_table(std::uint32_t node, NodeTable& t, const NodeTable* base,
                                       std::size_t derive_k) const {
  if (mode_ == NodeTableMode::kFullWalk) return build_node_table_full(node, t);
  const TokenizerInfo& tok = *tok_;
  const std::size_t words = tok.mask_words();
  const auto& ids = tok.sorted_ids();
  Parser local(*grammar_);
  std::vector<Thread> seeds{{node, 0}};
  const std::size_t maxd = tok.max_token_len() + 1;
  std::vector<ParseState> st(maxd);
  std::vector<char> exitf(maxd, 0);
  std::vector<const NodeInfo*> info(maxd, nullptr);
  std::vector<char> info_known(maxd, 0);
  std::vector<std::uint16_t> pchars(maxd, 0);  // code points of the prefix at each depth
  std::vector<std::uint8_t> ustate(maxd, 0);   // UTF-8 automaton state after the prefix
  local.close(seeds, st[0]);
  st[0].can_end = false;  // an exit before the first byte is covered by the other threads of a state
  auto single = [&](const ParseState& s) { return s.threads.size() == 1 && s.threads[0].stack == 0; };
  // Plain text decided from the start position (see the class comment).
  std::uint8_t plain_all = 0;
  bool plain_exact = false;
  // A uniform character class (see NodeInfo::reach): the plain tokens accepted are those over the
  // class with at most L code points, from a bitset built once per class.
  bool uniform = false;
  std::size_t class_chars = 0;  // L of a uniform class (0: no class tokens)
  const std::uint64_t* class_ascii = nullptr;
  bool class_mb = false;
  if (single(st[0])) {
    const NodeInfo& I = node_info(st[0].threads[0].node);
    plain_all = I.plain_all;
    plain_exact = I.safe && I.plain_max == I.plain_all;
    if (!(plain_exact && plain_all > 0) && I.safe && I.plain_max <= kCumChars) {
      const CharSet& S = I.cum[I.plain_max];
      const bool within = (I.reach.a[0] & kPlainLo & ~S.a[0]) == 0 && (I.reach.a[1] & kPlainHi & ~S.a[1]) == 0 &&
                          (!I.reach.mb || S.mb);
      if (within) {
        uniform = true;
        plain_all = 0;
        class_chars = I.plain_max;
        class_ascii = S.a;
        class_mb = I.reach.mb;
      }
    }
  }
  if (class_chars > 0) {
    t.accepted.assign(words, 0u);
    class_tokens(class_ascii, class_mb, class_chars, t.accepted.data());
  } else if (plain_all > 0) {
    const std::uint32_t* p = tok.plain_upto(plain_all);
    t.accepted.assign(p, p + words);
  } else {
    t.accepted.assign(words, 0u);
  }
  std::uint32_t* acc = t.accepted.data();
  std::uint32_t last_node = UINT32_MAX;
  const NodeInfo* last_info = nullptr;
  const auto& g_nodes = grammar_->nodes;
  // With an exact plain decision only the non-plain tokens are left: walk their (small) trie.
  const bool np = (plain_exact && plain_all > 0) || uniform;
  const auto& trie = np ? tok.nonplain_trie() : tok.trie();
  const std::uint32_t* np_pos = tok.nonplain_positions().data();
  auto P = [&](std::uint32_t k) -> std::uint32_t { return np ? np_pos[k] : k; };
  // Derived from a similar node's table (see node_table): its decisions of the non-plain tokens
  // shorter than min_len bytes are copied; the walk visits only subtrees with longer tokens.
  std::size_t min_len = 0;
  if (base && np) {
    min_len = derive_k;
    const std::uint32_t* npm = tok.nonplain_mask();
    for (std::size_t w = 0; w < words; ++w) acc[w] |= base->accepted[w] & npm[w];
    for (std::uint32_t p : tok.nonplain_by_length()) {
      if (tok.sorted_token(p).size() < min_len) break;
      acc[ids[p] >> 5] &= ~(1u << (ids[p] & 31));
    }
    for (std::size_t e = 0; e < base->ctx_pos.size(); ++e)
      if (tok.sorted_token(base->ctx_pos[e]).size() < min_len) {
        t.ctx_pos.push_back(base->ctx_pos[e]);
        t.ctx_off.push_back(base->ctx_off[e]);
      }
    for (std::uint32_t p : base->uncertain)
      if (tok.sorted_token(p).size() < min_len) t.uncertain.push_back(p);
  }
  auto is_short = [&](std::uint32_t p) { return tok.sorted_token(P(p)).size() < min_len; };
  const std::uint32_t end = trie[0].next;
  // The node after completing the current character from `x` over byte b (UTF-8 state u after b),
  // if every valid completion leads there through nodes without calls or rule end; else UINT32_MAX.
  auto plain_node = [&](std::uint32_t n) { return g_nodes[n].calls.empty() && !g_nodes[n].final; };
  auto complete_char = [&](std::uint32_t x, std::uint8_t b, int u) -> std::uint32_t {
    std::uint32_t node = UINT32_MAX;
    for (const ByteEdge& e : g_nodes[x].bytes) {
      if (e.lo > b) break;
      if (b <= e.hi) {
        if (node != UINT32_MAX) return UINT32_MAX;
        node = e.to;
      }
    }
    if (node == UINT32_MAX || !plain_node(node)) return UINT32_MAX;
    while (u != 0) {
      std::uint8_t lo, hi;
      utf8_need(u, lo, hi);
      std::uint32_t to = UINT32_MAX;
      unsigned covered = 0;
      for (const ByteEdge& e : g_nodes[node].bytes) {
        const unsigned a = std::max<unsigned>(e.lo, lo), z = std::min<unsigned>(e.hi, hi);
        if (a > z) continue;
        if (to != UINT32_MAX && e.to != to) return UINT32_MAX;
        to = e.to;
        covered += z - a + 1;
      }
      if (to == UINT32_MAX || covered != static_cast<unsigned>(hi - lo + 1) || !plain_node(to)) return UINT32_MAX;
      node = to;
      u = utf8_step(u, lo);
    }
    return node;
  };
  // Context-dependent tokens (see NodeTable::ctx_pos): the trie positions [lo, hi) share the path
  // up to depth `upto`; their rule ends are the depths k in 1..upto where the walk's state may end.
  std::uint16_t exits[8];
  auto add_ctx = [&](std::uint32_t lo, std::uint32_t hi, std::size_t upto) {
    std::size_t ne = 0;
    for (std::size_t k = 1; k <= upto; ++k)
      if (st[k].can_end) {
        if (ne == 8) {  // (never seen: a rule ending at more than 8 depths of one token) the plain list
          for (std::uint32_t p = lo; p < hi; ++p)
            if (!is_short(p)) t.uncertain.push_back(P(p));
          return;
        }
        exits[ne++] = static_cast<std::uint16_t>(k);
      }
    for (std::uint32_t p = lo; p < hi; ++p)
      for (std::size_t e = 0; e < ne && !is_short(p); ++e) {
        t.ctx_pos.push_back(P(p));
        t.ctx_off.push_back(exits[e]);
      }
  };
  for (std::uint32_t v = 1; v < end;) {
    const TokenizerInfo::TrieNode& tn = trie[v];
    const std::size_t d = tn.depth;
    if (tn.max_len < min_len) {  // every token below is decided by the base table
      v = tn.next;
      continue;
    }
    if (plain_all > 0 && (tn.flags & TokenizerInfo::kAllPlain) && (plain_exact || tn.max_chars <= plain_all)) {
      // Every token below is plain and already decided; with an exact decision, so are the
      // all-plain siblings that follow.
      v = plain_exact ? tn.skip_plain : tn.next;
      continue;
    }
    const ParseState& ps = st[d - 1];
    // ASCII text up to a control byte that no node reachable through text takes: rejected (with no
    // rule end on the way, so whatever the context).
    if ((tn.flags & TokenizerInfo::kCtlAfterAscii) && !exitf[d - 1] && single(ps) &&
        g_nodes[ps.threads[0].node].calls.empty()) {
      const std::uint32_t gn = ps.threads[0].node;
      if (gn != last_node) { last_node = gn; last_info = &node_info(gn); }
      if (last_info->safe && (tn.suffix_ascii[0] & 0xFFFFFFFFull & last_info->reach.a[0]) == 0) {
        v = tn.next;
        continue;
      }
    }
    // Inside a multibyte character: when every completion of the character leads from the single
    // thread to one node Y through plain nodes, the subtree (valid UTF-8 from here, possibly ending
    // inside a character) is decided by Y's analysis of what follows the character.
    if ((tn.flags & TokenizerInfo::kPathUtf8Prefix) && tn.byte >= 0x80 && !exitf[d - 1] && single(ps) &&
        g_nodes[ps.threads[0].node].calls.empty()) {
      const int u1 = utf8_step(ustate[d - 1], tn.byte);
      const std::uint32_t y = u1 != 0 && u1 != kUtf8Dead ? complete_char(ps.threads[0].node, tn.byte, u1) : UINT32_MAX;
      if (y != UINT32_MAX) {
        if (y != last_node) { last_node = y; last_info = &node_info(y); }
        const NodeInfo* I = last_info;
        const unsigned cur = is_cont(tn.byte) ? 0u : 1u;  // the character begun here (counted in the suffix)
        const unsigned rmax = tn.suffix_max_chars - cur, rmin = tn.suffix_min_chars >= cur ? tn.suffix_min_chars - cur : 0;
        const bool text_only = !(tn.suffix_ascii[0] & kQuote) && !(tn.suffix_ascii[1] & kBackslash);
        if (I->safe && text_only && rmin > I->plain_max) {
          v = tn.next;  // every token completes the character, then needs more than L characters
          continue;
        }
        auto fits = [&](std::size_t j) {
          const CharSet& c = I->cum[j];
          return (tn.suffix_ascii[0] & ~c.a[0]) == 0 && (tn.suffix_ascii[1] & ~c.a[1]) == 0 && c.mb;
        };
        std::size_t top = std::min<std::size_t>(rmax, kCumChars), j = 0;
        if (fits(top)) {
          j = top;
        } else {
          std::size_t lo = 0, hi = top;
          while (hi - lo > 1) {
            std::size_t mid = (lo + hi) / 2;
            (fits(mid) ? lo : hi) = mid;
          }
          j = lo;
        }
        if (j == rmax) {
          for (std::uint32_t p = tn.lo; p < tn.hi; ++p) set_bit(acc, ids[P(p)]);
          v = tn.next;
          continue;
        }
        if (j >= rmin && j == I->plain_max && I->safe && text_only) {
          const std::size_t base = pchars[d - 1] + cur + j;
          for (std::uint32_t p = tn.lo; p < tn.hi; ++p)
            if (tok.sorted_chars(P(p)) <= base) set_bit(acc, ids[P(p)]);
          v = tn.next;
          continue;
        }
      }
    }
    // (Not in the non-plain trie: its tokens hold quotes, escapes, controls or broken UTF-8, which
    // the character-class rules at a character boundary never settle; tried for the tokens that end
    // inside a character, it changed nothing measurable.)
    if (!np && (tn.flags & TokenizerInfo::kSuffixUtf8)) {
      if (!info_known[d - 1]) {
        info_known[d - 1] = 1;
        info[d - 1] = nullptr;
        if (single(ps)) {
          std::uint32_t gn = ps.threads[0].node;
          if (gn != last_node) { last_node = gn; last_info = &node_info(gn); }
          info[d - 1] = last_info;
        }
      }
      if (const NodeInfo* I = info[d - 1]) {
        // Rejections below are final only if no rule end was passed on the way (else they are
        // context-dependent: the walk records them as uncertain).
        const bool no_exit = !exitf[d - 1];
        if (no_exit && I->safe && tn.suffix_min_chars > I->plain_max && !(tn.suffix_ascii[0] & kQuote) &&
            !(tn.suffix_ascii[1] & kBackslash)) {
          v = tn.next;  // only text characters, more than the grammar accepts from here: rejected
          continue;
        }
        // j = the longest suffix length (code points) up to which every string over the
        // subtree's characters is accepted (cum is decreasing in j).
        auto fits = [&](std::size_t j) {
          const CharSet& c = I->cum[j];
          return (tn.suffix_ascii[0] & ~c.a[0]) == 0 && (tn.suffix_ascii[1] & ~c.a[1]) == 0 &&
                 (c.mb || !(tn.flags & TokenizerInfo::kSuffixNonAscii));
        };
        std::size_t top = std::min<std::size_t>(tn.suffix_max_chars, kCumChars), j = 0;
        if (fits(top)) {
          j = top;
        } else {
          std::size_t lo = 0, hi = top;  // fits(lo), !fits(hi)
          while (hi - lo > 1) {
            std::size_t mid = (lo + hi) / 2;
            (fits(mid) ? lo : hi) = mid;
          }
          j = lo;
        }
        if (j == tn.suffix_max_chars) {
          for (std::uint32_t p = tn.lo; p < tn.hi; ++p) set_bit(acc, ids[P(p)]);
          v = tn.next;
          continue;
        }
        if (no_exit && j >= tn.suffix_min_chars && j == I->plain_max && I->safe && !(tn.suffix_ascii[0] & kQuote) &&
            !(tn.suffix_ascii[1] & kBackslash)) {
          // Suffixes of at most j code points accepted, longer ones rejected (no rule end on the way).
          const std::size_t base = pchars[d - 1] + j;
          for (std::uint32_t p = tn.lo; p < tn.hi; ++p)
            if (tok.sorted_chars(P(p)) <= base) set_bit(acc, ids[P(p)]);
          v = tn.next;
          continue;
        }
      }
    }
    bool alive;
    if (single(ps) && g_nodes[ps.threads[0].node].calls.empty()) {
      // One thread of byte edges: follow the edge directly; close() only where a rule may end or call.
      std::uint32_t to = UINT32_MAX;
      bool more = false;
      for (const ByteEdge& e : g_nodes[ps.threads[0].node].bytes) {
        if (e.lo > tn.byte) break;
        if (tn.byte <= e.hi) {
          if (to == UINT32_MAX) to = e.to;
          else more = true;
        }
      }
      if (to == UINT32_MAX) {
        alive = false;
      } else if (!more && g_nodes[to].calls.empty() && !g_nodes[to].final) {
        st[d].threads.assign(1, Thread{to, 0});
        st[d].can_end = false;
        alive = true;
      } else {
        alive = local.advance(ps, tn.byte, st[d]);
      }
    } else {
      alive = local.advance(ps, tn.byte, st[d]);
    }
    if (!alive) {
      if (exitf[d - 1]) add_ctx(tn.lo, tn.hi, d - 1);
      v = tn.next;
      continue;
    }
    exitf[d] = exitf[d - 1] || st[d].can_end;
    pchars[d] = pchars[d - 1] + (is_cont(tn.byte) ? 0 : 1);
    ustate[d] = static_cast<std::uint8_t>(ustate[d - 1] == kUtf8Dead ? kUtf8Dead : utf8_step(ustate[d - 1], tn.byte));
    info_known[d] = 0;
    std::uint32_t p = tn.lo;
    if (tn.flags & TokenizerInfo::kHasToken)
      for (; p < tn.hi && tok.sorted_token(P(p)).size() == d; ++p) set_bit(acc, ids[P(p)]);
    if (st[d].threads.empty()) {
      // The rule ended here and nothing inside it goes on: every longer token below depends on the
      // context (exitf[d] holds).
      add_ctx(p, tn.hi, d);
      v = tn.next;
      continue;
    }
    ++v;
  }
}

void CompiledGrammar::build_node_table_full(std::uint32_t node, NodeTable& t) const {
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
  NodeCache& c = *node_cache_;
  {
    std::shared_lock lk(c.mu);
    auto it = c.tables.find(node);
    if (it != c.tables.end()) return *it->second;
  }
  // Nodes with the same rule end, the same rule calls (rule and return node) and the same byte
  // edges to the same nodes have the same closure and successors, hence the same table. The grammar
  // builder merges such nodes only outside cycles; inside a cycle (the character classes of a
  // pattern or format repetition, e.g. the atext+ run of an email, one node per class) they remain
  // and would each walk the vocabulary. (Off in NodeTableMode::kTrieUnshared, the test reference.)
  std::string desc;
  if (mode_ == NodeTableMode::kTrie) {
    const GNode& g = grammar_->nodes[node];
    auto put = [&](std::uint32_t x) { desc.append(reinterpret_cast<const char*>(&x), sizeof x); };
    put(g.final ? 1u : 0u);
    put(static_cast<std::uint32_t>(g.calls.size()));
    for (const CallEdge& e : g.calls) {
      put(e.rule);
      put(e.ret);
    }
    for (const ByteEdge& e : g.bytes) {
      put(static_cast<std::uint32_t>(e.lo) | static_cast<std::uint32_t>(e.hi) << 8);
      put(e.to);
    }
    std::unique_lock lk(c.mu);
    if (auto it = c.by_desc.find(desc); it != c.by_desc.end()) {
      c.tables.emplace(node, it->second.get());
      return *it->second;
    }
  } else {
    desc.assign(reinterpret_cast<const char*>(&node), sizeof node);  // one table per node
  }
  // Positions of a length counter (maxLength strings, the 61-character label of the email
  // format) have the same shape and, away from the bound, differ only for long tokens: derive the
  // table from the table of a node of the same shape that agrees on every byte string shorter than
  // k bytes (similar_depth). At a free-text or character-class position (nonplain_walk: the plain
  // tokens follow from their code point counts), the non-plain tokens shorter than k bytes are
  // copied and only the subtrees of the non-plain trie holding longer ones are walked. Elsewhere (the
  // email label, whose builder walks the whole trie) only with k = kLongToken, the long tokens walked
  // with the parser. Not for literals (fewer than 16 first bytes): their walk enters few subtrees.
  std::string shape;
  std::pair<std::uint32_t, const NodeTable*> base{UINT32_MAX, nullptr};
  std::size_t base_k = 0;
  bool np = false;
  if (mode_ == NodeTableMode::kTrie) {
    const GNode& g = grammar_->nodes[node];
    auto put = [&](std::uint32_t x) { shape.append(reinterpret_cast<const char*>(&x), sizeof x); };
    put(g.final ? 1u : 0u);
    for (const CallEdge& e : g.calls) {
      put(e.rule);
      put(e.ret);
    }
    put(UINT32_MAX);
    for (const ByteEdge& e : g.bytes) put(static_cast<std::uint32_t>(e.lo) | static_cast<std::uint32_t>(e.hi) << 8);
    std::vector<std::pair<std::uint32_t, const NodeTable*>> cands;
    {
      std::shared_lock lk(c.mu);
      if (auto it = c.by_shape.find(shape); it != c.by_shape.end()) cands = it->second;
    }
    unsigned covered = 0;
    for (const ByteEdge& e : g.bytes) covered += static_cast<unsigned>(e.hi - e.lo) + 1u;
    if (covered < 16) cands.clear();
    np = !cands.empty() && nonplain_walk(node);
    // kMinDerive: below it the walk saved is not worth the copy. kMaxDerive: the similarity check
    // visits about 15 node pairs per byte of depth at a string position (cold in the cache); 107
    // Qwen3 tokens are non-plain with 16 bytes or more, most of them whitespace ending in a newline
    // (rejected at their first byte by kCtlAfterAscii). Measured: 16 gave a lower cold p99 than 24
    // or 32 on rag_answer and the same elsewhere.
    constexpr std::size_t kMinDerive = 4, kMaxDerive = 16;
    const std::size_t need = np ? kMinDerive : TokenizerInfo::kLongToken;
    const std::size_t cap = np ? kMaxDerive : TokenizerInfo::kLongToken;
    std::size_t tried = 0;
    // Oldest first: the first table built along a length counter is usually its start, the position
    // farthest from the bound (the deepest similarity to the later ones).
    for (auto it = cands.begin(); it != cands.end() && tried < 4; ++it, ++tried) {
      const std::size_t k = similar_depth(node, it->first, cap);
      if (k >= need && k > base_k) {
        base = *it;
        base_k = k;
        if (k == cap) break;
      }
    }
  }
  auto t = std::make_unique<NodeTable>();
  if (base.second) {
    if (np) build_node_table(node, *t, base.second, base_k);
    else derive_node_table(node, *base.second, *t);
    derived_.fetch_add(1, std::memory_order_relaxed);
  } else {
    build_node_table(node, *t);
  }
  std::unique_lock lk(c.mu);
  auto [it, inserted] = c.by_desc.emplace(std::move(desc), std::move(t));
  c.tables.emplace(node, it->second.get());
  if (inserted && !base.second && mode_ == NodeTableMode::kTrie) {
    auto& v = c.by_shape[shape];
    if (v.size() < 16) v.emplace_back(node, it->second.get());
  }
  return *it->second;
}

std::size_t CompiledGrammar::similar_depth(std::uint32_t x, std::uint32_t y, std::size_t cap) const {
  const auto& nodes = grammar_->nodes;
  // Breadth first over pairs of nodes reached by the same byte string: a pair first reached at
  // depth l is compared once (its rule end, calls and byte ranges); reached again deeper, its
  // comparison and successors are already covered. The first differing pair's depth is the answer.
  constexpr std::size_t kMaxPairs = 4096;
  std::vector<std::uint64_t> seen(1024, 0);  // open addressing; 0 = empty (pairs have x != y)
  std::size_t count = 0;
  auto insert = [&](std::uint64_t key) {
    if (2 * (count + 1) > seen.size()) {
      std::vector<std::uint64_t> old(seen.size() * 2, 0);
      old.swap(seen);
      for (std::uint64_t k2 : old)
        if (k2)
          for (std::size_t i = (k2 * 0x9E3779B97F4A7C15ull) >> 40 & (seen.size() - 1);; i = (i + 1) & (seen.size() - 1))
            if (!seen[i]) {
              seen[i] = k2;
              break;
            }
    }
    for (std::size_t i = (key * 0x9E3779B97F4A7C15ull) >> 40 & (seen.size() - 1);; i = (i + 1) & (seen.size() - 1)) {
      if (seen[i] == key) return false;
      if (!seen[i]) {
        seen[i] = key;
        ++count;
        return true;
      }
    }
  };
  std::vector<std::pair<std::uint32_t, std::uint32_t>> cur, nxt;
  if (x != y) {
    cur.emplace_back(x, y);
    insert(static_cast<std::uint64_t>(x) << 32 | y);
  }
  for (std::size_t level = 0; level < cap; ++level) {
    if (cur.empty()) return cap;
    nxt.clear();
    for (auto [u, v] : cur) {
      const GNode& a = nodes[u];
      const GNode& b = nodes[v];
      if (a.final != b.final || a.bytes.size() != b.bytes.size() || a.calls.size() != b.calls.size()) return level;
      for (std::size_t i = 0; i < a.calls.size(); ++i)
        if (a.calls[i].rule != b.calls[i].rule || a.calls[i].ret != b.calls[i].ret) return level;
      for (std::size_t i = 0; i < a.bytes.size(); ++i)
        if (a.bytes[i].lo != b.bytes[i].lo || a.bytes[i].hi != b.bytes[i].hi) return level;
      if (level + 1 == cap) continue;
      for (std::size_t i = 0; i < a.bytes.size(); ++i) {
        const std::uint32_t p = a.bytes[i].to, q = b.bytes[i].to;
        if (p == q || !insert(static_cast<std::uint64_t>(p) << 32 | q)) continue;
        if (count > kMaxPairs) return level;  // (the pairs of this level are not all compared)
        nxt.emplace_back(p, q);
      }
    }
    cur.swap(nxt);
  }
  return cap;
}

void CompiledGrammar::derive_node_table(std::uint32_t x, const NodeTable& y, NodeTable& t) const {
  // Tokens of fewer than kLongToken bytes: every state of the walk from x corresponds to one from y
  // (similar_upto), with the same rule ends, so their decision (accepted, context-dependent with
  // the same rule-end offsets, rejected) is y's. The long tokens are walked from x.
  const TokenizerInfo& tok = *tok_;
  const auto& ids = tok.sorted_ids();
  const auto& lpos = tok.long_positions();
  const auto& llcp = tok.long_lcp();
  auto is_long = [&](std::uint32_t p) { return tok.sorted_token(p).size() >= TokenizerInfo::kLongToken; };
  t.accepted = y.accepted;
  for (std::uint32_t p : lpos) t.accepted[ids[p] >> 5] &= ~(1u << (ids[p] & 31));
  for (std::size_t e = 0; e < y.ctx_pos.size(); ++e)
    if (!is_long(y.ctx_pos[e])) {
      t.ctx_pos.push_back(y.ctx_pos[e]);
      t.ctx_off.push_back(y.ctx_off[e]);
    }
  for (std::uint32_t p : y.uncertain)
    if (!is_long(p)) t.uncertain.push_back(p);
  Parser local(*grammar_);
  std::vector<Thread> seeds{{x, 0}};
  ParseState start;
  local.close(seeds, start);
  start.can_end = false;  // as in build_node_table
  Walker w;
  w.run(local, start, tok, lpos.size(), [&](std::size_t k) { return lpos[k]; }, [&](std::size_t k) { return llcp[k]; },
        [&](std::size_t k, bool ok, bool exit_seen) {
          if (ok) set_bit(t.accepted.data(), ids[lpos[k]]);
          else if (exit_seen) t.uncertain.push_back(lpos[k]);  // checked against the whole state
        });
}

void CompiledGrammar::warm_up() const {
  // Every node that has byte edges can appear in a state.
  for (std::uint32_t n = 0; n < grammar_->nodes.size(); ++n)
    if (!grammar_->nodes[n].bytes.empty()) node_table(n);
}

void CompiledGrammar::check_rule_end(Parser& parser, std::uint32_t stack, const NodeTable& t,
                                     std::uint32_t* mask) const {
  // The state after the rule end: the thread's stack popped. Every context-dependent token of the
  // table is then accepted iff this state accepts the token's bytes after its rule end. Most of
  // them (about 1,150 at a string position, 570 distinct continuations) fail on the first byte
  // after the closing quote, so: the bytes the state can take (one bit test per token), the state
  // after each first byte (once per byte), and the rest of a longer continuation once per distinct
  // continuation.
  const TokenizerInfo& tok = *tok_;
  const auto& ids = tok.sorted_ids();
  std::vector<Thread> seeds{{parser.pool().top(stack), parser.pool().parent(stack)}};
  ParseState popped;
  parser.close(seeds, popped);
  if (popped.threads.empty()) return;
  std::uint32_t next[8];
  parser.next_bytes(popped, next);
  std::array<std::int8_t, 256> first_ok;
  first_ok.fill(-1);
  std::array<std::uint8_t, 256> first_idx{};
  std::vector<ParseState> first_state;
  std::unordered_map<std::string_view, bool> rest_ok;
  ParseState a, b;
  for (std::size_t e = 0; e < t.ctx_pos.size(); ++e) {
    const TokenId id = ids[t.ctx_pos[e]];
    if (get_bit(mask, id)) continue;
    const std::string_view sfx = tok.sorted_token(t.ctx_pos[e]).substr(t.ctx_off[e]);
    const std::uint8_t c0 = static_cast<std::uint8_t>(sfx[0]);
    if (!((next[c0 >> 5] >> (c0 & 31)) & 1u)) continue;
    if (first_ok[c0] < 0) {
      first_idx[c0] = static_cast<std::uint8_t>(first_state.size());
      first_state.emplace_back();
      first_ok[c0] = parser.advance(popped, c0, first_state.back()) ? 1 : 0;
    }
    if (!first_ok[c0]) continue;
    bool ok = true;
    if (sfx.size() > 1) {
      auto [it, fresh] = rest_ok.try_emplace(sfx, false);
      if (fresh) {
        const ParseState* cur = &first_state[first_idx[c0]];
        bool alive = true;
        for (std::size_t i = 1; i < sfx.size() && alive; ++i) {
          ParseState& out = (cur == &a) ? b : a;
          alive = parser.advance(*cur, static_cast<std::uint8_t>(sfx[i]), out);
          cur = &out;
        }
        it->second = alive;
      }
      ok = it->second;
    }
    if (ok) set_bit(mask, id);
  }
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
  std::vector<const std::vector<std::uint32_t>*> used;  // the tables' accepted bitsets (distinct)
  std::uint32_t prev_node = UINT32_MAX;
  const NodeTable* prev_table = nullptr;
  for (const Thread& th : st.threads) {
    // Threads are sorted by node: the stack-independent part once per node.
    const NodeTable& t = th.node == prev_node ? *prev_table : node_table(th.node);
    if (th.node != prev_node) {
      prev_node = th.node;
      prev_table = &t;
      if (std::find(used.begin(), used.end(), &t.accepted) == used.end()) used.push_back(&t.accepted);
      for (std::size_t w = 0; w < words; ++w) mask[w] |= t.accepted[w];
      uncertain.insert(uncertain.end(), t.uncertain.begin(), t.uncertain.end());
    }
    if (!t.ctx_pos.empty() && th.stack != 0) check_rule_end(parser, th.stack, t, mask);
    // (With an empty stack the rule end is the end of the value: nothing may follow.)
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
  StoredMask stored = StoredMask::from(mask, words, tok.vocab_size(), used);
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
                    std::to_string(o.lenient) + ',' + std::to_string(o.max_whitespace) + ',' + std::to_string(o.strict) + ',' +
                    std::to_string(o.max_fraction_digits);
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
  gstates_.clear();
  gstates_.emplace_back();
  terminated_ = false;
}

void GrammarMatcher::set_grounding(std::shared_ptr<const GroundingIndex> index) {
  if (index && &index->vocab().tokenizer() != &g_->tokenizer())
    throw std::invalid_argument("set_grounding: the index was built for another vocabulary");
  ground_ = std::move(index);
  reset();
}

std::uint8_t GrammarMatcher::region_kind(const ParseState& s) const {
  const auto& nodes = g_->grammar().nodes;
  for (const Thread& t : s.threads)
    if (nodes[t.node].source) return nodes[t.node].source;
  return 0;
}

bool GrammarMatcher::entry_bytes(const ParseState& s, std::array<std::uint8_t, 256>& entry) const {
  const auto& nodes = g_->grammar().nodes;
  bool any = false;
  for (const Thread& t : s.threads)
    for (const ByteEdge& e : nodes[t.node].bytes) {
      const std::uint8_t k = nodes[e.to].source;
      if (!k) continue;
      for (unsigned b = e.lo; b <= e.hi; ++b) entry[b] = k;
      any = true;
    }
  return any;
}

bool GrammarMatcher::advance_grounded(const ParseState& from, GroundState& g, std::string_view bytes, ParseState& to) {
  to = from;
  for (char ch : bytes) {
    const auto b = static_cast<std::uint8_t>(ch);
    const bool inside = g.kind != 0;
    if (inside && ground_->step(g, b) == GroundingIndex::Step::kDead) return false;
    if (!parser_.advance(to, b, tmp_d_)) return false;
    std::swap(to, tmp_d_);
    if (!inside) {
      // JSON lexing outside grounded values: in a string or not.
      if (g.json & 2) g.json = 1;
      else if (g.json & 1) g.json = b == '\\' ? 3 : b == '"' ? 0 : 1;
      else if (b == '"') g.json = 1;
      // Entering a grounded value: a string's opening quote is not part of it; a number's first byte is.
      const std::uint8_t k = region_kind(to);
      if (k) {
        const std::uint8_t lost = g.lost;  // a dead end met before the value's first byte
        g = ground_->init(static_cast<SourceKind>(k));
        g.lost = lost;
        if (k == static_cast<std::uint8_t>(SourceKind::kNumber) && ground_->step(g, b) == GroundingIndex::Step::kDead)
          return false;
      }
    }
  }
  return true;
}

bool GrammarMatcher::accept_string(std::string_view bytes) {
  if (terminated_) return false;
  if (ground_) {
    GroundState g = gstates_.back();
    if (!advance_grounded(history_.back(), g, bytes, tmp_a_)) return false;
    history_.push_back(tmp_a_);
    gstates_.push_back(g);
    return true;
  }
  tmp_a_ = history_.back();
  for (char c : bytes) {
    if (!parser_.advance(tmp_a_, static_cast<std::uint8_t>(c), tmp_b_)) return false;
    std::swap(tmp_a_, tmp_b_);
  }
  history_.push_back(tmp_a_);
  gstates_.push_back(gstates_.back());
  return true;
}

bool GrammarMatcher::accept(TokenId id) {
  const TokenizerInfo& tok = g_->tokenizer();
  if (terminated_ || id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size()) return false;
  if (tok.is_eos(id)) {
    if (!history_.back().can_end) return false;
    ParseState end;  // terminal state: nothing more
    history_.push_back(end);
    gstates_.emplace_back();
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
    gstates_.pop_back();
    terminated_ = false;
  }
}

void GrammarMatcher::check_exact(const std::vector<TokenId>& ids, std::uint32_t* mask) {
  const TokenizerInfo& tok = g_->tokenizer();
  for (TokenId id : ids) {
    if (!(mask[id >> 5] >> (id & 31) & 1u)) continue;
    GroundState g = gstates_.back();
    if (!advance_grounded(history_.back(), g, tok.token(id), tmp_c_)) mask[id >> 5] &= ~(1u << (id & 31));
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
  if (!ground_) return;
  GroundState& g = gstates_.back();
  std::shared_ptr<const GroundMask> gm;
  if (g.lost) {
  } else if (g.kind) {
    gm = ground_->inside_mask(g);
  } else {
    std::array<std::uint8_t, 256> entry{};
    if (entry_bytes(history_.back(), entry)) gm = ground_->entry_mask(entry);
  }
  if (gm) {
    grammar_mask_.assign(mask.begin(), mask.begin() + static_cast<long>(words));
    const std::uint32_t* b = gm->bits.data();
    std::uint32_t any = 0;
    for (std::size_t w = 0; w < words; ++w) any |= (mask[w] &= b[w]);
    if (any) check_exact(gm->exact, mask.data());
    any = 0;
    for (std::size_t w = 0; w < words && !any; ++w) any |= mask[w];
    if (!any) {
      // A dead end: nothing the grammar allows here is in the document (a pattern the spans from here
      // cannot complete, a required number the document does not print). The value goes on ungrounded
      // (its record then fails rule:evidence) rather than leaving the sequence without a token.
      GroundingIndex::lose(g);
      std::copy(grammar_mask_.begin(), grammar_mask_.end(), mask.begin());
    }
  }
  if (!g.kind || g.lost)
    check_exact((g.json & 1) ? ground_->vocab().quote_candidates() : ground_->vocab().entry_candidates(), mask.data());
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
  // With grounding, stop before the first byte of a grounded value (it is the document's to choose).
  if (ground_ && !out.empty()) {
    ParseState st = history_.back(), nx;
    GroundState g = gstates_.back();
    std::size_t keep = 0;
    for (; keep < out.size(); ++keep) {
      if (g.kind) break;
      const auto byte = static_cast<std::uint8_t>(out[keep]);
      if (!parser_.advance(st, byte, nx)) break;
      std::swap(st, nx);
      const std::uint8_t k = region_kind(st);
      if (k == static_cast<std::uint8_t>(SourceKind::kNumber)) break;
      if (k) g = ground_->init(static_cast<SourceKind>(k));
    }
    out.resize(keep);
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
