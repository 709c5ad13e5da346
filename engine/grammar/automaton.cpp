// Code-point automata: ECMAScript regex parser -> Thompson NFA -> subset-construction DFA, products,
// complement, Moore minimisation, UTF-8 range sequences. See automaton.hpp for sources.
#include "engine/grammar/automaton.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>

namespace quarry::engine::grammar {

// ---------------------------------------------------------------------------------------------
// Code-point sets
// ---------------------------------------------------------------------------------------------

CpSet cp_normalize(CpSet s) {
  CpSet split;
  for (auto [lo, hi] : s) {
    if (lo > hi) continue;
    hi = std::min(hi, kMaxCodePoint);
    if (lo <= 0xDFFF && hi >= 0xD800) {  // cut out surrogates
      if (lo < 0xD800) split.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) split.push_back({0xE000, hi});
    } else if (lo <= hi) {
      split.push_back({lo, hi});
    }
  }
  std::sort(split.begin(), split.end());
  CpSet out;
  for (auto r : split) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CpSet cp_any() { return {{0, 0xD7FF}, {0xE000, kMaxCodePoint}}; }

CpSet cp_complement(const CpSet& s) {
  CpSet out;
  std::uint32_t next = 0;
  for (auto [lo, hi] : s) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return cp_normalize(out);
}

CpSet cp_intersect(const CpSet& a, const CpSet& b) {
  CpSet out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    std::uint32_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.push_back({lo, hi});
    if (a[i].second < b[j].second) ++i; else ++j;
  }
  return out;
}

bool cp_contains(const CpSet& s, std::uint32_t c) {
  auto it = std::upper_bound(s.begin(), s.end(), std::make_pair(c, kMaxCodePoint + 1));
  if (it == s.begin()) return false;
  --it;
  return it->first <= c && c <= it->second;
}

// ---------------------------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------------------------

std::int64_t utf8_decode(std::string_view s, std::size_t& i) {
  if (i >= s.size()) return -1;
  auto b0 = static_cast<unsigned char>(s[i]);
  int n;
  std::uint32_t cp;
  if (b0 < 0x80) { ++i; return b0; }
  if ((b0 & 0xE0) == 0xC0) { n = 2; cp = b0 & 0x1F; }
  else if ((b0 & 0xF0) == 0xE0) { n = 3; cp = b0 & 0x0F; }
  else if ((b0 & 0xF8) == 0xF0) { n = 4; cp = b0 & 0x07; }
  else return -1;
  if (i + n > s.size()) return -1;
  for (int k = 1; k < n; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  i += n;
  return cp;
}

void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
int utf8_len(std::uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void utf8_seq_rec(std::uint32_t lo, std::uint32_t hi,
                  std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>>& out) {
  if (lo > hi) return;
  // Split at encoding-length boundaries.
  static constexpr std::uint32_t kBound[3] = {0x7F, 0x7FF, 0xFFFF};
  for (std::uint32_t b : kBound) {
    if (lo <= b && hi > b) {
      utf8_seq_rec(lo, b, out);
      utf8_seq_rec(b + 1, hi, out);
      return;
    }
  }
  int n = utf8_len(lo);
  if (n == 1) {
    out.push_back({{static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi)}});
    return;
  }
  // Split until every continuation-byte position spans a full range or a single value.
  for (int i = 1; i < n; ++i) {
    std::uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_seq_rec(lo, lo | m, out);
        utf8_seq_rec((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_seq_rec(lo, (hi & ~m) - 1, out);
        utf8_seq_rec(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  utf8_append(a, lo);
  utf8_append(b, hi);
  std::vector<std::pair<std::uint8_t, std::uint8_t>> seq;
  for (int k = 0; k < n; ++k)
    seq.push_back({static_cast<std::uint8_t>(a[k]), static_cast<std::uint8_t>(b[k])});
  out.push_back(std::move(seq));
}
}  // namespace

std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> utf8_sequences(std::uint32_t lo,
                                                                               std::uint32_t hi) {
  std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> out;
  for (auto [a, b] : cp_normalize({{lo, hi}})) utf8_seq_rec(a, b, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Regex parser (ECMA-262 22.2 pattern grammar, Annex B leniencies for `{` and `]` literals)
// ---------------------------------------------------------------------------------------------

int Nfa::add_state() {
  out.emplace_back();
  eps.emplace_back();
  return static_cast<int>(out.size()) - 1;
}

namespace {

struct Re {
  enum Kind { kSet, kCat, kAlt, kRep, kBol, kEol } kind = kCat;
  CpSet set;
  std::vector<Re> kids;
  int min = 0, max = 0;  // kRep; max < 0: unbounded
};

CpSet class_digit() { return {{'0', '9'}}; }
CpSet class_word() { return cp_normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
CpSet class_space() {
  return cp_normalize({{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                       {0xFEFF, 0xFEFF}});
}
CpSet class_dot() { return cp_complement({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}}); }

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : p_(p) {}

  Re parse() {
    Re r = alternation();
    if (i_ < p_.size()) fail("unmatched ')'");
    return r;
  }

 private:
  std::string_view p_;
  std::size_t i_ = 0;

  [[noreturn]] void fail(const std::string& why) const {
    throw RegexError("regex /" + std::string(p_) + "/: " + why + " at offset " + std::to_string(i_));
  }
  bool eof() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }
  bool take(char c) {
    if (!eof() && p_[i_] == c) { ++i_; return true; }
    return false;
  }
  std::uint32_t next_cp() {
    std::int64_t c = utf8_decode(p_, i_);
    if (c < 0) fail("invalid UTF-8");
    return static_cast<std::uint32_t>(c);
  }

  Re alternation() {
    Re alt;
    alt.kind = Re::kAlt;
    alt.kids.push_back(concat());
    while (take('|')) alt.kids.push_back(concat());
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Re concat() {
    Re cat;
    cat.kind = Re::kCat;
    while (!eof() && peek() != '|' && peek() != ')') cat.kids.push_back(repeat());
    return cat;
  }

  bool parse_int(int& v) {
    std::size_t s = i_;
    long long x = 0;
    while (!eof() && peek() >= '0' && peek() <= '9') {
      x = x * 10 + (peek() - '0');
      if (x > 100000) fail("repetition count too large");
      ++i_;
    }
    v = static_cast<int>(x);
    return i_ > s;
  }

  Re repeat() {
    Re atom_re = atom();
    for (;;) {
      int mn, mx;
      if (take('*')) { mn = 0; mx = -1; }
      else if (take('+')) { mn = 1; mx = -1; }
      else if (take('?')) { mn = 0; mx = 1; }
      else if (!eof() && peek() == '{') {
        std::size_t save = i_;
        ++i_;
        if (!parse_int(mn)) { i_ = save; break; }  // Annex B: literal '{'
        if (take(',')) {
          if (!parse_int(mx)) mx = -1;
        } else {
          mx = mn;
        }
        if (!take('}')) { i_ = save; break; }
        if (mx >= 0 && mx < mn) fail("numbers out of order in {} quantifier");
      } else {
        break;
      }
      take('?');  // lazy quantifier: same language
      if (atom_re.kind == Re::kBol || atom_re.kind == Re::kEol) fail("quantifier on an anchor");
      Re r;
      r.kind = Re::kRep;
      r.min = mn;
      r.max = mx;
      r.kids.push_back(std::move(atom_re));
      atom_re = std::move(r);
    }
    return atom_re;
  }

  Re set_re(CpSet s) {
    Re r;
    r.kind = Re::kSet;
    r.set = cp_normalize(std::move(s));
    return r;
  }

  Re atom() {
    if (eof()) fail("unexpected end");
    char c = peek();
    if (c == '(') {
      ++i_;
      if (take('?')) {
        if (take(':')) {
        } else if (!eof() && (peek() == '=' || peek() == '!')) {
          fail("lookahead assertions are not supported");
        } else if (take('<')) {
          if (!eof() && (peek() == '=' || peek() == '!')) fail("lookbehind assertions are not supported");
          while (!eof() && peek() != '>') ++i_;  // named group
          if (!take('>')) fail("unterminated group name");
        } else {
          fail("unsupported group syntax '(?'");
        }
      }
      Re r = alternation();
      if (!take(')')) fail("missing ')'");
      return r;
    }
    if (c == '[') return char_class();
    if (c == '.') { ++i_; return set_re(class_dot()); }
    if (c == '^') { ++i_; Re r; r.kind = Re::kBol; return r; }
    if (c == '$') { ++i_; Re r; r.kind = Re::kEol; return r; }
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    if (c == ')') fail("unmatched ')'");
    if (c == '\\') {
      ++i_;
      CpSet s;
      if (escape(s, false)) return set_re(s);
      fail("bad escape");
    }
    std::uint32_t cp = next_cp();
    return set_re({{cp, cp}});
  }

  unsigned hex_digits(int n) {
    unsigned v = 0;
    for (int k = 0; k < n; ++k) {
      if (eof() || !std::isxdigit(static_cast<unsigned char>(peek()))) fail("bad hex escape");
      char h = peek();
      v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++i_;
    }
    return v;
  }

  // Parses the escape after '\'; fills s. Returns true (throws on unsupported ones).
  bool escape(CpSet& s, bool in_class) {
    if (eof()) fail("trailing backslash");
    char c = peek();
    ++i_;
    auto one = [&](std::uint32_t cp) { s = {{cp, cp}}; return true; };
    switch (c) {
      case 'd': s = class_digit(); return true;
      case 'D': s = cp_complement(class_digit()); return true;
      case 'w': s = class_word(); return true;
      case 'W': s = cp_complement(class_word()); return true;
      case 's': s = class_space(); return true;
      case 'S': s = cp_complement(class_space()); return true;
      case 't': return one('\t');
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'b':
        if (in_class) return one('\b');
        fail("word boundary assertions (\\b) are not supported");
      case 'B': fail("word boundary assertions (\\B) are not supported");
      case 'p': case 'P': fail("Unicode property escapes are not supported");
      case 'k': fail("named backreferences are not supported");
      case 'c': {
        if (eof() || !std::isalpha(static_cast<unsigned char>(peek()))) fail("bad \\c escape");
        return one(static_cast<std::uint32_t>(p_[i_++]) % 32);
      }
      case 'x': return one(hex_digits(2));
      case 'u': {
        if (take('{')) {
          unsigned v = 0;
          int n = 0;
          while (!eof() && peek() != '}') { v = v * 16 + hex_digits(1); if (++n > 6) fail("bad \\u{}"); }
          if (!take('}') || v > kMaxCodePoint) fail("bad \\u{} escape");
          return one(v);
        }
        unsigned v = hex_digits(4);
        if (v >= 0xD800 && v <= 0xDBFF && i_ + 6 <= p_.size() && p_[i_] == '\\' && p_[i_ + 1] == 'u') {
          std::size_t save = i_;
          i_ += 2;
          unsigned lo = hex_digits(4);
          if (lo >= 0xDC00 && lo <= 0xDFFF) return one(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
          i_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) { s = {}; return true; }  // lone surrogate: matches nothing
        return one(v);
      }
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported");
        --i_;
        return one(next_cp());  // identity escape
    }
  }

  Re char_class() {
    ++i_;  // '['
    bool negate = take('^');
    CpSet acc;
    while (!eof() && peek() != ']') {
      CpSet a;
      bool a_single = false;
      std::uint32_t a_cp = 0;
      if (take('\\')) {
        escape(a, true);
        a_single = a.size() == 1 && a[0].first == a[0].second;
        if (a_single) a_cp = a[0].first;
      } else {
        a_cp = next_cp();
        a = {{a_cp, a_cp}};
        a_single = true;
      }
      if (a_single && i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        std::uint32_t b_cp;
        if (take('\\')) {
          CpSet b;
          escape(b, true);
          if (b.size() != 1 || b[0].first != b[0].second) fail("bad character range");
          b_cp = b[0].first;
        } else {
          b_cp = next_cp();
        }
        if (b_cp < a_cp) fail("character range out of order");
        acc.push_back({a_cp, b_cp});
      } else {
        acc.insert(acc.end(), a.begin(), a.end());
      }
    }
    if (!take(']')) fail("missing ']'");
    acc = cp_normalize(acc);
    if (negate) acc = cp_complement(acc);
    return set_re(acc);
  }
};

class NfaBuilder {
 public:
  explicit NfaBuilder(Nfa& n) : n_(n) {}
  std::pair<int, int> build(const Re& r) {
    if (n_.out.size() > 100000) throw RegexError("regex too large (over 100000 automaton states)");
    int a = n_.add_state(), b;
    switch (r.kind) {
      case Re::kSet:
        b = n_.add_state();
        if (!r.set.empty()) n_.out[a].push_back({r.set, b});
        return {a, b};
      case Re::kCat: {
        int cur = a;
        for (const Re& k : r.kids) {
          auto [s, e] = build(k);
          n_.eps[cur].push_back(s);
          cur = e;
        }
        return {a, cur};
      }
      case Re::kAlt:
        b = n_.add_state();
        for (const Re& k : r.kids) {
          auto [s, e] = build(k);
          n_.eps[a].push_back(s);
          n_.eps[e].push_back(b);
        }
        return {a, b};
      case Re::kRep: {
        int cur = a;
        for (int k = 0; k < r.min; ++k) {
          auto [s, e] = build(r.kids[0]);
          n_.eps[cur].push_back(s);
          cur = e;
        }
        if (r.max < 0) {
          auto [s, e] = build(r.kids[0]);
          b = n_.add_state();
          n_.eps[cur].push_back(s);
          n_.eps[cur].push_back(b);
          n_.eps[e].push_back(s);
          n_.eps[e].push_back(b);
          return {a, b};
        }
        b = n_.add_state();
        n_.eps[cur].push_back(b);
        for (int k = r.min; k < r.max; ++k) {
          auto [s, e] = build(r.kids[0]);
          n_.eps[cur].push_back(s);
          n_.eps[e].push_back(b);
          cur = e;
        }
        return {a, b};
      }
      case Re::kBol:
      case Re::kEol:
        throw RegexError("anchors (^, $) are supported only at the start / end of an alternative");
    }
    return {a, a};
  }

 private:
  Nfa& n_;
};

// Flattens nested concatenations so that leading/trailing anchors of an alternative are visible.
void flatten_cat(const Re& r, std::vector<const Re*>& items) {
  if (r.kind == Re::kCat) {
    for (const Re& k : r.kids) flatten_cat(k, items);
  } else {
    items.push_back(&r);
  }
}

}  // namespace

Nfa parse_regex(std::string_view pattern, bool full_match) {
  Re root = RegexParser(pattern).parse();
  // Top-level alternatives: an alternative (or a single group holding alternatives) may start
  // with '^' and end with '$'; otherwise it matches anywhere (search semantics).
  std::vector<const Re*> alts;
  if (root.kind == Re::kAlt) {
    for (const Re& k : root.kids) alts.push_back(&k);
  } else {
    alts.push_back(&root);
  }
  // `^(a|b)$` : a concatenation [^, alt, $] whose middle is an alternation is handled by the
  // generic path below (anchors peeled off the concatenation).
  Nfa n;
  n.start = n.add_state();
  n.accept = n.add_state();
  NfaBuilder nb(n);
  for (const Re* alt : alts) {
    std::vector<const Re*> items;
    flatten_cat(*alt, items);
    bool bol = full_match, eol = full_match;
    std::size_t b = 0, e = items.size();
    while (b < e && items[b]->kind == Re::kBol) { bol = true; ++b; }
    while (e > b && items[e - 1]->kind == Re::kEol) { eol = true; --e; }
    int cur = n.add_state();
    n.eps[n.start].push_back(cur);
    if (!bol) n.out[cur].push_back({cp_any(), cur});
    for (std::size_t k = b; k < e; ++k) {
      auto [s, t] = nb.build(*items[k]);
      n.eps[cur].push_back(s);
      cur = t;
    }
    if (!eol) n.out[cur].push_back({cp_any(), cur});
    n.eps[cur].push_back(n.accept);
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// DFA operations
// ---------------------------------------------------------------------------------------------

namespace {
void eps_close(const Nfa& n, std::vector<int>& set) {
  std::vector<char> in(n.out.size(), 0);
  for (int s : set) in[s] = 1;
  for (std::size_t k = 0; k < set.size(); ++k)
    for (int t : n.eps[set[k]])
      if (!in[t]) { in[t] = 1; set.push_back(t); }
  std::sort(set.begin(), set.end());
}
}  // namespace

Dfa determinize(const Nfa& n, std::size_t max_states) {
  Dfa d;
  std::map<std::vector<int>, int> index;
  std::vector<std::vector<int>> sets;
  std::vector<int> s0{n.start};
  eps_close(n, s0);
  index[s0] = 0;
  sets.push_back(s0);
  d.out.emplace_back();
  d.accepting.push_back(std::binary_search(s0.begin(), s0.end(), n.accept));
  for (std::size_t k = 0; k < sets.size(); ++k) {
    // Elementary intervals from all boundaries of the outgoing edge sets.
    std::vector<std::uint32_t> cuts;
    for (int s : sets[k])
      for (const auto& e : n.out[s])
        for (auto [lo, hi] : e.set) { cuts.push_back(lo); cuts.push_back(hi + 1); }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
      std::uint32_t lo = cuts[c], hi = cuts[c + 1] - 1;
      std::vector<int> t;
      for (int s : sets[k])
        for (const auto& e : n.out[s])
          if (cp_contains(e.set, lo)) t.push_back(e.to);
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      eps_close(n, t);
      auto it = index.find(t);
      int id;
      if (it == index.end()) {
        if (sets.size() >= max_states)
          throw RegexError("automaton too large (over " + std::to_string(max_states) + " DFA states)");
        id = static_cast<int>(sets.size());
        index.emplace(t, id);
        d.accepting.push_back(std::binary_search(t.begin(), t.end(), n.accept));
        sets.push_back(std::move(t));
        d.out.emplace_back();
      } else {
        id = it->second;
      }
      auto& edges = d.out[k];
      if (!edges.empty() && edges.back().to == id && edges.back().hi + 1 == lo) edges.back().hi = hi;
      else edges.push_back({lo, hi, id});
    }
  }
  return minimize(d);
}

namespace {
// Transitions over elementary intervals that minimize() may create (see there).
constexpr std::size_t kMaxMinimizeTransitions = 50'000'000;
}  // namespace

Dfa minimize(const Dfa& in) {
  // 1. Keep states reachable from start that can reach an accepting state.
  std::size_t n = in.size();
  std::vector<std::vector<int>> rev(n);
  for (std::size_t s = 0; s < n; ++s)
    for (const auto& e : in.out[s]) rev[e.to].push_back(static_cast<int>(s));
  std::vector<char> live(n, 0), reach(n, 0);
  std::vector<int> work;
  for (std::size_t s = 0; s < n; ++s)
    if (in.accepting[s]) { live[s] = 1; work.push_back(static_cast<int>(s)); }
  while (!work.empty()) {
    int s = work.back();
    work.pop_back();
    for (int p : rev[s]) if (!live[p]) { live[p] = 1; work.push_back(p); }
  }
  Dfa empty;
  empty.out.emplace_back();
  empty.accepting.push_back(0);
  if (!live[in.start]) return empty;
  work.push_back(in.start);
  reach[in.start] = 1;
  while (!work.empty()) {
    int s = work.back();
    work.pop_back();
    for (const auto& e : in.out[s]) if (live[e.to] && !reach[e.to]) { reach[e.to] = 1; work.push_back(e.to); }
  }
  // 2. Partition refinement over the kept states: Valmari's O(m log n) algorithm for partial
  //    transition functions (A. Valmari, "Fast brief practical DFA minimization", Information
  //    Processing Letters 112(6), 2012), a Hopcroft-style refinement with "blocks" of states and
  //    "cords" of transitions. Moore's round-by-round refinement, used before, needs as many rounds
  //    as the longest chain of states (a maxLength string: one state per character), which is
  //    quadratic. The labels are the elementary code point intervals of all edges.
  std::vector<int> keep;
  std::vector<int> index(n, -1);
  for (std::size_t s = 0; s < n; ++s)
    if (reach[s]) {
      index[s] = static_cast<int>(keep.size());
      keep.push_back(static_cast<int>(s));
    }
  const int nn = static_cast<int>(keep.size());
  std::vector<std::uint32_t> cuts;
  for (int s : keep)
    for (const auto& e : in.out[s])
      if (reach[e.to]) {
        cuts.push_back(e.lo);
        cuts.push_back(e.hi + 1);
      }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<int> T, L, H;  // tail, label, head of each transition
  for (int s : keep)
    for (const auto& e : in.out[s]) {
      if (!reach[e.to]) continue;
      const auto first = std::lower_bound(cuts.begin(), cuts.end(), e.lo) - cuts.begin();
      const auto past = std::lower_bound(cuts.begin(), cuts.end(), e.hi + 1) - cuts.begin();
      if (T.size() + static_cast<std::size_t>(past - first) > kMaxMinimizeTransitions)
        throw RegexError("automaton too large to minimise (over " + std::to_string(kMaxMinimizeTransitions) +
                         " transitions)");
      for (auto l = first; l < past; ++l) {
        T.push_back(index[s]);
        L.push_back(static_cast<int>(l));
        H.push_back(index[e.to]);
      }
    }
  const int mm = static_cast<int>(T.size());
  // Refinable partitions (the paper's `partition`): E holds the elements grouped by set, L the
  // position of each element, S its set, F / P the first / past position of each set; M (marked
  // count per set) and W (touched sets) are shared by both partitions.
  std::vector<int> M(static_cast<std::size_t>(std::max(nn, mm)) + 1, 0), W(M.size(), 0);
  int w = 0;
  struct Partition {
    int z = 0;
    std::vector<int> E, Lc, S, F, P;
    void init(int count) {
      z = count > 0 ? 1 : 0;
      E.resize(count);
      Lc.resize(count);
      S.assign(count, 0);
      F.assign(count + 1, 0);
      P.assign(count + 1, 0);
      for (int i = 0; i < count; ++i) E[i] = Lc[i] = i;
      if (z) P[0] = count;
    }
    void mark(int e, std::vector<int>& M, std::vector<int>& W, int& w) {
      const int s = S[e], i = Lc[e], j = F[s] + M[s];
      E[i] = E[j];
      Lc[E[i]] = i;
      E[j] = e;
      Lc[e] = j;
      if (!M[s]++) W[w++] = s;
    }
    void split(std::vector<int>& M, std::vector<int>& W, int& w) {
      while (w) {
        const int s = W[--w], j = F[s] + M[s];
        if (j == P[s]) {
          M[s] = 0;
          continue;
        }
        if (M[s] <= P[s] - j) {
          F[z] = F[s];
          P[z] = F[s] = j;
        } else {
          P[z] = P[s];
          F[z] = P[s] = j;
        }
        for (int i = F[z]; i < P[z]; ++i) S[E[i]] = z;
        M[s] = M[z++] = 0;
      }
    }
  };
  Partition B, C;
  B.init(nn);
  for (int q = 0; q < nn; ++q)
    if (in.accepting[keep[q]]) B.mark(q, M, W, w);
  B.split(M, W, w);
  C.init(mm);
  if (mm) {
    std::sort(C.E.begin(), C.E.end(), [&](int a, int b) { return L[a] < L[b]; });
    C.z = 0;
    int a = L[C.E[0]];
    for (int i = 0; i < mm; ++i) {
      const int t = C.E[i];
      if (L[t] != a) {
        a = L[t];
        C.P[C.z++] = i;
        C.F[C.z] = i;
      }
      C.S[t] = C.z;
      C.Lc[t] = i;
    }
    C.P[C.z++] = mm;
  }
  // Incoming transitions of each state: A[Fin[q] .. Fin[q + 1]).
  std::vector<int> A(static_cast<std::size_t>(mm)), Fin(static_cast<std::size_t>(nn) + 1, 0);
  for (int t = 0; t < mm; ++t) ++Fin[H[t]];
  for (int q = 0; q < nn; ++q) Fin[q + 1] += Fin[q];
  for (int t = mm; t--;) A[--Fin[H[t]]] = t;
  for (int b = 1, c = 0; c < C.z;) {
    for (int i = C.F[c]; i < C.P[c]; ++i) B.mark(T[C.E[i]], M, W, w);
    B.split(M, W, w);
    ++c;
    while (b < B.z) {
      for (int i = B.F[b]; i < B.P[b]; ++i)
        for (int j = Fin[B.E[i]]; j < Fin[B.E[i] + 1]; ++j) C.mark(A[j], M, W, w);
      C.split(M, W, w);
      ++b;
    }
  }
  const std::size_t num = static_cast<std::size_t>(B.z);
  std::vector<int> cls(n, -1);
  for (int q = 0; q < nn; ++q) cls[keep[q]] = B.S[q];
  Dfa out;
  out.out.resize(num);
  out.accepting.assign(num, 0);
  std::vector<char> done(num, 0);
  for (int s : keep) {
    const int c = cls[s];
    if (done[c]) continue;
    done[c] = 1;
    out.accepting[c] = in.accepting[s];
    for (const auto& e : in.out[s]) {
      if (!reach[e.to]) continue;
      const int t = cls[e.to];
      auto& edges = out.out[c];
      if (!edges.empty() && edges.back().to == t && edges.back().hi + 1 == e.lo) edges.back().hi = e.hi;
      else edges.push_back({e.lo, e.hi, t});
    }
  }
  // Put the start state first for readability.
  int st = cls[in.start];
  if (st != 0) {
    std::swap(out.out[0], out.out[st]);
    std::swap(out.accepting[0], out.accepting[st]);
    for (auto& edges : out.out)
      for (auto& e : edges) e.to = e.to == st ? 0 : e.to == 0 ? st : e.to;
  }
  out.start = 0;
  return out;
}

Dfa dfa_intersect(const Dfa& a, const Dfa& b, std::size_t max_states) {
  Dfa d;
  std::map<std::pair<int, int>, int> index;
  std::vector<std::pair<int, int>> pairs{{a.start, b.start}};
  index[pairs[0]] = 0;
  d.out.emplace_back();
  d.accepting.push_back(a.accepting[a.start] && b.accepting[b.start]);
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    auto [sa, sb] = pairs[k];
    for (const auto& ea : a.out[sa]) {
      for (const auto& eb : b.out[sb]) {
        std::uint32_t lo = std::max(ea.lo, eb.lo), hi = std::min(ea.hi, eb.hi);
        if (lo > hi) continue;
        auto key = std::make_pair(ea.to, eb.to);
        auto it = index.find(key);
        int id;
        if (it == index.end()) {
          if (pairs.size() >= max_states) throw RegexError("string constraint automaton too large");
          id = static_cast<int>(pairs.size());
          index.emplace(key, id);
          pairs.push_back(key);
          d.out.emplace_back();
          d.accepting.push_back(a.accepting[ea.to] && b.accepting[eb.to]);
        } else {
          id = it->second;
        }
        d.out[k].push_back({lo, hi, id});
      }
    }
    std::sort(d.out[k].begin(), d.out[k].end(), [](const Dfa::Edge& x, const Dfa::Edge& y) { return x.lo < y.lo; });
  }
  return minimize(d);
}

Dfa dfa_complement(const Dfa& a) {
  Dfa d = a;
  int sink = static_cast<int>(d.out.size());
  d.out.emplace_back();
  d.accepting.push_back(0);
  for (auto& edges : d.out) {
    std::vector<Dfa::Edge> full;
    CpSet covered;
    for (const auto& e : edges) covered.push_back({e.lo, e.hi});
    for (auto [lo, hi] : cp_complement(cp_normalize(covered))) full.push_back({lo, hi, sink});
    full.insert(full.end(), edges.begin(), edges.end());
    std::sort(full.begin(), full.end(), [](const Dfa::Edge& x, const Dfa::Edge& y) { return x.lo < y.lo; });
    edges = std::move(full);
  }
  for (auto& acc : d.accepting) acc = !acc;
  return minimize(d);
}

Dfa dfa_length(std::int64_t min_len, std::int64_t max_len) {
  Dfa d;
  std::int64_t states = (max_len >= 0 ? max_len : min_len) + 1;
  if (states > 100000) throw RegexError("string length bound too large for the grammar (over 100000)");
  d.out.resize(static_cast<std::size_t>(states));
  d.accepting.resize(static_cast<std::size_t>(states));
  for (std::int64_t s = 0; s < states; ++s) {
    d.accepting[s] = s >= min_len;
    std::int64_t to = s + 1 < states ? s + 1 : (max_len < 0 ? s : -1);
    if (to >= 0)
      for (auto [lo, hi] : cp_any()) d.out[s].push_back({lo, hi, static_cast<int>(to)});
  }
  return d;
}

Dfa dfa_any_string() { return dfa_length(0, -1); }

Dfa dfa_literals(const std::vector<std::string>& words) {
  // The trie of the words is already deterministic: built directly (time and size linear in the
  // total length; subset construction over an NFA with one branch per word was quadratic in the
  // number of words), then minimised. Words that are not valid UTF-8 match nothing.
  Dfa d;
  d.out.emplace_back();
  d.accepting.push_back(0);
  std::vector<std::map<std::uint32_t, int>> child(1);
  for (const std::string& w : words) {
    std::vector<std::uint32_t> cps;
    std::size_t i = 0;
    bool ok = true;
    while (i < w.size()) {
      const std::int64_t c = utf8_decode(w, i);
      if (c < 0) {
        ok = false;
        break;
      }
      cps.push_back(static_cast<std::uint32_t>(c));
    }
    if (!ok) continue;
    int cur = 0;
    for (std::uint32_t c : cps) {
      auto [it, fresh] = child[static_cast<std::size_t>(cur)].emplace(c, static_cast<int>(child.size()));
      if (fresh) {
        child.emplace_back();
        d.out.emplace_back();
        d.accepting.push_back(0);
      }
      cur = it->second;
    }
    d.accepting[static_cast<std::size_t>(cur)] = 1;
  }
  for (std::size_t s = 0; s < child.size(); ++s)
    for (auto [c, to] : child[s]) d.out[s].push_back({c, c, to});  // std::map: sorted by code point
  return minimize(d);
}

bool dfa_is_empty(const Dfa& a) {
  Dfa m = minimize(a);
  return !m.accepting[m.start] && m.out[m.start].empty();
}

bool dfa_matches(const Dfa& a, std::string_view s) {
  int st = a.start;
  std::size_t i = 0;
  while (i < s.size()) {
    std::int64_t c = utf8_decode(s, i);
    if (c < 0) return false;
    int nx = -1;
    for (const auto& e : a.out[st])
      if (e.lo <= c && c <= e.hi) { nx = e.to; break; }
    if (nx < 0) return false;
    st = nx;
  }
  return a.accepting[st];
}

}  // namespace quarry::engine::grammar
