// JSON Schema -> byte-level grammar. See json_schema.hpp for the supported subset and semantics.
#include "engine/grammar/json_schema.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "engine/grammar/automaton.hpp"
#include "engine/grammar/grounding.hpp"

namespace quarry::engine::grammar {

namespace {

using Frag = GrammarBuilder::Frag;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k{
      "$schema", "$id", "id", "$comment", "title", "description", "default", "examples", "readOnly",
      "writeOnly", "deprecated", "$anchor", "$dynamicAnchor", "$vocabulary", "contentMediaType",
      "contentEncoding", "contentSchema", "definitions", "$defs", "format"};
  return k;
}
const std::set<std::string>& handled_keywords() {
  static const std::set<std::string> k{
      "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
      "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
      "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf",
      "$ref", "uniqueItems", "multipleOf", "minProperties", "maxProperties", "propertyNames", "not", "x-quarry-patterns", "x-quarry-formats", "x-quarry-multipleOf",
      "x-quarry-not-strings", "x-quarry-not-patterns", "x-quarry-source", "contains", "minContains", "maxContains", "if", "then", "else",
      "dependencies", "dependentRequired", "dependentSchemas"};
  return k;
}
const std::set<std::string>& unsupported_keywords() {
  static const std::set<std::string> k{
      "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef",
      "$recursiveAnchor"};
  return k;
}

std::string escape_pointer_token(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '~') o += "~0";
    else if (c == '/') o += "~1";
    else o += c;
  }
  return o;
}

std::string type_of(const ordered_json& v) {
  switch (v.type()) {
    case ordered_json::value_t::null: return "null";
    case ordered_json::value_t::boolean: return "boolean";
    case ordered_json::value_t::number_integer:
    case ordered_json::value_t::number_unsigned: return "integer";
    case ordered_json::value_t::number_float: {
      double d = v.get<double>();
      return (std::isfinite(d) && std::floor(d) == d) ? "integer" : "number";
    }
    case ordered_json::value_t::string: return "string";
    case ordered_json::value_t::array: return "array";
    case ordered_json::value_t::object: return "object";
    default: return "unknown";
  }
}

// Equal-length decimal strings a <= b -> regex of the integers between them.
std::string digits_range(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a == b) return a;
  if (a[0] == b[0]) return std::string(1, a[0]) + digits_range(a.substr(1), b.substr(1));
  std::size_t rest = a.size() - 1;
  auto all = [](const std::string& s, std::size_t from, char c) {
    return std::all_of(s.begin() + static_cast<long>(from), s.end(), [c](char x) { return x == c; });
  };
  auto any_digits = [&](std::size_t n) { return n == 0 ? std::string() : "[0-9]{" + std::to_string(n) + "}"; };
  auto cls = [](char lo, char hi) { return lo == hi ? std::string(1, lo) : std::string("[") + lo + "-" + hi + "]"; };
  std::vector<std::string> alts;
  char mlo = a[0], mhi = b[0];
  if (!all(a, 1, '0')) {
    alts.push_back(std::string(1, a[0]) + "(?:" + digits_range(a.substr(1), std::string(rest, '9')) + ")");
    ++mlo;
  }
  std::string high;
  if (!all(b, 1, '9')) {
    high = std::string(1, b[0]) + "(?:" + digits_range(std::string(rest, '0'), b.substr(1)) + ")";
    --mhi;
  }
  if (mlo <= mhi) alts.push_back(cls(mlo, mhi) + any_digits(rest));
  if (!high.empty()) alts.push_back(high);
  std::string o = "(?:";
  for (std::size_t i = 0; i < alts.size(); ++i) o += (i ? "|" : "") + alts[i];
  return o + ")";
}

// Regex of the decimal integers in [lo, hi] (no sign, no leading zeros); hi empty = unbounded.
std::string uint_range(std::uint64_t lo, std::optional<std::uint64_t> hi) {
  std::vector<std::string> alts;
  std::string slo = std::to_string(lo);
  std::size_t dlo = slo.size();
  std::size_t dhi = hi ? std::to_string(*hi).size() : dlo;
  for (std::size_t d = dlo; d <= dhi; ++d) {
    std::string a = slo;
    if (d != dlo) {  // 10^(d-1)
      a.assign(d, '0');
      a[0] = '1';
    }
    std::string b = (hi && d == dhi) ? std::to_string(*hi) : std::string(d, '9');
    if (a.size() == b.size() && a <= b) alts.push_back(digits_range(a, b));
  }
  if (!hi) {
    std::string longer = "[1-9][0-9]{";  // (built stepwise: GCC 12 -Wrestrict false positive on "lit" + string&&)
    longer += std::to_string(dlo);
    longer += ",}";
    alts.push_back(std::move(longer));
  }
  if (alts.empty()) return "";
  std::string o = "(?:";
  for (std::size_t i = 0; i < alts.size(); ++i) o += (i ? "|" : "") + alts[i];
  return o + ")";
}

const char* kFracAny = "(?:\\.[0-9]+)?";
const char* kFracZero = "(?:\\.0+)?";
const char* kFracNonzero = "\\.[0-9]*[1-9][0-9]*";

const std::map<std::string, std::string>& format_regexes() {
  static const std::map<std::string, std::string> f = [] {
    std::map<std::string, std::string> m;
    // RFC 3339 full-date with the day range of each month; 29 February only in leap years
    // (divisible by 4, and not by 100 unless by 400).
    std::string leap = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";
    std::string date = "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|" +
                       leap + "-02-29)";
    std::string time =
        "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    m["date"] = date;
    m["time"] = time;
    m["date-time"] = date + "[Tt]" + time;
    std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
    std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    m["email"] = atext + "+(?:\\." + atext + "+)*@" + label + "(?:\\." + label + ")*";
    m["uri"] = "[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9._~:/?#\\[\\]@!$&'()*+,;=%-]*";
    m["uuid"] = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
    std::string oct = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    m["ipv4"] = oct + "(?:\\." + oct + "){3}";
    std::string h = "[0-9a-fA-F]{1,4}";
    std::string v4 = m["ipv4"];
    std::string ls32 = "(?:" + h + ":" + h + "|" + v4 + ")";
    // RFC 3986 IPv6address
    m["ipv6"] = "(?:(?:" + h + ":){6}" + ls32 + "|::(?:" + h + ":){5}" + ls32 + "|(?:" + h + ")?::(?:" + h +
                ":){4}" + ls32 + "|(?:(?:" + h + ":){0,1}" + h + ")?::(?:" + h + ":){3}" + ls32 + "|(?:(?:" +
                h + ":){0,2}" + h + ")?::(?:" + h + ":){2}" + ls32 + "|(?:(?:" + h + ":){0,3}" + h + ")?::" +
                h + ":" + ls32 + "|(?:(?:" + h + ":){0,4}" + h + ")?::" + ls32 + "|(?:(?:" + h + ":){0,5}" +
                h + ")?::" + h + "|(?:(?:" + h + ":){0,6}" + h + ")?::)";
    return m;
  }();
  return f;
}

// Automata of the supported formats: built once per process on first use (thread-safe static
// initialisation), immutable afterwards.
const std::map<std::string, Dfa>& format_dfas() {
  static const std::map<std::string, Dfa> m = [] {
    std::map<std::string, Dfa> out;
    for (const auto& [name, re] : format_regexes()) out.emplace(name, determinize(parse_regex(re, true)));
    return out;
  }();
  return m;
}

class Compiler {
 public:
  Compiler(const ordered_json& root, const SchemaOptions& opt) : root_(root), opt_(opt) {
    draft_ = opt.draft;
    if (draft_ == Draft::kAuto) {
      draft_ = Draft::k2020_12;
      if (root.is_object() && root.contains("$schema") && root["$schema"].is_string()) {
        std::string s = root["$schema"].get<std::string>();
        if (s.find("draft-04") != std::string::npos) draft_ = Draft::k4;
        else if (s.find("draft-06") != std::string::npos) draft_ = Draft::k6;
        else if (s.find("draft-07") != std::string::npos) draft_ = Draft::k7;
        else if (s.find("2019-09") != std::string::npos) draft_ = Draft::k2019_09;
      }
    }
  }

  SchemaCompileResult run() {
    SchemaCompileResult res;
    res.draft = draft_;
    check_in_place_graph();
    std::uint32_t top = b_.add_rule("root");
    Frag f = b_.seq({ws(), b_.call(rule_for(root_, "")), ws()});
    b_.set_body(top, f);
    // Rule bodies are built from a work list, not by recursion: a chain of $ref (type 1 has an
    // array of type 2, which has ...) is as long as the schema, not as deep as the C++ stack.
    while (!pending_.empty()) {
      Pending p = std::move(pending_.back());
      pending_.pop_back();
      current_ptr_ = p.ptr;
      b_.set_body(p.rule, body(p.schema, p.ptr));
      check_node_budget(0);
    }
    try {
      res.grammar = b_.finish(top);
    } catch (const GrammarError& e) {
      throw SchemaError("", "", e.what());
    }
    res.warnings = std::move(warnings_);
    res.post_validation = std::move(post_);
    return res;
  }

 private:
  const ordered_json& root_;
  SchemaOptions opt_;
  Draft draft_;
  GrammarBuilder b_;
  std::map<std::string, std::uint32_t> memo_;
  std::vector<std::string> warnings_, post_;
  std::optional<std::uint32_t> r_any_, r_string_, r_number_, r_any_obj_, r_any_arr_;
  std::map<std::string, Dfa> regex_cache_;
  int inline_depth_ = 0;
  bool inline_numbers_ = false;  // number_frag builds its own nodes (a grounded number is tagged)
  // Rules whose body is still to be built (see run()).
  struct Pending {
    ordered_json schema;
    std::string ptr;
    std::uint32_t rule;
  };
  std::vector<Pending> pending_;
  std::string current_ptr_;           // the schema whose rule is being built (for errors)
  std::set<std::string> post_noted_;  // post_validation entries added by note_post
  // $ref string -> (target, its JSON pointer): a $ref by name searches the whole document once.
  std::map<std::string, std::pair<const ordered_json*, std::string>> resolved_;

  bool legacy_ref() const { return draft_ == Draft::k4 || draft_ == Draft::k6 || draft_ == Draft::k7; }

  // Refuses the schema when the grammar would grow past kMaxGrammarNodes with `more` nodes.
  void check_node_budget(std::size_t more) {
    if (b_.num_nodes() + more > kMaxGrammarNodes)
      throw SchemaError(current_ptr_, "",
                        "the grammar of this schema would exceed " + std::to_string(kMaxGrammarNodes) +
                            " nodes (long length / item bounds, large patterns or many distinct subschemas)");
  }

  void note_post(const std::string& msg) {
    if (post_noted_.insert(msg).second) post_.push_back(msg);
  }

  void warn(const std::string& ptr, const std::string& msg) {
    warnings_.push_back((ptr.empty() ? "(root)" : ptr) + ": " + msg);
  }

  Frag ws() {
    if (opt_.max_whitespace <= 0) return b_.empty();
    std::uint32_t a = b_.node(), cur = a;
    std::vector<std::uint32_t> ends{a};
    for (int k = 0; k < opt_.max_whitespace; ++k) {
      std::uint32_t nx = b_.node();
      for (char c : std::string(" \t\n\r")) {
        Frag e = b_.bytes(static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(c));
        b_.eps(cur, e.in);
        b_.eps(e.out, nx);
      }
      cur = nx;
      ends.push_back(cur);
    }
    std::uint32_t out = b_.node();
    for (auto e : ends) b_.eps(e, out);
    return {a, out};
  }
  Frag lit(const std::string& s) {  // structural literal with optional whitespace around
    if (opt_.max_whitespace <= 0) return b_.literal(s);
    return b_.seq({ws(), b_.literal(s), ws()});
  }

  // ---- rules for shared pieces --------------------------------------------------------------

  std::uint32_t any_rule() {
    if (r_any_) return *r_any_;
    r_any_ = b_.add_rule("any");
    r_any_obj_ = b_.add_rule("any_object");
    r_any_arr_ = b_.add_rule("any_array");
    std::uint32_t rs = string_rule(), rn = number_rule();
    b_.set_body(*r_any_, b_.alt({b_.literal("null"), b_.literal("true"), b_.literal("false"), b_.call(rn), b_.call(rs),
                                 b_.call(*r_any_obj_), b_.call(*r_any_arr_)}));
    // object: "{" (member ("," member)*)? "}"
    {
      auto member = [&] { return b_.seq({b_.call(rs), lit(":"), b_.call(*r_any_)}); };
      Frag first = member();
      Frag more = b_.star(b_.seq({lit(","), member()}));
      Frag body = b_.opt(b_.seq({first, more}));
      b_.set_body(*r_any_obj_, b_.seq({lit("{"), body, lit("}")}));
    }
    {
      Frag first = b_.call(*r_any_);
      Frag more = b_.star(b_.seq({lit(","), b_.call(*r_any_)}));
      b_.set_body(*r_any_arr_, b_.seq({lit("["), b_.opt(b_.seq({first, more})), lit("]")}));
    }
    return *r_any_;
  }

  std::uint32_t string_rule() {
    if (r_string_) return *r_string_;
    r_string_ = b_.add_rule("string");
    b_.set_body(*r_string_, b_.seq({b_.literal("\""), lower(dfa_any_string(), true), b_.literal("\"")}));
    return *r_string_;
  }

  std::uint32_t number_rule() {
    if (r_number_) return *r_number_;
    r_number_ = b_.add_rule("number");
    b_.set_body(*r_number_, regex_frag("-?(?:0|[1-9][0-9]*)(?:\\." + frac_digits() + ")?(?:[eE][+-]?[0-9]+)?", ""));
    return *r_number_;
  }

  // Fraction digits as generated: at most SchemaOptions::max_fraction_digits (0 = unbounded).
  std::string frac_digits() const {
    return opt_.max_fraction_digits > 0 ? "[0-9]{1," + std::to_string(opt_.max_fraction_digits) + "}" : "[0-9]+";
  }
  const Dfa& frac_cap() {
    return regex_dfa("-?[0-9]+(?:\\." + frac_digits() + ")?(?:[eE][+-]?[0-9]+)?", true, "");
  }

  const Dfa& regex_dfa(const std::string& re, bool full, const std::string& ptr) {
    std::string key = (full ? "F" : "S") + re;
    auto it = regex_cache_.find(key);
    if (it != regex_cache_.end()) return it->second;
    try {
      return regex_cache_.emplace(key, determinize(parse_regex(re, full))).first->second;
    } catch (const RegexError& e) {
      throw SchemaError(ptr, "pattern", e.what());
    }
  }

  Frag regex_frag(const std::string& re, const std::string& ptr) { return lower(regex_dfa(re, true, ptr), false); }

  // Lowers a code-point DFA to bytes. With json_escape, code points are written as inside a JSON
  // string (dump_compact's escaping).
  Frag lower(const Dfa& d, bool json_escape) {
    {
      // The nodes it will create (3 per byte range, about 30 per escape branch), before creating them.
      std::size_t more = d.size() + 1;
      for (const auto& edges : d.out)
        for (const auto& e : edges) {
          more += json_escape ? 40 : 0;
          for (const auto& seq : utf8_sequences(e.lo, e.hi)) more += 3 * seq.size();
        }
      check_node_budget(more);
    }
    std::vector<std::uint32_t> st(d.size());
    for (auto& s : st) s = b_.node();
    std::uint32_t out = b_.node();
    for (std::size_t s = 0; s < d.size(); ++s) {
      if (d.accepting[s]) b_.eps(st[s], out);
      for (const auto& e : d.out[s]) {
        std::uint32_t to = st[e.to];
        auto add_seq = [&](const std::vector<std::pair<std::uint8_t, std::uint8_t>>& seq) {
          std::uint32_t cur = st[s];
          for (std::size_t k = 0; k < seq.size(); ++k) {
            std::uint32_t nx = k + 1 == seq.size() ? to : b_.node();
            Frag f = b_.bytes(seq[k].first, seq[k].second);
            b_.eps(cur, f.in);
            b_.eps(f.out, nx);
            cur = nx;
          }
        };
        auto add_lit = [&](const std::string& lit) {
          std::vector<std::pair<std::uint8_t, std::uint8_t>> seq;
          for (char c : lit) seq.push_back({static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(c)});
          add_seq(seq);
        };
        std::uint32_t lo = e.lo, hi = e.hi;
        if (json_escape && lo == 0 && hi >= 0x1F) {
          // Every control character: \b \t \n \f \r or \u00xx (lowercase hex) as one compact
          // branch instead of 32 separate escapes.
          std::uint32_t bs = b_.node(), u0 = b_.node(), u1 = b_.node(), u2 = b_.node(), h0 = b_.node(), h1 = b_.node();
          auto edge = [&](std::uint32_t from, std::uint8_t a, std::uint8_t z, std::uint32_t dst) {
            Frag f = b_.bytes(a, z);
            b_.eps(from, f.in);
            b_.eps(f.out, dst);
          };
          edge(st[s], '\\', '\\', bs);
          for (char c : std::string("btnfr")) edge(bs, static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(c), to);
          edge(bs, 'u', 'u', u0);
          edge(u0, '0', '0', u1);
          edge(u1, '0', '0', u2);
          edge(u2, '0', '0', h0);
          edge(u2, '1', '1', h1);
          edge(h0, '0', '7', to);  // 00-07
          edge(h0, 'b', 'b', to);  // 0b
          edge(h0, 'e', 'f', to);  // 0e-0f
          edge(h1, '0', '9', to);  // 10-1f
          edge(h1, 'a', 'f', to);
          lo = 0x20;
        }
        if (json_escape) {
          for (std::uint32_t c = lo; c <= std::min<std::uint32_t>(hi, 0x1F); ++c) {
            static const char* kShort[] = {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                           "\\b", "\\t", "\\n", nullptr, "\\f", "\\r"};
            if (c < 14 && kShort[c]) {
              add_lit(kShort[c]);
            } else {
              char buf[8];
              std::snprintf(buf, sizeof buf, "\\u%04x", c);
              add_lit(buf);
            }
          }
          if (hi < 0x20) continue;
          lo = std::max<std::uint32_t>(lo, 0x20);
          std::vector<std::pair<std::uint32_t, std::uint32_t>> parts;
          std::uint32_t cur = lo;
          for (std::uint32_t sp : {0x22u, 0x5Cu}) {
            if (sp >= cur && sp <= hi) {
              if (sp > cur) parts.push_back({cur, sp - 1});
              add_lit(sp == 0x22 ? "\\\"" : "\\\\");
              cur = sp + 1;
            }
          }
          if (cur <= hi) parts.push_back({cur, hi});
          for (auto [a, z] : parts)
            for (const auto& seq : utf8_sequences(a, z)) add_seq(seq);
        } else {
          for (const auto& seq : utf8_sequences(lo, hi)) add_seq(seq);
        }
      }
    }
    return {st[d.start], out};
  }

  // ---- $ref ----------------------------------------------------------------------------------

  const ordered_json* find_id(const ordered_json& s, const std::string& id, std::string& ptr, const std::string& here) {
    if (s.is_object()) {
      for (const char* key : {"$id", "id", "$anchor"}) {
        if (s.contains(key) && s[key].is_string()) {
          std::string v = s[key].get<std::string>();
          if (std::string(key) == "$anchor") v = "#" + v;
          if (v == id) { ptr = here; return &s; }
        }
      }
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (it.key() == "enum" || it.key() == "const") continue;
        if (auto* r = find_id(it.value(), id, ptr, here + "/" + escape_pointer_token(it.key()))) return r;
      }
    } else if (s.is_array()) {
      for (std::size_t i = 0; i < s.size(); ++i)
        if (auto* r = find_id(s[i], id, ptr, here + "/" + std::to_string(i))) return r;
    }
    return nullptr;
  }

  const ordered_json& resolve(const std::string& ref, const std::string& ptr, std::string& target_ptr) {
    if (auto it = resolved_.find(ref); it != resolved_.end()) {
      target_ptr = it->second.second;
      return *it->second.first;
    }
    const ordered_json& t = resolve_uncached(ref, ptr, target_ptr);
    resolved_.emplace(ref, std::make_pair(&t, target_ptr));
    return t;
  }

  const ordered_json& resolve_uncached(const std::string& ref, const std::string& ptr, std::string& target_ptr) {
    if (ref.empty() || ref[0] != '#') {
      std::string p;
      if (auto* r = find_id(root_, ref, p, "")) { target_ptr = p; return *r; }
      throw SchemaError(ptr, "$ref", "unsupported $ref '" + ref + "' (only references inside this document)");
    }
    if (ref.size() > 1 && ref[1] != '/') {
      std::string p;
      if (auto* r = find_id(root_, ref, p, "")) { target_ptr = p; return *r; }
      throw SchemaError(ptr, "$ref", "$ref '" + ref + "': no $anchor / $id with that name");
    }
    const ordered_json* cur = &root_;
    std::string p;
    std::size_t i = 1;
    while (i < ref.size()) {
      std::size_t j = ref.find('/', i + 1);
      std::string raw = ref.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string tok;
      for (std::size_t k = 0; k < raw.size(); ++k) {  // percent-decoding
        if (raw[k] == '%' && k + 2 < raw.size() + 0 && std::isxdigit(static_cast<unsigned char>(raw[k + 1])) &&
            std::isxdigit(static_cast<unsigned char>(raw[k + 2]))) {
          tok += static_cast<char>(std::stoi(raw.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          tok += raw[k];
        }
      }
      std::string key;
      for (std::size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size() && (tok[k + 1] == '0' || tok[k + 1] == '1')) {
          key += tok[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += tok[k];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit) &&
                 std::stoul(key) < cur->size()) {
        cur = &(*cur)[std::stoul(key)];
      } else {
        throw SchemaError(ptr, "$ref", "$ref '" + ref + "' does not resolve in this document");
      }
      p += "/" + escape_pointer_token(key);
      if (j == std::string::npos) break;
      i = j;
    }
    target_ptr = p;
    return *cur;
  }

  // ---- $ref cycles that make no progress ---------------------------------------------------------
  //
  // In-place applicators ($ref, allOf, anyOf, oneOf, not, if / then / else, dependentSchemas and the
  // schema form of dependencies) apply a schema to the same value; the others (properties, items,
  // additionalProperties, contains, propertyNames, ...) to a part of it. A cycle of in-place edges
  // ({"$ref": "#"}, two definitions referring to each other, {"anyOf": [{"$ref": "#"}, ...]}) never
  // reaches a smaller value: it is refused with the JSON pointers of the cycle. Recursion through a
  // part (a tree: {"items": {"$ref": "#"}}) is fine. The same graph bounds the work of merging: the
  // schemas applied in place to one value (paths of in-place edges, with multiplicity: a chain of
  // allOf that each name the next definition twice doubles at every step) are at most
  // kMaxInPlacePaths. Only what the root reaches is checked (unused definitions are not compiled).
  static constexpr std::uint64_t kMaxInPlacePaths = 100000;
  /// Declared properties of one object schema (see also kMaxSchemaObjectKeys).
  static constexpr std::size_t kMaxObjectProperties = 20000;
  /// Declared properties x (maxProperties + 1) of one object schema (member counting).
  static constexpr std::size_t kMaxCountedMembers = 200000;
  /// Declared members per block of a long object (see object_frag).
  static constexpr std::size_t kMemberBlock = 64;
  /// Longest string length bound enforced by the grammar (characters); see string_dfa.
  static constexpr std::int64_t kMaxGrammarStringLength = 1024;
  /// Grammar nodes one schema may compile to (about 250 bytes each while building).
  static constexpr std::size_t kMaxGrammarNodes = 2000000;

  void check_in_place_graph() {
    struct Info {
      std::string ptr;
      std::vector<std::size_t> in_place;
    };
    std::vector<const ordered_json*> nodes;
    std::vector<Info> info;
    std::unordered_map<const ordered_json*, std::size_t> id;
    auto visit = [&](const ordered_json& s, const std::string& ptr) {
      auto [it, fresh] = id.emplace(&s, nodes.size());
      if (fresh) {
        nodes.push_back(&s);
        info.push_back({ptr, {}});
      }
      return it->second;
    };
    visit(root_, "");
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      const ordered_json& s = *nodes[k];
      if (!s.is_object()) continue;
      const std::string ptr = info[k].ptr;
      auto in_place = [&](const ordered_json& c, const std::string& p) {
        const std::size_t j = visit(c, p);
        info[k].in_place.push_back(j);
      };
      auto part = [&](const ordered_json& c, const std::string& p) { visit(c, p); };
      auto at = [&](const std::string& kw) { return ptr + "/" + kw; };
      if (s.contains("$ref") && s["$ref"].is_string()) {
        std::string tp;
        try {
          in_place(resolve(s["$ref"].get<std::string>(), at("$ref"), tp), tp);
        } catch (const SchemaError&) {
          // reported where the $ref is compiled
        }
        if (legacy_ref()) continue;  // siblings of $ref are ignored before 2019-09
      }
      for (const char* kw : {"allOf", "anyOf", "oneOf"})
        if (s.contains(kw) && s[kw].is_array())
          for (std::size_t i = 0; i < s[kw].size(); ++i) in_place(s[kw][i], at(kw) + "/" + std::to_string(i));
      for (const char* kw : {"not", "if", "then", "else"})
        if (s.contains(kw) && keyword_active(kw)) in_place(s[kw], at(kw));
      for (const char* kw : {"dependentSchemas", "dependencies"})
        if (s.contains(kw) && s[kw].is_object() && keyword_active(kw))
          for (auto it = s[kw].begin(); it != s[kw].end(); ++it)
            if (it.value().is_object() || it.value().is_boolean())
              in_place(it.value(), at(kw) + "/" + escape_pointer_token(it.key()));
      for (const char* kw : {"properties", "patternProperties"})
        if (s.contains(kw) && s[kw].is_object())
          for (auto it = s[kw].begin(); it != s[kw].end(); ++it)
            part(it.value(), at(kw) + "/" + escape_pointer_token(it.key()));
      for (const char* kw : {"items", "prefixItems"})
        if (s.contains(kw) && s[kw].is_array())
          for (std::size_t i = 0; i < s[kw].size(); ++i) part(s[kw][i], at(kw) + "/" + std::to_string(i));
      for (const char* kw : {"additionalProperties", "items", "additionalItems", "contains", "propertyNames",
                             "unevaluatedItems", "unevaluatedProperties"})
        if (s.contains(kw) && (s[kw].is_object() || s[kw].is_boolean())) part(s[kw], at(kw));
    }
    // Depth-first search over the in-place edges (iterative: the graph may be as long as the
    // schema): a back edge is a cycle; at a node's finish its path count is 1 + its children's.
    const std::size_t n = nodes.size();
    std::vector<char> color(n, 0);  // 0 new, 1 on the stack, 2 done
    std::vector<std::uint64_t> paths(n, 1);
    std::vector<std::pair<std::size_t, std::size_t>> stack;  // node, next child
    for (std::size_t r = 0; r < n; ++r) {
      if (color[r]) continue;
      color[r] = 1;
      stack.push_back({r, 0});
      while (!stack.empty()) {
        const std::size_t v = stack.back().first;
        if (stack.back().second < info[v].in_place.size()) {
          const std::size_t w = info[v].in_place[stack.back().second++];
          if (color[w] == 1) {
            std::string cycle;
            std::size_t from = 0;
            while (stack[from].first != w) ++from;
            for (std::size_t i = from; i < stack.size(); ++i)
              cycle += (info[stack[i].first].ptr.empty() ? "(root)" : info[stack[i].first].ptr) + " -> ";
            cycle += info[w].ptr.empty() ? "(root)" : info[w].ptr;
            throw SchemaError(info[w].ptr, "$ref",
                              "$ref cycle that makes no progress: " + cycle +
                                  " (each step applies a schema to the same value; none descends into a part of it)");
          }
          if (color[w] == 0) {
            color[w] = 1;
            stack.push_back({w, 0});
          }
          continue;
        }
        std::uint64_t p = 1;
        for (std::size_t w : info[v].in_place) p = std::min(p + paths[w], kMaxInPlacePaths + 1);
        if (p > kMaxInPlacePaths)
          throw SchemaError(info[v].ptr, "allOf",
                            "the in-place applicators below (allOf, anyOf, oneOf, $ref, not, if) apply more than " +
                                std::to_string(kMaxInPlacePaths) + " schemas to one value");
        paths[v] = p;
        color[v] = 2;
        stack.pop_back();
      }
    }
  }

  // ---- keyword checks --------------------------------------------------------------------------

  void check_keywords(const ordered_json& s, const std::string& ptr) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      bool bad = unsupported_keywords().count(k) > 0;
      bool known = handled_keywords().count(k) || annotation_keywords().count(k);
      // Keywords of later drafts are unknown (ignored) in earlier ones.
      if ((k == "if" || k == "then" || k == "else") && (draft_ == Draft::k4 || draft_ == Draft::k6)) known = false;
      if ((k == "contains") && draft_ == Draft::k4) known = false;
      if ((k == "minContains" || k == "maxContains" || k == "dependentRequired" || k == "dependentSchemas") && legacy_ref())
        known = false;
      if (bad) {
        std::string at = ptr + "/" + escape_pointer_token(k);
        if (!opt_.lenient)
          throw SchemaError(at, k, "unsupported keyword '" + k + "' (use lenient mode to ignore it)");
        warn(at, "unsupported keyword '" + k + "' ignored (lenient)");
      } else if (!known) {
        // Unknown keywords are ignored by JSON Schema; say so.
        warn(ptr + "/" + escape_pointer_token(k), "unknown keyword '" + k + "' ignored");
      }
    }
  }

  // Whether a keyword means something in the schema's draft (later drafts' keywords are unknown,
  // hence ignored, in earlier ones).
  bool keyword_active(const std::string& k) const {
    if (k == "if" || k == "then" || k == "else") return !(draft_ == Draft::k4 || draft_ == Draft::k6);
    if (k == "contains") return draft_ != Draft::k4;
    if (k == "minContains" || k == "maxContains" || k == "dependentRequired" || k == "dependentSchemas") return !legacy_ref();
    return true;
  }

  // ---- conditional keywords, rewritten as allOf / anyOf ------------------------------------------
  //
  //   dependentRequired {A: [B..]}  = anyOf [ A absent, required [A, B..] ]
  //   dependentSchemas  {A: S}      = anyOf [ A absent, allOf [required [A], S] ]
  //   dependencies (drafts 4-7)     = either of the two, by the value's form
  //   if I then T else E            = anyOf [ allOf [I, T], allOf [not I, E] ]
  // "A absent" is {"properties": {A: false}}. `not I` is built by negate() for the keywords it
  // knows; otherwise the second branch is E alone (a superset: instances that pass I and E but
  // fail T are then accepted) and the schema is listed in post_validation.

  bool has_conditional(const ordered_json& s) const {
    if (!s.is_object()) return false;
    for (const char* k : {"if", "dependencies", "dependentRequired", "dependentSchemas"})
      if (s.contains(k) && keyword_active(k)) return true;
    return false;
  }

  ordered_json desugar(const ordered_json& s, const std::string& ptr) {
    if (!has_conditional(s)) return s;
    ordered_json out = s;
    ordered_json extra = ordered_json::array();
    auto absent = [](const std::string& k) { return ordered_json{{"properties", ordered_json{{k, false}}}}; };
    auto dep_required = [&](const std::string& k, const ordered_json& list, const std::string& at) {
      if (!list.is_array()) throw SchemaError(at, "dependentRequired", "dependent property names must be an array");
      ordered_json req = ordered_json::array({k});
      for (const auto& x : list) {
        if (!x.is_string()) throw SchemaError(at, "dependentRequired", "dependent property names must be strings");
        req.push_back(x);
      }
      extra.push_back(ordered_json{{"anyOf", ordered_json::array({absent(k), ordered_json{{"required", req}}})}});
    };
    auto dep_schema = [&](const std::string& k, const ordered_json& sch) {
      ordered_json both = all_of(ordered_json{{"required", ordered_json::array({k})}}, sch);
      extra.push_back(ordered_json{{"anyOf", ordered_json::array({absent(k), both})}});
    };
    auto each = [&](const char* key, auto&& fn) {
      if (!out.contains(key) || !keyword_active(key)) return;
      const ordered_json v = out[key];
      out.erase(key);
      if (!v.is_object()) throw SchemaError(ptr + "/" + key, key, std::string(key) + " must be an object");
      for (auto it = v.begin(); it != v.end(); ++it)
        fn(it.key(), it.value(), ptr + "/" + key + "/" + escape_pointer_token(it.key()));
    };
    each("dependencies", [&](const std::string& k, const ordered_json& v, const std::string& at) {
      if (v.is_array()) dep_required(k, v, at);
      else dep_schema(k, v);
    });
    each("dependentRequired", [&](const std::string& k, const ordered_json& v, const std::string& at) { dep_required(k, v, at); });
    each("dependentSchemas", [&](const std::string& k, const ordered_json& v, const std::string&) { dep_schema(k, v); });
    if (out.contains("if") && keyword_active("if")) {
      ordered_json cond = out["if"];
      bool has_then = out.contains("then"), has_else = out.contains("else");
      ordered_json then_s = has_then ? out["then"] : ordered_json(true);
      ordered_json else_s = has_else ? out["else"] : ordered_json(true);
      out.erase("if");
      out.erase("then");
      out.erase("else");
      if (has_then || has_else) {
        std::optional<ordered_json> neg = negate(cond, ptr + "/if");
        ordered_json second;
        if (neg) {
          second = all_of(*neg, else_s);
        } else {
          second = else_s;
          post_.push_back((ptr.empty() ? "(root)" : ptr) +
                          ": if/then/else: 'if' cannot be negated in the grammar, so the else branch also admits "
                          "instances that pass 'if'; checked by validation afterwards");
        }
        extra.push_back(ordered_json{{"anyOf", ordered_json::array({all_of(cond, then_s), second})}});
      }
    } else {
      out.erase("then");
      out.erase("else");
    }
    if (!extra.empty()) {
      if (!out.contains("allOf")) out["allOf"] = ordered_json::array();
      for (auto& e : extra) out["allOf"].push_back(std::move(e));
    }
    return out;
  }

  // A number bound as a schema: x < v (or x > v), in the draft's spelling.
  ordered_json num_bound(const ordered_json& v, bool below, bool strict) const {
    ordered_json r{{"type", "number"}};
    if (!strict) {
      r[below ? "maximum" : "minimum"] = v;
    } else if (draft_ == Draft::k4) {
      r[below ? "maximum" : "minimum"] = v;
      r[below ? "exclusiveMaximum" : "exclusiveMinimum"] = true;
    } else {
      r[below ? "exclusiveMaximum" : "exclusiveMinimum"] = v;
    }
    return r;
  }

  // The complement of a schema, for the keywords whose complement the grammar can express
  // (boolean schemas, type, const / enum of scalars, required, properties, number bounds, lengths,
  // pattern, item / property counts, items, anyOf, not); std::nullopt otherwise.
  std::optional<ordered_json> negate(const ordered_json& s0, const std::string& ptr) {
    if (s0.is_boolean()) return ordered_json(!s0.get<bool>());
    ordered_json s = inline_top(s0, ptr);
    if (s.is_boolean()) return ordered_json(!s.get<bool>());
    const std::vector<std::string> kAll{"null", "boolean", "number", "string", "array", "object"};
    auto not_types = [&](const std::set<std::string>& ts) {
      ordered_json r = ordered_json::array();
      for (const auto& t : kAll)
        if (!ts.count(t)) r.push_back(t);
      return ordered_json{{"type", r}};
    };
    ordered_json alts = ordered_json::array();
    auto num = [&](const char* k) { return s[k]; };
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      const ordered_json& v = it.value();
      if (annotation_keywords().count(k) && k != "format") continue;
      if (!keyword_active(k)) continue;
      if (k == "type") {
        alts.push_back(ordered_json{{"not", ordered_json{{"type", v}}}});
      } else if (k == "const" || k == "enum") {
        ordered_json vals = k == "const" ? ordered_json::array({v}) : v;
        if (!vals.is_array()) return std::nullopt;
        std::set<std::string> types;
        std::vector<std::string> strs;
        std::vector<double> nums;
        std::set<bool> bools;
        for (const auto& x : vals) {
          std::string t = type_of(x);
          if (t == "integer") t = "number";
          if (t == "array" || t == "object") return std::nullopt;
          types.insert(t);
          if (t == "string") strs.push_back(x.get<std::string>());
          else if (t == "number") nums.push_back(x.get<double>());
          else if (t == "boolean") bools.insert(x.get<bool>());
        }
        ordered_json any = ordered_json::array({not_types(types)});
        if (!strs.empty()) any.push_back(ordered_json{{"type", "string"}, {"x-quarry-not-strings", strs}});
        if (bools.size() == 1) any.push_back(ordered_json{{"const", !*bools.begin()}});
        if (!nums.empty()) {
          std::sort(nums.begin(), nums.end());
          nums.erase(std::unique(nums.begin(), nums.end()), nums.end());
          any.push_back(num_bound(nums.front(), true, true));
          for (std::size_t i = 0; i + 1 < nums.size(); ++i)
            any.push_back(all_of(num_bound(nums[i], false, true), num_bound(nums[i + 1], true, true)));
          any.push_back(num_bound(nums.back(), false, true));
        }
        alts.push_back(ordered_json{{"anyOf", any}});
      } else if (k == "required") {
        for (const auto& r : v) {
          if (!r.is_string()) return std::nullopt;
          alts.push_back(ordered_json{{"type", "object"}, {"properties", ordered_json{{r.get<std::string>(), false}}}});
        }
      } else if (k == "properties") {
        for (auto p = v.begin(); p != v.end(); ++p) {
          auto n = negate(p.value(), ptr + "/properties/" + escape_pointer_token(p.key()));
          if (!n) return std::nullopt;
          if (*n == false) continue;
          alts.push_back(ordered_json{{"type", "object"},
                                      {"required", ordered_json::array({p.key()})},
                                      {"properties", ordered_json{{p.key(), *n}}}});
        }
      } else if (k == "minimum" || k == "maximum") {
        bool excl = draft_ == Draft::k4 && s.contains(k == "minimum" ? "exclusiveMinimum" : "exclusiveMaximum") &&
                    s[k == "minimum" ? "exclusiveMinimum" : "exclusiveMaximum"] == true;
        alts.push_back(num_bound(num(k.c_str()), k == "minimum", !excl));
      } else if (k == "exclusiveMinimum" || k == "exclusiveMaximum") {
        if (v.is_boolean()) continue;  // draft 4: part of minimum / maximum
        alts.push_back(num_bound(v, k == "exclusiveMinimum", false));
      } else if (k == "minLength" || k == "minItems" || k == "minProperties") {
        std::size_t n = v.get<std::size_t>();
        if (n == 0) continue;
        const char* t = k == "minLength" ? "string" : k == "minItems" ? "array" : "object";
        const char* mx = k == "minLength" ? "maxLength" : k == "minItems" ? "maxItems" : "maxProperties";
        alts.push_back(ordered_json{{"type", t}, {mx, n - 1}});
      } else if (k == "maxLength" || k == "maxItems" || k == "maxProperties") {
        std::size_t n = v.get<std::size_t>();
        const char* t = k == "maxLength" ? "string" : k == "maxItems" ? "array" : "object";
        const char* mn = k == "maxLength" ? "minLength" : k == "maxItems" ? "minItems" : "minProperties";
        alts.push_back(ordered_json{{"type", t}, {mn, n + 1}});
      } else if (k == "pattern") {
        alts.push_back(ordered_json{{"type", "string"}, {"x-quarry-not-patterns", ordered_json::array({v})}});
      } else if (k == "items" && !v.is_array() && !s.contains("additionalItems")) {
        auto n = negate(v, ptr + "/items");
        if (!n) return std::nullopt;
        if (*n == false) continue;
        alts.push_back(ordered_json{{"type", "array"}, {"contains", *n}});
      } else if (k == "anyOf") {
        ordered_json all = ordered_json::array();
        for (std::size_t i = 0; i < v.size(); ++i) {
          auto n = negate(v[i], ptr + "/anyOf/" + std::to_string(i));
          if (!n) return std::nullopt;
          all.push_back(*n);
        }
        alts.push_back(ordered_json{{"allOf", all}});
      } else if (k == "not") {
        alts.push_back(v);
      } else if (k == "format" && !format_regexes().count(v.get<std::string>())) {
        continue;  // an annotation
      } else {
        return std::nullopt;
      }
    }
    if (alts.empty()) return ordered_json(false);
    if (alts.size() == 1) return alts[0];
    return ordered_json{{"anyOf", alts}};
  }

  // ---- merging (allOf, $ref with siblings, anyOf distribution) --------------------------------

  // Inlines a top-level $ref and allOf into a flat object schema (may keep anyOf / oneOf).
  ordered_json inline_top(const ordered_json& s, const std::string& ptr) {
    if (s.is_boolean()) return s;
    if (!s.is_object()) throw SchemaError(ptr, "", "a schema must be an object or a boolean");
    if (++inline_depth_ > 48) {
      --inline_depth_;
      throw SchemaError(ptr, "$ref", "recursive $ref inside allOf (or next to other keywords) cannot be merged");
    }
    ordered_json out = desugar(s, ptr);
    if (s.contains("$ref")) {
      std::string tp;
      const ordered_json& t = resolve(s["$ref"].get<std::string>(), ptr, tp);
      out.erase("$ref");
      if (legacy_ref()) out = ordered_json::object();  // siblings of $ref are ignored before 2019-09
      ordered_json inl = inline_top(t, tp);
      out = merge(out, inl, ptr);
    }
    if (out.is_object() && out.contains("allOf")) {
      ordered_json branches = out["allOf"];
      out.erase("allOf");
      for (std::size_t i = 0; i < branches.size(); ++i)
        out = merge(out, inline_top(branches[i], ptr + "/allOf/" + std::to_string(i)), ptr);
    }
    --inline_depth_;
    return out;
  }

  static ordered_json all_of(const ordered_json& a, const ordered_json& b) {
    if (a == true || a == b) return b;
    if (b == true) return a;
    return ordered_json{{"allOf", ordered_json::array({a, b})}};
  }

  // Merges two schemas into one whose instances satisfy both (inline_top applied to b already).
  ordered_json merge(ordered_json a, const ordered_json& b, const std::string& ptr) {
    if (a.is_boolean() || b.is_boolean()) {
      if (a == false || b == false) return false;
      return a.is_boolean() ? b : a;
    }
    a = inline_top(a, ptr);
    if (a.is_boolean()) return merge(a, b, ptr);
    ordered_json out = a;
    auto num = [](const ordered_json& v) { return v.get<double>(); };
    for (auto it = b.begin(); it != b.end(); ++it) {
      const std::string& k = it.key();
      const ordered_json& v = it.value();
      if (!a.contains(k)) {
        if (k == "properties" || k == "additionalProperties" || k == "patternProperties") continue;  // below
        if (k == "items" || k == "prefixItems" || k == "additionalItems") continue;                     // below
        out[k] = v;
        continue;
      }
      const ordered_json& av = a[k];
      if (k == "type") {
        auto set_of = [](const ordered_json& t) {
          std::set<std::string> s;
          if (t.is_string()) s.insert(t.get<std::string>());
          else for (const auto& x : t) s.insert(x.get<std::string>());
          return s;
        };
        auto sa = set_of(av), sb = set_of(v);
        ordered_json r = ordered_json::array();
        for (const auto& t : sa) {
          if (sb.count(t)) r.push_back(t);
          else if (t == "integer" && sb.count("number")) r.push_back(t);
          else if (t == "number" && sb.count("integer")) r.push_back("integer");
        }
        out[k] = r;
      } else if (k == "required") {
        for (const auto& x : v)
          if (std::find(out[k].begin(), out[k].end(), x) == out[k].end()) out[k].push_back(x);
      } else if (k == "minLength" || k == "minItems" || k == "minimum" || k == "minProperties") {
        out[k] = num(av) >= num(v) ? av : v;
      } else if (k == "maxLength" || k == "maxItems" || k == "maximum" || k == "maxProperties") {
        out[k] = num(av) <= num(v) ? av : v;
      } else if ((k == "exclusiveMinimum" || k == "exclusiveMaximum") && av.is_number() && v.is_number()) {
        out[k] = (k == "exclusiveMinimum") == (num(av) >= num(v)) ? av : v;
      } else if (k == "enum" || k == "const") {
        ordered_json ea = k == "const" ? ordered_json::array({av}) : av;
        ordered_json eb = k == "const" ? ordered_json::array({v}) : v;
        ordered_json r = ordered_json::array();
        for (const auto& x : ea)
          if (std::find(eb.begin(), eb.end(), x) != eb.end()) r.push_back(x);
        out.erase(k);
        out["enum"] = r;
      } else if (k == "x-quarry-not-strings" || k == "x-quarry-not-patterns") {
        for (const auto& x : v) out[k].push_back(x);
      } else if (k == "pattern" || k == "format" || k == "multipleOf") {
        if (av != v) {
          std::string lk = k == "pattern" ? "x-quarry-patterns" : k == "format" ? "x-quarry-formats" : "x-quarry-multipleOf";
          if (!out.contains(lk)) out[lk] = ordered_json::array();
          out[lk].push_back(v);
        }
      } else if (k == "anyOf" || k == "oneOf") {
        ordered_json r = ordered_json::array();
        for (const auto& x : av)
          for (const auto& y : v) r.push_back(all_of(x, y));
        if (r.size() > 256) throw SchemaError(ptr, k, "allOf of " + k + " expands to too many branches");
        out[k] = r;
        if (k == "oneOf") post_.push_back((ptr.empty() ? "(root)" : ptr) + ": oneOf inside allOf compiled as anyOf");
      } else if (k == "properties" || k == "additionalProperties" || k == "patternProperties" || k == "items" ||
                 k == "prefixItems" || k == "additionalItems") {
        // below
      } else if (av != v) {
        if (k == "uniqueItems") out[k] = av == true || v == true;
        else if (annotation_keywords().count(k) || !handled_keywords().count(k)) {
        } else {
          throw SchemaError(ptr, k, "cannot merge differing '" + k + "' in allOf");
        }
      }
    }
    // Object keywords: a key's schema in each operand is its property schema, else (when no
    // property / pattern names it) its additionalProperties.
    if (b.contains("properties") || b.contains("additionalProperties") || b.contains("patternProperties") ||
        a.contains("properties") || a.contains("additionalProperties") || a.contains("patternProperties")) {
      auto props_of = [](const ordered_json& s) {
        return s.contains("properties") ? s["properties"] : ordered_json::object();
      };
      auto addl_of = [](const ordered_json& s) {
        return s.contains("additionalProperties") ? s["additionalProperties"] : ordered_json(true);
      };
      ordered_json pa = props_of(a), pb = props_of(b), props = ordered_json::object();
      for (auto it = pa.begin(); it != pa.end(); ++it)
        props[it.key()] = all_of(it.value(), pb.contains(it.key()) ? pb[it.key()] : (b.contains("patternProperties") ? ordered_json(true) : addl_of(b)));
      for (auto it = pb.begin(); it != pb.end(); ++it)
        if (!pa.contains(it.key()))
          props[it.key()] = all_of(a.contains("patternProperties") ? ordered_json(true) : addl_of(a), it.value());
      if (!props.empty()) out["properties"] = props;
      ordered_json ad = all_of(addl_of(a), addl_of(b));
      if (ad != true) out["additionalProperties"] = ad;
      else out.erase("additionalProperties");
      if (a.contains("patternProperties") || b.contains("patternProperties")) {
        ordered_json pp = a.contains("patternProperties") ? a["patternProperties"] : ordered_json::object();
        if (b.contains("patternProperties"))
          for (auto it = b["patternProperties"].begin(); it != b["patternProperties"].end(); ++it)
            pp[it.key()] = pp.contains(it.key()) ? all_of(pp[it.key()], it.value()) : it.value();
        out["patternProperties"] = pp;
        if (a.contains("patternProperties") && b.contains("patternProperties") && (a.contains("additionalProperties") || b.contains("additionalProperties")))
          post_.push_back((ptr.empty() ? "(root)" : ptr) + ": allOf with patternProperties and additionalProperties merged approximately");
      }
    }
    // Array keywords.
    auto prefix_of = [&](const ordered_json& s) {
      if (s.contains("prefixItems")) return s["prefixItems"];
      if (s.contains("items") && s["items"].is_array()) return s["items"];
      return ordered_json::array();
    };
    auto rest_of = [&](const ordered_json& s) -> ordered_json {
      if (s.contains("items") && s["items"].is_array())
        return s.contains("additionalItems") ? s["additionalItems"] : ordered_json(true);
      if (s.contains("items")) return s["items"];
      return true;
    };
    bool arr = false;
    for (const char* k : {"items", "prefixItems", "additionalItems"}) arr = arr || a.contains(k) || b.contains(k);
    if (arr) {
      ordered_json xa = prefix_of(a), xb = prefix_of(b), ra = rest_of(a), rb = rest_of(b);
      ordered_json prefix = ordered_json::array();
      for (std::size_t i = 0; i < std::max(xa.size(), xb.size()); ++i)
        prefix.push_back(all_of(i < xa.size() ? xa[i] : ra, i < xb.size() ? xb[i] : rb));
      out.erase("items");
      out.erase("prefixItems");
      out.erase("additionalItems");
      if (!prefix.empty()) out["prefixItems"] = prefix;
      ordered_json rest = all_of(ra, rb);
      if (rest != true) out["items"] = rest;
    }
    return out;
  }

  // ---- compilation -----------------------------------------------------------------------------

  // The rule of a schema (memoised by content, annotations left out: properties that differ only
  // in their description share one rule); its body is built later (run()).
  std::uint32_t rule_for(const ordered_json& s, const std::string& ptr) {
    std::string key;
    if (s.is_object()) {
      ordered_json k = s;
      for (const char* a : {"description", "title", "$comment", "examples", "default", "readOnly", "writeOnly", "deprecated"})
        k.erase(a);
      key = k.dump();
    } else {
      key = s.dump();
    }
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    if (s == true) return memo_[key] = any_rule();
    std::uint32_t r = b_.add_rule(ptr.empty() ? "#" : ptr);
    memo_.emplace(std::move(key), r);
    pending_.push_back({s, ptr, r});
    return r;
  }

  std::set<std::string> type_set(const ordered_json& s, const std::string& ptr) {
    std::set<std::string> all{"null", "boolean", "integer", "number", "string", "array", "object"};
    if (!s.contains("type")) return all;
    std::set<std::string> t;
    auto add = [&](const ordered_json& x) {
      if (!x.is_string() || !all.count(x.get<std::string>()))
        throw SchemaError(ptr + "/type", "type", "invalid type " + x.dump());
      t.insert(x.get<std::string>());
    };
    const ordered_json& ty = s["type"];
    if (ty.is_array()) for (const auto& x : ty) add(x);
    else add(ty);
    if (t.count("number")) t.insert("integer");
    return t;
  }

  Frag body(const ordered_json& s0, const std::string& ptr) {
    if (s0.is_boolean()) return s0.get<bool>() ? b_.call(any_rule()) : b_.never();
    if (!s0.is_object()) throw SchemaError(ptr, "", "a schema must be an object or a boolean, got " + s0.dump());
    check_keywords(s0, ptr);
    if (s0.contains("$ref")) {
      if (!s0["$ref"].is_string()) throw SchemaError(ptr, "$ref", "$ref must be a string");
      bool alone = true;
      for (auto it = s0.begin(); it != s0.end(); ++it)
        if (it.key() != "$ref" && !annotation_keywords().count(it.key())) alone = false;
      if (alone || legacy_ref()) {
        std::string tp;
        const ordered_json& t = resolve(s0["$ref"].get<std::string>(), ptr, tp);
        return b_.call(rule_for(t, tp));
      }
    }
    ordered_json s = desugar(s0, ptr);
    if (s.contains("$ref") || s.contains("allOf")) {
      s = inline_top(s, ptr);
      if (s.is_boolean()) return body(s, ptr);
      check_keywords(s, ptr);
    }
    for (const char* comb : {"anyOf", "oneOf"}) {
      if (!s.contains(comb)) continue;
      const ordered_json& br = s[comb];
      if (!br.is_array() || br.empty()) throw SchemaError(ptr + "/" + comb, comb, std::string(comb) + " must be a non-empty array");
      ordered_json rest = s;
      rest.erase(comb);
      bool rest_trivial = true;
      for (auto it = rest.begin(); it != rest.end(); ++it)
        if (!annotation_keywords().count(it.key())) rest_trivial = false;
      if (std::string(comb) == "oneOf" && !disjoint(br, ptr))
        post_.push_back((ptr.empty() ? "(root)" : ptr) +
                        ": oneOf compiled as anyOf (branches not provably disjoint; exclusivity is checked by validation afterwards)");
      std::vector<Frag> alts;
      for (std::size_t i = 0; i < br.size(); ++i) {
        std::string bp = ptr + "/" + comb + "/" + std::to_string(i);
        if (rest_trivial) alts.push_back(b_.call(rule_for(br[i], bp)));
        else alts.push_back(b_.call(rule_for(merge(rest, inline_top(br[i], bp), bp), bp)));
      }
      return b_.alt(alts);
    }
    return flat(s, ptr);
  }

  // Branch type sets / enum values pairwise disjoint?
  bool disjoint(const ordered_json& br, const std::string& ptr) {
    std::vector<std::set<std::string>> kinds;
    std::vector<std::optional<ordered_json>> values;
    std::vector<ordered_json> branches;
    for (std::size_t i = 0; i < br.size(); ++i) {
      ordered_json s;
      try {
        s = inline_top(br[i], ptr + "/oneOf/" + std::to_string(i));
      } catch (const SchemaError&) {
        return false;
      }
      if (s.is_boolean()) return false;
      if (s.contains("anyOf") || s.contains("oneOf")) return false;
      auto t = type_set(s, ptr);
      if (t.count("integer") && !t.count("number")) t.insert("number");  // integer overlaps number
      kinds.push_back(t);
      branches.push_back(s);
      if (s.contains("const")) values.push_back(ordered_json::array({s["const"]}));
      else if (s.contains("enum")) values.push_back(s["enum"]);
      else values.push_back(std::nullopt);
    }
    for (std::size_t i = 0; i < kinds.size(); ++i)
      for (std::size_t j = i + 1; j < kinds.size(); ++j) {
        bool types_overlap = false;
        for (const auto& t : kinds[i]) if (kinds[j].count(t)) types_overlap = true;
        if (!types_overlap) continue;
        if (values[i] && values[j]) {
          if (values_disjoint(*values[i], *values[j])) continue;
          return false;
        }
        if (discriminated(branches[i], branches[j])) continue;
        return false;
      }
    return true;
  }

  static bool values_disjoint(const ordered_json& a, const ordered_json& b) {
    for (const auto& x : a)
      if (std::find(b.begin(), b.end(), x) != b.end()) return false;
    return true;
  }
  static std::optional<ordered_json> literal_values(const ordered_json& s) {
    if (!s.is_object()) return std::nullopt;
    if (s.contains("const")) return ordered_json::array({s["const"]});
    if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
    return std::nullopt;
  }
  // Object branches told apart by a property required in both whose const / enum values differ
  // (a discriminator such as "type": {"const": "login"}).
  static bool discriminated(const ordered_json& a, const ordered_json& b) {
    if (!a.is_object() || !b.is_object()) return false;
    for (const ordered_json* s : {&a, &b})
      if (!s->contains("type") || (*s)["type"] != "object" || !s->contains("properties") || !s->contains("required"))
        return false;
    for (const auto& k : a["required"]) {
      if (!k.is_string()) continue;
      std::string name = k.get<std::string>();
      if (std::find(b["required"].begin(), b["required"].end(), k) == b["required"].end()) continue;
      if (!a["properties"].contains(name) || !b["properties"].contains(name)) continue;
      auto va = literal_values(a["properties"][name]), vb = literal_values(b["properties"][name]);
      if (va && vb && values_disjoint(*va, *vb)) return true;
    }
    return false;
  }

  struct Bounds {
    std::optional<double> lo, hi;
    bool lo_ex = false, hi_ex = false;
  };
  Bounds bounds(const ordered_json& s, const std::string& ptr) {
    Bounds b;
    auto get = [&](const char* k) -> std::optional<double> {
      if (!s.contains(k)) return std::nullopt;
      if (!s[k].is_number()) {
        if (s[k].is_boolean()) return std::nullopt;
        throw SchemaError(ptr + "/" + k, k, std::string(k) + " must be a number");
      }
      return s[k].get<double>();
    };
    b.lo = get("minimum");
    b.hi = get("maximum");
    if (s.contains("exclusiveMinimum")) {
      if (s["exclusiveMinimum"].is_boolean()) b.lo_ex = s["exclusiveMinimum"].get<bool>() && b.lo;
      else if (auto x = get("exclusiveMinimum"); x && (!b.lo || *x >= *b.lo)) { b.lo = x; b.lo_ex = true; }
    }
    if (s.contains("exclusiveMaximum")) {
      if (s["exclusiveMaximum"].is_boolean()) b.hi_ex = s["exclusiveMaximum"].get<bool>() && b.hi;
      else if (auto x = get("exclusiveMaximum"); x && (!b.hi || *x <= *b.hi)) { b.hi = x; b.hi_ex = true; }
    }
    return b;
  }

  static constexpr double kInt64Safe = 9.0e18;

  // Finishes a number grammar: the bound regex, intersected with the multipleOf automaton if any.
  Frag numeric(const std::string& re, const Dfa* mult, const std::string& ptr) {
    if (!mult) return regex_frag(re, ptr);
    Dfa d = re.empty() ? *mult : dfa_intersect(regex_dfa(re, true, ptr), *mult);
    return lower(d, false);
  }

  // Decimal numbers without exponent, -?(0|[1-9][0-9]*)(\.[0-9]+)?, whose value is a multiple of
  // k = m * 10^-e: reading the digits keeps (digits read so far) mod m, the number of fraction
  // digits j, and accepts when (value * 10^e) mod m == 0; past e fraction digits only zeros follow.
  Dfa multiple_of_dfa(const ordered_json& kv, bool integer_only, const std::string& ptr) {
    if (!kv.is_number() || kv.get<double>() <= 0)
      throw SchemaError(ptr + "/multipleOf", "multipleOf", "multipleOf must be a positive number");
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.15g", kv.get<double>());
    std::string t = buf;
    long long exp10 = 0;
    if (auto epos = t.find_first_of("eE"); epos != std::string::npos) {
      exp10 = std::stoll(t.substr(epos + 1));
      t = t.substr(0, epos);
    }
    std::string digits;
    long long e = 0;
    bool frac = false;
    for (char c : t) {
      if (c == '.') { frac = true; continue; }
      digits += c;
      if (frac) ++e;
    }
    e -= exp10;
    while (e > 0 && digits.size() > 1 && digits.back() == '0') { digits.pop_back(); --e; }
    std::uint64_t m = std::stoull(digits);
    while (e < 0) { m *= 10; ++e; }
    if (m == 0 || m > 100000 || e > 12 || m * static_cast<std::uint64_t>(e + 3) > 200000)
      throw SchemaError(ptr + "/multipleOf", "multipleOf", std::string("multipleOf ") + buf + " is too fine for the grammar");
    const int M = static_cast<int>(m), E = static_cast<int>(e);
    std::vector<std::uint64_t> pow10(E + 1, 1);
    for (int j = 1; j <= E; ++j) pow10[j] = pow10[j - 1] * 10 % m;
    // State ids: 0 start, 1 after '-', 2 zero, 3 + s (integer part), then point P(s), then F(s, j).
    auto I = [&](int r) { return 3 + r; };
    auto P = [&](int r) { return 3 + M + r; };
    auto F = [&](int r, int j) { return 3 + 2 * M + (j - 1) * M + r; };
    Dfa d;
    std::size_t n = static_cast<std::size_t>(3 + 2 * M + E * M);
    d.out.resize(n);
    d.accepting.assign(n, 0);
    auto edge = [&](int a, std::uint32_t lo, std::uint32_t hi, int b) { d.out[a].push_back({lo, hi, b}); };
    edge(0, '-', '-', 1);
    for (int a : {0, 1}) {
      edge(a, '0', '0', 2);
      for (int dg = 1; dg <= 9; ++dg) edge(a, '0' + dg, '0' + dg, I(dg % M));
    }
    d.accepting[2] = 1;
    if (!integer_only) edge(2, '.', '.', P(0));
    for (int r = 0; r < M; ++r) {
      d.accepting[I(r)] = (r * pow10[E]) % m == 0;
      if (!integer_only) edge(I(r), '.', '.', P(r));
      for (int dg = 0; dg <= 9; ++dg) edge(I(r), '0' + dg, '0' + dg, I((r * 10 + dg) % M));
      if (integer_only) continue;
      if (E == 0) {
        edge(P(r), '0', '0', I(r) + 0);  // only zeros after the point when k is an integer
        continue;
      }
      for (int dg = 0; dg <= 9; ++dg) edge(P(r), '0' + dg, '0' + dg, F((r * 10 + dg) % M, 1));
      for (int j = 1; j <= E; ++j) {
        d.accepting[F(r, j)] = (r * pow10[E - j]) % m == 0;
        if (j < E)
          for (int dg = 0; dg <= 9; ++dg) edge(F(r, j), '0' + dg, '0' + dg, F((r * 10 + dg) % M, j + 1));
        else
          edge(F(r, j), '0', '0', F(r, j));
      }
    }
    if (E == 0 && !integer_only) {
      // "I.0...0": after the point, zeros keep the integer state but a point may not repeat; use a
      // separate zero-run state per residue.
      std::size_t base = d.out.size();
      d.out.resize(base + static_cast<std::size_t>(M));
      d.accepting.resize(base + static_cast<std::size_t>(M), 0);
      for (int r = 0; r < M; ++r) {
        d.out[P(r)].clear();
        int z = static_cast<int>(base) + r;
        edge(P(r), '0', '0', z);
        edge(z, '0', '0', z);
        d.accepting[z] = r == 0;
      }
    }
    for (auto& edges : d.out)
      std::sort(edges.begin(), edges.end(), [](const Dfa::Edge& a, const Dfa::Edge& b) { return a.lo < b.lo; });
    return minimize(d);
  }

  Frag integer_frag(const Bounds& bd, const std::string& ptr, const Dfa* mult = nullptr) {
    std::optional<long long> lo, hi;
    if (bd.lo) {
      if (std::fabs(*bd.lo) > kInt64Safe) warn(ptr, "integer bound beyond int64 not enforced");
      else lo = static_cast<long long>(bd.lo_ex ? std::floor(*bd.lo) + 1 : std::ceil(*bd.lo));
    }
    if (bd.hi) {
      if (std::fabs(*bd.hi) > kInt64Safe) warn(ptr, "integer bound beyond int64 not enforced");
      else hi = static_cast<long long>(bd.hi_ex ? std::ceil(*bd.hi) - 1 : std::floor(*bd.hi));
    }
    if (lo && hi && *lo > *hi) return b_.never();
    std::vector<std::string> alts;
    if (!hi || *hi >= 0) {
      std::uint64_t L = lo && *lo > 0 ? static_cast<std::uint64_t>(*lo) : 0;
      alts.push_back(uint_range(L, hi ? std::optional<std::uint64_t>(*hi) : std::nullopt));
    }
    if (!lo || *lo < 0) {
      std::uint64_t L = hi && *hi < 0 ? static_cast<std::uint64_t>(-*hi) : 1;
      std::optional<std::uint64_t> H;
      if (lo) H = static_cast<std::uint64_t>(-*lo);
      if (!H || L <= *H) alts.push_back("-" + uint_range(L, H));
    }
    std::string re;
    for (std::size_t i = 0; i < alts.size(); ++i) re += (i ? "|" : "") + alts[i];
    if (re.empty()) return b_.never();
    return numeric(re, mult, ptr);
  }

  // A bound as a decimal: sign, integer digits (no leading zeros), fraction digits (no trailing
  // zeros). Shortest round-trip form of the double (the number as written in the schema).
  struct Decimal {
    bool neg = false;
    std::string ip = "0", fp;
  };
  static std::optional<Decimal> to_decimal(double v) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    if (ec != std::errc()) return std::nullopt;
    std::string t(buf, end);
    Decimal d;
    if (!t.empty() && t[0] == '-') { d.neg = true; t = t.substr(1); }
    long long ex = 0;
    if (auto e = t.find_first_of("eE"); e != std::string::npos) {
      ex = std::stoll(t.substr(e + 1));
      t = t.substr(0, e);
    }
    std::string digits;
    long long point = -1;
    for (char c : t) {
      if (c == '.') point = static_cast<long long>(digits.size());
      else digits += c;
    }
    if (point < 0) point = static_cast<long long>(digits.size());
    point += ex;
    if (point > 18 || point < -30) return std::nullopt;
    while (point <= 0) { digits.insert(digits.begin(), '0'); ++point; }
    while (static_cast<long long>(digits.size()) < point) digits += '0';
    d.ip = digits.substr(0, static_cast<std::size_t>(point));
    d.fp = digits.substr(static_cast<std::size_t>(point));
    while (d.ip.size() > 1 && d.ip[0] == '0') d.ip.erase(0, 1);
    while (!d.fp.empty() && d.fp.back() == '0') d.fp.pop_back();
    if (d.ip == "0" && d.fp.empty()) d.neg = false;
    return d;
  }
  static std::string alts_re(const std::vector<std::string>& alts) {
    if (alts.empty()) return "";
    std::string o = "(?:";
    for (std::size_t i = 0; i < alts.size(); ++i) o += (i ? "|" : "") + alts[i];
    return o + ")";
  }
  // Non-empty fraction digit strings F with 0.F >= 0.B (> if excl); B without trailing zeros.
  static std::string ge_frac(const std::string& b, bool excl) {
    std::vector<std::string> alts;
    char c = b[0];
    if (c < '9') alts.push_back(std::string("[") + static_cast<char>(c + 1) + "-9][0-9]*");
    if (b.size() > 1) alts.push_back(std::string(1, c) + ge_frac(b.substr(1), excl));
    else alts.push_back(std::string(1, c) + (excl ? "[0-9]*[1-9][0-9]*" : "[0-9]*"));
    return alts_re(alts);
  }
  // Non-empty fraction digit strings F with 0.F <= 0.D (< if excl); D without trailing zeros.
  static std::string le_frac(const std::string& d, bool excl) {
    std::vector<std::string> alts;
    char c = d[0];
    if (c > '0') alts.push_back(std::string("[0-") + static_cast<char>(c - 1) + "][0-9]*");
    if (d.size() > 1) {
      // F may stop after c: the rest of D is > 0 (no trailing zeros), so F < D.
      std::string r = le_frac(d.substr(1), excl);
      alts.push_back(std::string(1, c) + (r.empty() ? std::string() : r + "?"));
    } else if (!excl) {
      alts.push_back(std::string(1, c) + "0*");
    }
    return alts_re(alts);
  }
  // Non-negative decimals (no exponent) >= A.B (> if excl).
  static std::string mag_ge(const Decimal& x, bool excl) {
    std::uint64_t a = std::stoull(x.ip);
    std::vector<std::string> alts{uint_range(a + 1, std::nullopt) + kFracAny};
    if (x.fp.empty()) alts.push_back(x.ip + (excl ? kFracNonzero : kFracAny));
    else alts.push_back(x.ip + "\\." + ge_frac(x.fp, excl));
    return alts_re(alts);
  }
  // Non-negative decimals (no exponent) <= C.D (< if excl); "" if none.
  static std::string mag_le(const Decimal& x, bool excl) {
    std::uint64_t c = std::stoull(x.ip);
    std::vector<std::string> alts;
    if (c > 0) alts.push_back(uint_range(0, c - 1) + kFracAny);
    if (x.fp.empty()) {
      if (!excl) alts.push_back(x.ip + kFracZero);
    } else {
      std::string f = le_frac(x.fp, excl);
      alts.push_back(x.ip + (f.empty() ? std::string() : "(?:\\." + f + ")?"));
    }
    return alts_re(alts);
  }

  // Numbers with bounds: exact for every bound that is a decimal within 18 integer digits (the
  // schema's number as written), by digit-level automata for x >= L and x <= H, intersected.
  // Bounded numbers are generated without exponent.
  Frag number_frag(const Bounds& bd, const std::string& ptr, const Dfa* mult = nullptr) {
    static const std::string kNonneg = "(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?";
    static const std::string kPos = "(?:[1-9][0-9]*(?:\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)";
    std::vector<std::string> res;
    auto bound = [&](const std::optional<double>& v, bool excl, bool lower_bound) {
      if (!v) return;
      auto d = to_decimal(*v);
      if (!d) {
        warn(ptr, "number bound " + ordered_json(*v).dump() + " too large for the grammar; checked afterwards");
        post_.push_back((ptr.empty() ? "(root)" : ptr) + ": number bound " + ordered_json(*v).dump() +
                        " not enforced by the grammar; checked by validation afterwards");
        return;
      }
      std::string r;
      if (lower_bound) {
        if (!d->neg) r = mag_ge(*d, excl);
        else {
          std::string m = mag_le(*d, excl);
          r = kNonneg + (m.empty() ? "" : "|-" + m);
        }
      } else {
        if (!d->neg) {
          std::string m = mag_le(*d, excl);
          r = (m.empty() ? "" : m + "|") + "-" + kPos;
        } else {
          r = "-" + mag_ge(*d, excl);
        }
      }
      res.push_back(r);
    };
    bound(bd.lo, bd.lo_ex, true);
    bound(bd.hi, bd.hi_ex, false);
    if (res.empty()) {
      if (!mult)
        return inline_numbers_ ? regex_frag("-?(?:0|[1-9][0-9]*)(?:\\." + frac_digits() + ")?(?:[eE][+-]?[0-9]+)?", "")
                               : b_.call(number_rule());
      if (opt_.max_fraction_digits <= 0) return lower(*mult, false);
      return lower(dfa_intersect(*mult, frac_cap()), false);
    }
    try {
      Dfa d = regex_dfa(res[0], true, ptr);
      for (std::size_t i = 1; i < res.size(); ++i) d = dfa_intersect(d, regex_dfa(res[i], true, ptr));
      if (mult) d = dfa_intersect(d, *mult);
      if (opt_.max_fraction_digits > 0) d = dfa_intersect(d, frac_cap());
      if (dfa_is_empty(d)) return b_.never();
      return lower(d, false);
    } catch (const RegexError& e) {
      throw SchemaError(ptr, "minimum", e.what());
    }
  }


  Dfa string_dfa(const ordered_json& s, const std::string& ptr, bool& trivial) {
    trivial = true;
    std::int64_t mn = 0, mx = -1;
    if (s.contains("minLength")) { mn = s["minLength"].get<std::int64_t>(); trivial = false; }
    if (s.contains("maxLength")) { mx = s["maxLength"].get<std::int64_t>(); trivial = false; }
    if (mn < 0 || (s.contains("maxLength") && mx < 0))
      throw SchemaError(ptr + (mn < 0 ? "/minLength" : "/maxLength"), mn < 0 ? "minLength" : "maxLength",
                        "string length bounds must be non-negative integers");
    if (mx >= 0 && mx < mn) return dfa_literals({});
    // A length counter costs grammar nodes per character: bounds above kMaxGrammarStringLength
    // are widened (a longer minimum to the cap, a longer maximum to none) and left to validation.
    if (mn > kMaxGrammarStringLength || mx > kMaxGrammarStringLength) {
      note_post((ptr.empty() ? "(root)" : ptr) + ": string lengths over " + std::to_string(kMaxGrammarStringLength) +
                " characters not enforced by the grammar; checked by validation afterwards");
      mn = std::min<std::int64_t>(mn, kMaxGrammarStringLength);
      if (mx > kMaxGrammarStringLength) mx = -1;
    }
    Dfa d;
    bool any = mn == 0 && mx < 0;  // no length bound: the first pattern / format stands alone
    try {
      if (!any) d = dfa_length(mn, mx);
    } catch (const RegexError& e) {
      throw SchemaError(ptr + "/maxLength", "maxLength", e.what());
    }
    auto meet = [&](const Dfa& x) {
      d = any ? x : dfa_intersect(d, x);
      any = false;
    };
    std::vector<std::string> patterns;
    if (s.contains("pattern")) patterns.push_back(s["pattern"].get<std::string>());
    if (s.contains("x-quarry-patterns"))
      for (const auto& p : s["x-quarry-patterns"]) patterns.push_back(p.get<std::string>());
    std::vector<std::string> formats;
    if (s.contains("format") && s["format"].is_string()) formats.push_back(s["format"].get<std::string>());
    if (s.contains("x-quarry-formats"))
      for (const auto& p : s["x-quarry-formats"]) formats.push_back(p.get<std::string>());
    try {
      for (const auto& p : patterns) {
        meet(regex_dfa(p, false, ptr + "/pattern"));
        trivial = false;
      }
      for (const auto& f : formats) {
        auto it = format_regexes().find(f);
        if (it == format_regexes().end()) {
          warn(ptr + "/format", "format '" + f + "' is not enforced (annotation only)");
          continue;
        }
        meet(format_dfas().at(f));
        trivial = false;
      }
      if (s.contains("x-quarry-not-patterns"))
        for (const auto& p : s["x-quarry-not-patterns"]) {
          meet(dfa_complement(regex_dfa(p.get<std::string>(), false, ptr + "/pattern")));
          trivial = false;
        }
    } catch (const RegexError& e) {
      throw SchemaError(ptr + "/pattern", "pattern", e.what());
    }
    if (s.contains("x-quarry-not-strings")) {
      std::vector<std::string> words;
      for (const auto& w : s["x-quarry-not-strings"]) words.push_back(w.get<std::string>());
      meet(dfa_complement(dfa_literals(words)));
      trivial = false;
    }
    if (any) d = dfa_any_string();
    return d;
  }

  // Whether a literal value passes the sibling keywords that the grammar would enforce.
  bool literal_ok(const ordered_json& v, const ordered_json& s, const std::set<std::string>& types, const std::string& ptr) {
    std::string t = type_of(v);
    if (!types.count(t)) return false;
    if (t == "string") {
      bool trivial;
      Dfa d = string_dfa(s, ptr, trivial);
      return trivial || dfa_matches(d, v.get<std::string>());
    }
    if (t == "integer" || t == "number") {
      Bounds bd = bounds(s, ptr);
      double x = v.get<double>();
      if (bd.lo && (x < *bd.lo || (bd.lo_ex && x == *bd.lo))) return false;
      if (bd.hi && (x > *bd.hi || (bd.hi_ex && x == *bd.hi))) return false;
      if (s.contains("multipleOf") && s["multipleOf"].is_number() && s["multipleOf"].get<double>() > 0) {
        double q = x / s["multipleOf"].get<double>();
        if (std::fabs(q - std::round(q)) > 1e-9) return false;
      }
    }
    if (t == "array") {
      if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>()) return false;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<std::size_t>()) return false;
    }
    if (t == "object" && s.contains("minProperties") && v.size() < s["minProperties"].get<std::size_t>()) return false;
    if (t == "object" && s.contains("maxProperties") && v.size() > s["maxProperties"].get<std::size_t>()) return false;
    if (t == "object" && s.contains("required"))
      for (const auto& k : s["required"])
        if (!v.contains(k.get<std::string>())) return false;
    return true;
  }

  Frag flat(const ordered_json& s, const std::string& ptr) {
    std::set<std::string> types = type_set(s, ptr);
    // `not`: supported when its schema is a boolean, {} or a type restriction (type sets are
    // complemented); anything else is an unsupported-keyword error (ignored when lenient).
    bool non_integer_numbers = false;
    if (s.contains("not")) {
      std::string np = ptr + "/not";
      ordered_json ns = inline_top(s["not"], np);
      bool only_type = ns.is_object();
      if (ns.is_object())
        for (auto it = ns.begin(); it != ns.end(); ++it)
          if (it.key() != "type" && !annotation_keywords().count(it.key())) only_type = false;
      if (ns == true || (only_type && !ns.contains("type"))) return b_.never();
      if (ns == false) {
      } else if (only_type) {
        std::set<std::string> ex = type_set(ns, np);
        bool ex_int_only = ex.count("integer") && !ex.count("number");
        for (const auto& t : ex) types.erase(t);
        if (ex_int_only && type_set(s, ptr).count("number")) {
          types.insert("number");  // numbers stay, integers go: numbers with a non-zero fraction
          non_integer_numbers = true;
        }
        if (types.empty()) return b_.never();
      } else if (auto neg = negate(ns, np)) {
        // The complement is expressible: compile (the other keywords) and (not's complement).
        ordered_json rest = s;
        rest.erase("not");
        return body(merge(rest, inline_top(*neg, np), ptr), ptr);
      } else if (!opt_.lenient) {
        throw SchemaError(np, "not", "unsupported keyword 'not' (its schema uses keywords whose complement the grammar cannot express; use lenient mode to ignore it)");
      } else {
        warn(np, "'not' with this schema ignored (lenient)");
      }
    }
    if (s.contains("enum") || s.contains("const")) {
      ordered_json vals = s.contains("const") ? ordered_json::array({s["const"]}) : s["enum"];
      if (s.contains("const") && s.contains("enum")) {
        ordered_json r = ordered_json::array();
        if (std::find(s["enum"].begin(), s["enum"].end(), s["const"]) != s["enum"].end()) r.push_back(s["const"]);
        vals = r;
      }
      if (!vals.is_array()) throw SchemaError(ptr + "/enum", "enum", "enum must be an array");
      std::vector<Frag> alts;
      std::set<std::string> seen;
      for (const auto& v : vals) {
        if (!literal_ok(v, s, types, ptr)) continue;
        std::string text = dump_compact(v);
        if (!seen.insert(text).second) continue;
        alts.push_back(b_.literal(text));
      }
      if (alts.empty()) return b_.never();
      if (s.contains("properties") || s.contains("items") || s.contains("prefixItems") || s.contains("patternProperties"))
        post_.push_back((ptr.empty() ? "(root)" : ptr) + ": enum/const values are not checked against nested schemas");
      return b_.alt(alts);
    }
    if (types.count("array") && s.contains("uniqueItems") && s["uniqueItems"] == true &&
        !(s.contains("maxItems") && s["maxItems"].is_number() && s["maxItems"].get<double>() <= 1))
      post_.push_back((ptr.empty() ? "(root)" : ptr) +
                      ": uniqueItems not enforced by the grammar (duplicate items are possible); checked by validation afterwards");
    bool only_any = types.size() == 7;
    for (auto it = s.begin(); it != s.end(); ++it)
      if (handled_keywords().count(it.key()) && it.key() != "uniqueItems" && keyword_active(it.key())) only_any = false;
    if (s.contains("format") && format_regexes().count(s["format"].get<std::string>())) only_any = false;
    if (only_any) return b_.call(any_rule());
    std::vector<Frag> alts;
    if (types.count("null")) alts.push_back(b_.literal("null"));
    if (types.count("boolean")) alts.push_back(b_.alt({b_.literal("true"), b_.literal("false")}));
    // x-quarry-source (grounding.hpp): the nodes of a grounded string body / number are tagged.
    std::uint8_t src = 0;
    if (s.contains("x-quarry-source")) {
      const auto& sv = s["x-quarry-source"];
      auto k = sv.is_string() ? parse_source_kind(sv.get<std::string>()) : std::nullopt;
      if (!k)
        throw SchemaError(ptr + "/x-quarry-source", "x-quarry-source",
                          "x-quarry-source must be one of \"copy\", \"number\", \"date\", \"free\"");
      src = static_cast<std::uint8_t>(*k);
    }
    auto tag_from = [&](std::size_t n0, std::uint8_t kind) {
      for (std::size_t k = n0; k < b_.num_nodes(); ++k) b_.set_source(static_cast<std::uint32_t>(k), kind);
    };
    if (types.count("number") || types.count("integer")) {
      const std::size_t n0 = b_.num_nodes();
      const bool grounded = src == static_cast<std::uint8_t>(SourceKind::kNumber);
      inline_numbers_ = grounded;
      std::optional<Dfa> mult;
      if (s.contains("multipleOf")) {
        mult = multiple_of_dfa(s["multipleOf"], !types.count("number"), ptr);
        if (s.contains("x-quarry-multipleOf"))
          for (const auto& k : s["x-quarry-multipleOf"])
            mult = dfa_intersect(*mult, multiple_of_dfa(k, !types.count("number"), ptr));
      }
      const Dfa* mp = mult ? &*mult : nullptr;
      std::optional<Dfa> frac_only;
      if (non_integer_numbers) {
        frac_only = regex_dfa("-?(?:0|[1-9][0-9]*)\\.[0-9]*[1-9][0-9]*", true, ptr);
        if (mp) frac_only = dfa_intersect(*frac_only, *mp);
        mp = &*frac_only;
      }
      if (types.count("number")) alts.push_back(number_frag(bounds(s, ptr), ptr, mp));
      else alts.push_back(integer_frag(bounds(s, ptr), ptr, mp));
      inline_numbers_ = false;
      if (grounded) tag_from(n0, src);
    }
    if (types.count("string")) {
      bool trivial;
      Dfa d = string_dfa(s, ptr, trivial);
      const bool grounded = src == static_cast<std::uint8_t>(SourceKind::kCopy) || src == static_cast<std::uint8_t>(SourceKind::kDate);
      if (grounded) {
        // Own nodes, tagged from the opening quote's target on (the body), the closing quote untagged.
        Frag open = b_.literal("\"");
        b_.set_source(open.out, src);
        const std::size_t n0 = b_.num_nodes();
        Frag body = lower(d, true);
        tag_from(n0, src);
        alts.push_back(b_.seq({open, body, b_.literal("\"")}));
      } else if (trivial) {
        alts.push_back(b_.call(string_rule()));
      } else {
        alts.push_back(b_.seq({b_.literal("\""), lower(d, true), b_.literal("\"")}));
      }
    }
    if (types.count("array")) alts.push_back(array_frag(s, ptr));
    if (types.count("object")) alts.push_back(object_frag(s, ptr));
    if (alts.size() == 1) return alts[0];
    return b_.alt(alts);
  }

  Frag array_frag(const ordered_json& s, const std::string& ptr) {
    ordered_json prefix = ordered_json::array();
    ordered_json rest = opt_.strict ? ordered_json(false) : ordered_json(true);
    std::string rest_ptr = ptr + "/items";
    if (s.contains("prefixItems")) {
      prefix = s["prefixItems"];
      if (s.contains("items")) rest = s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {
      prefix = s["items"];
      rest = s.contains("additionalItems") ? s["additionalItems"] : (opt_.strict ? ordered_json(false) : ordered_json(true));
      rest_ptr = ptr + "/additionalItems";
    } else if (s.contains("items")) {
      rest = s["items"];
    }
    std::size_t mn = s.contains("minItems") ? s["minItems"].get<std::size_t>() : 0;
    std::optional<std::size_t> mx;
    if (s.contains("maxItems")) mx = s["maxItems"].get<std::size_t>();
    if (rest == false && (!mx || *mx > prefix.size())) mx = prefix.size();
    if (mx && *mx < mn) return b_.never();
    // contains / minContains: the element chain counts the elements that match the contains schema
    // (saturating at the minimum needed); an element may be taken as matching or not (the language is
    // exact: "at least m elements match"). maxContains needs the complement of the contains schema:
    // not enforced, listed in post_validation.
    std::size_t need = 0;
    ordered_json contains_s;
    if (s.contains("contains") && keyword_active("contains")) {
      contains_s = s["contains"];
      need = 1;
      if (s.contains("minContains") && keyword_active("minContains")) need = s["minContains"].get<std::size_t>();
      if (s.contains("maxContains") && keyword_active("maxContains"))
        post_.push_back((ptr.empty() ? "(root)" : ptr) + ": maxContains not enforced by the grammar; checked by validation afterwards");
      if (need > 64) throw SchemaError(ptr + "/minContains", "minContains", "minContains over 64 is not supported");
      if (mx && need > *mx) return b_.never();
      mn = std::max(mn, need);
    }
    std::size_t unroll = std::max<std::size_t>({prefix.size(), mn, 1});
    if (mx) unroll = *mx;
    if (unroll > 5000) throw SchemaError(ptr + "/maxItems", "maxItems", "array bounds too large for the grammar (over 5000)");
    if (unroll * (need + 1) > 20000) throw SchemaError(ptr + "/minContains", "minContains", "array bounds with contains too large for the grammar");
    auto elem_schema = [&](std::size_t i) { return i < prefix.size() ? prefix[i] : rest; };
    auto elem_ptr = [&](std::size_t i) {
      return i < prefix.size() ? ptr + (s.contains("prefixItems") ? "/prefixItems/" : "/items/") + std::to_string(i) : rest_ptr;
    };
    auto elem_rule = [&](std::size_t i) { return rule_for(elem_schema(i), elem_ptr(i)); };
    auto match_rule = [&](std::size_t i) {
      return rule_for(merge(elem_schema(i), inline_top(contains_s, ptr + "/contains"), ptr + "/contains"), ptr + "/contains");
    };
    Frag open = lit("[");
    std::uint32_t close_in = b_.node();
    Frag close = lit("]");
    b_.eps(close_in, close.in);
    std::vector<std::vector<std::uint32_t>> S(unroll + 1, std::vector<std::uint32_t>(need + 1));
    for (auto& row : S)
      for (auto& x : row) x = b_.node();
    b_.eps(open.out, S[0][0]);
    auto edge = [&](std::uint32_t from, std::uint32_t to, std::uint32_t rule, bool comma) {
      Frag e = comma ? b_.seq({lit(","), b_.call(rule)}) : b_.call(rule);
      b_.eps(from, e.in);
      b_.eps(e.out, to);
    };
    for (std::size_t i = 0; i <= unroll; ++i) {
      if (i >= mn) b_.eps(S[i][need], close_in);
      if (i < unroll)
        for (std::size_t c = 0; c <= need; ++c) {
          edge(S[i][c], S[i + 1][c], elem_rule(i), i > 0);
          if (need) edge(S[i][c], S[i + 1][std::min(c + 1, need)], match_rule(i), i > 0);
        }
    }
    if (!mx && rest != false) {  // unbounded tail
      for (std::size_t c = 0; c <= need; ++c) {
        edge(S[unroll][c], S[unroll][c], rule_for(rest, rest_ptr), true);
        if (need) edge(S[unroll][c], S[unroll][std::min(c + 1, need)], match_rule(unroll), true);
      }
    }
    return {open.in, close.out};
  }

  // The keys a propertyNames schema admits (keys are strings: type, enum / const, length,
  // pattern and format apply; other keywords have no effect on strings).
  Dfa property_names_dfa(const ordered_json& pn, const std::string& ptr) {
    if (pn.is_boolean()) return pn.get<bool>() ? dfa_any_string() : dfa_literals({});
    ordered_json s = inline_top(pn, ptr);
    if (s.is_boolean()) return s.get<bool>() ? dfa_any_string() : dfa_literals({});
    check_keywords(s, ptr);
    if (s.contains("anyOf") || s.contains("oneOf"))
      throw SchemaError(ptr, "propertyNames", "anyOf / oneOf inside propertyNames is not supported");
    if (!type_set(s, ptr).count("string")) return dfa_literals({});
    bool trivial;
    Dfa d = string_dfa(s, ptr, trivial);
    if (s.contains("enum") || s.contains("const")) {
      ordered_json vals = s.contains("const") ? ordered_json::array({s["const"]}) : s["enum"];
      std::vector<std::string> words;
      for (const auto& v : vals)
        if (v.is_string()) words.push_back(v.get<std::string>());
      d = dfa_intersect(d, dfa_literals(words));
    }
    return d;
  }

  Frag key_frag(const std::string& name) { return b_.literal(dump_compact(ordered_json(name))); }

  Frag object_frag(const ordered_json& s, const std::string& ptr) {
    ordered_json props = s.contains("properties") ? s["properties"] : ordered_json::object();
    ordered_json addl = s.contains("additionalProperties") ? s["additionalProperties"]
                                                            : (opt_.strict ? ordered_json(false) : ordered_json(true));
    ordered_json pats = s.contains("patternProperties") ? s["patternProperties"] : ordered_json::object();
    std::set<std::string> req;
    if (s.contains("required"))
      for (const auto& r : s["required"]) req.insert(r.get<std::string>());
    struct Member {
      std::string name;
      ordered_json schema;
      std::string ptr;
      bool required;
    };
    std::vector<Member> members;
    std::vector<std::pair<std::string, const Dfa*>> pat_dfas;
    for (auto it = pats.begin(); it != pats.end(); ++it)
      pat_dfas.push_back({it.key(), &regex_dfa(it.key(), false, ptr + "/patternProperties/" + escape_pointer_token(it.key()))});
    auto with_patterns = [&](const std::string& name, ordered_json sch) {
      for (auto& [p, d] : pat_dfas)
        if (dfa_matches(*d, name)) sch = all_of(sch, pats[p]);
      return sch;
    };
    for (auto it = props.begin(); it != props.end(); ++it)
      members.push_back({it.key(), with_patterns(it.key(), it.value()),
                         ptr + "/properties/" + escape_pointer_token(it.key()), req.count(it.key()) > 0});
    for (const auto& r : req) {
      if (props.contains(r)) continue;
      bool matched = false;
      for (auto& [p, d] : pat_dfas) matched = matched || dfa_matches(*d, r);
      ordered_json sch = matched ? with_patterns(r, true) : addl;
      members.push_back({r, sch, ptr + "/required", true});
    }
    // Member counting for minProperties / maxProperties: node N[i][c] = after the declared members
    // before i, with c members written (c saturates at K when there is no maximum; c == 0 means no
    // comma before the next member). Without the keywords K = 1 (the plain "first member or not").
    std::size_t min_p = s.contains("minProperties") ? s["minProperties"].get<std::size_t>() : 0;
    std::optional<std::size_t> max_p;
    if (s.contains("maxProperties")) max_p = s["maxProperties"].get<std::size_t>();
    if (max_p && *max_p < min_p) return b_.never();
    std::size_t K = max_p ? *max_p : std::max<std::size_t>(min_p, 1);
    if (K > 1000) throw SchemaError(ptr + "/maxProperties", "maxProperties", "property counts over 1000 are not supported");
    bool saturate = !max_p;
    // propertyNames: a string automaton every key must match.
    std::optional<Dfa> key_dfa;
    if (s.contains("propertyNames")) {
      key_dfa = property_names_dfa(s["propertyNames"], ptr + "/propertyNames");
      std::vector<Member> kept;
      for (auto& m : members) {
        if (dfa_matches(*key_dfa, m.name)) kept.push_back(std::move(m));
        else if (m.required) return b_.never();
      }
      members = std::move(kept);
    }
    const std::size_t n = members.size();
    if (n > kMaxObjectProperties)
      throw SchemaError(ptr + "/properties", "properties",
                        std::to_string(n) + " properties in one object (the limit is " +
                            std::to_string(kMaxObjectProperties) + ")");
    if (K > 1 && n * (K + 1) > kMaxCountedMembers)
      throw SchemaError(ptr + "/maxProperties", "maxProperties",
                        "minProperties / maxProperties over " + std::to_string(n) +
                            " properties: too many member counts for the grammar");
    // A row of nodes: Row[c] = the position with c members written.
    using Row = std::vector<std::uint32_t>;
    auto new_row = [&] {
      Row r(K + 1);
      for (auto& x : r) x = b_.node();
      return r;
    };
    // Connects `make()` (a member) from count t-1 in `from` to t in `to`, and the saturated loop at K.
    auto connect = [&](const Row& from, const Row& to, const std::function<Frag()>& make) {
      for (std::size_t t = 1; t <= K; ++t) {
        Frag m = make();
        if (t == 1) {
          b_.eps(from[0], m.in);
        } else {
          Frag comma = lit(",");
          b_.eps(from[t - 1], comma.in);
          b_.eps(comma.out, m.in);
        }
        if (t == K && saturate) {
          Frag comma = lit(",");
          b_.eps(from[K], comma.in);
          b_.eps(comma.out, m.in);
        }
        b_.eps(m.out, to[t]);
      }
    };
    std::vector<std::uint32_t> value_rules(n);
    for (std::size_t i = 0; i < n; ++i) value_rules[i] = rule_for(members[i].schema, members[i].ptr);
    // Declared members [lo, hi) from `first` (skipping the optional ones); returns the row after hi.
    auto segment = [&](std::size_t lo, std::size_t hi, const Row& first) {
      Row cur = first;
      for (std::size_t i = lo; i < hi; ++i) {
        Row next = new_row();
        connect(cur, next, [&] { return b_.seq({key_frag(members[i].name), lit(":"), b_.call(value_rules[i])}); });
        if (!members[i].required)
          for (std::size_t c = 0; c <= K; ++c) b_.eps(cur[c], next[c]);
        cur = std::move(next);
      }
      return cur;
    };
    // Additional and pattern members after the declared ones.
    std::vector<std::string> names;
    for (const auto& m : members) names.push_back(m.name);
    std::vector<std::pair<Dfa, std::uint32_t>> extra;  // key language, value rule
    if (pat_dfas.size() > 4) throw SchemaError(ptr + "/patternProperties", "patternProperties", "more than 4 patternProperties are not supported");
    std::size_t k = pat_dfas.size();
    Dfa not_names;
    if (k > 0 || addl != false) not_names = dfa_complement(dfa_literals(names));
    for (std::size_t mask = 0; mask < (1u << k); ++mask) {
      if (mask == 0 && addl == false) continue;
      Dfa keys = not_names;
      ordered_json sch = true;
      for (std::size_t i = 0; i < k; ++i) {
        if (mask & (1u << i)) {
          keys = dfa_intersect(keys, *pat_dfas[i].second);
          sch = all_of(sch, pats[pat_dfas[i].first]);
        } else {
          keys = dfa_intersect(keys, dfa_complement(*pat_dfas[i].second));
        }
      }
      if (mask == 0) sch = addl;
      if (key_dfa) keys = dfa_intersect(keys, *key_dfa);
      if (sch == false || dfa_is_empty(keys)) continue;
      std::string sp = mask == 0 ? ptr + "/additionalProperties" : ptr + "/patternProperties";
      extra.push_back({std::move(keys), rule_for(sch, sp)});
    }
    // After the declared members: the additional / pattern members, then "}" into `done`.
    auto tail = [&](const Row& last, std::uint32_t done) {
      if (!extra.empty()) {
        auto make = [&] {
          std::vector<Frag> alts;
          for (const auto& [keys, rule] : extra)
            alts.push_back(b_.seq({b_.literal("\""), lower(keys, true), b_.literal("\""), lit(":"), b_.call(rule)}));
          return alts.size() == 1 ? alts[0] : b_.alt(alts);
        };
        connect(last, last, make);
      }
      Frag close = lit("}");
      for (std::size_t c = min_p; c <= K; ++c) b_.eps(last[c], close.in);
      b_.eps(close.out, done);
    };
    Frag open = lit("{");
    const std::uint32_t done = b_.node();
    Row first = new_row();
    b_.eps(open.out, first[0]);
    // Skipping an optional member is an epsilon move, and epsilon removal gives every position an
    // edge to each member it can skip to: a run of m optional members costs m^2 / 2 edges. Long
    // member lists are therefore cut into blocks of kMemberBlock: block b > 0 is a rule per entry
    // count (c = 0: nothing written yet, 1: a comma comes first) that writes its members and calls
    // the next block's rule, so a position reaches at most the rest of its block plus one call
    // (linear size; parser stacks grow by one frame per block). Only without min/maxProperties
    // counts above 1 (K == 1), where two entry counts suffice.
    const std::size_t blocks = K == 1 && n > kMemberBlock ? (n + kMemberBlock - 1) / kMemberBlock : 1;
    if (blocks == 1) {
      tail(segment(0, n, first), done);
      return {open.in, done};
    }
    std::vector<Row> next_block(blocks, Row(K + 1));
    for (std::size_t bl = 1; bl < blocks; ++bl)
      for (std::size_t c = 0; c <= K; ++c)
        next_block[bl][c] = b_.add_rule(ptr + "/properties[" + std::to_string(bl * kMemberBlock) + ":]" + (c ? "," : ""));
    // From each count of `last`, the rule of block `bl` (entered at that count), then `to`.
    auto hand_over = [&](const Row& last, std::size_t bl, std::uint32_t to) {
      for (std::size_t c = 0; c <= K; ++c) {
        Frag f = b_.call(next_block[bl][c]);
        b_.eps(last[c], f.in);
        b_.eps(f.out, to);
      }
    };
    for (std::size_t bl = 1; bl < blocks; ++bl)
      for (std::size_t c = 0; c <= K; ++c) {
        Row entry = new_row();  // only entry[c] is reachable: the rule starts there
        Row last = segment(bl * kMemberBlock, std::min(n, (bl + 1) * kMemberBlock), entry);
        const std::uint32_t end = b_.node();
        if (bl + 1 == blocks) tail(last, end);
        else hand_over(last, bl + 1, end);
        b_.set_body(next_block[bl][c], {entry[c], end});
      }
    hand_over(segment(0, kMemberBlock, first), 1, done);
    return {open.in, done};
  }
};

void dump_rec(const ordered_json& v, std::string& out) {
  switch (v.type()) {
    case ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ',';
        first = false;
        out += ordered_json(it.key()).dump();
        out += ':';
        dump_rec(it.value(), out);
      }
      out += '}';
      break;
    }
    case ordered_json::value_t::array: {
      out += '[';
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ',';
        dump_rec(v[i], out);
      }
      out += ']';
      break;
    }
    case ordered_json::value_t::number_float: {
      double d = v.get<double>();
      if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
        out += std::to_string(static_cast<long long>(d));
        break;
      }
      out += v.dump();
      break;
    }
    default:
      out += v.dump();
  }
}

// Feeds bytes; returns false when the state dies.
bool feed(Parser& p, ParseState& st, std::string_view bytes) {
  ParseState tmp;
  for (char c : bytes) {
    if (!p.advance(st, static_cast<std::uint8_t>(c), tmp)) return false;
    std::swap(st, tmp);
  }
  return true;
}

struct KeyOrderSearch {
  Parser& p;
  long budget = 200000;

  bool value(ParseState& st, const ordered_json& v) {
    if (--budget < 0) return false;
    if (v.is_object()) {
      if (!feed(p, st, "{")) return false;
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
      std::vector<char> used(keys.size(), 0);
      return members(st, v, keys, used, 0);
    }
    if (v.is_array()) {
      if (!feed(p, st, "[")) return false;
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i && !feed(p, st, ",")) return false;
        if (!value(st, v[i])) return false;
      }
      return feed(p, st, "]");
    }
    std::string s;
    dump_rec(v, s);
    return feed(p, st, s);
  }

  bool members(ParseState& st, const ordered_json& v, const std::vector<std::string>& keys, std::vector<char>& used,
               std::size_t done) {
    if (done == keys.size()) return feed(p, st, "}");
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (used[i]) continue;
      if (--budget < 0) return false;
      ParseState s2 = st;
      std::string head = done ? "," : "";
      head += ordered_json(keys[i]).dump();
      head += ':';
      if (!feed(p, s2, head)) continue;
      if (!value(s2, v[keys[i]])) continue;
      used[i] = 1;
      if (members(s2, v, keys, used, done + 1)) {
        st = std::move(s2);
        return true;
      }
      used[i] = 0;
    }
    return false;
  }
};

}  // namespace

std::string dump_compact(const ordered_json& value) {
  std::string out;
  dump_rec(value, out);
  return out;
}

namespace {

// JSON nesting depth of `root`, counted without recursion and given up once past `limit`: compiling
// serialises subschemas (recursively), so a 5,000-deep schema must be refused before that.
std::size_t json_depth(const ordered_json& root, std::size_t limit) {
  std::vector<std::pair<const ordered_json*, std::size_t>> stack{{&root, 1}};
  std::size_t deepest = 0;
  while (!stack.empty() && deepest <= limit) {
    const auto [v, d] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, d);
    if (v->is_structured())
      for (const auto& child : *v) stack.emplace_back(&child, d + 1);
  }
  return deepest;
}

constexpr std::size_t kMaxSchemaJsonDepth = 512;
// Keys of one JSON object in a schema text: nlohmann's order-keeping object inserts a key in time
// linear in the keys already there, so the parse is quadratic in an object's size.
constexpr std::size_t kMaxSchemaObjectKeys = 20000;
// Bytes of schema text.
constexpr std::size_t kMaxSchemaTextBytes = 32u << 20;

// A linear pre-scan of schema text (SAX events, no tree): nesting depth and keys per object, with
// the JSON pointer of the first excess. Syntax errors are left to the parse that follows.
class ShapeScan : public nlohmann::json_sax<ordered_json> {
 public:
  std::string error, pointer;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    if (++f.keys > kMaxSchemaObjectKeys)
      return fail("an object with more than " + std::to_string(kMaxSchemaObjectKeys) + " keys", frames_.size() - 1);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Frame {
    bool array;
    std::size_t index = 0, keys = 0;
    std::string key;
  };
  std::vector<Frame> frames_;

  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  bool open(bool array) {
    if (frames_.size() >= kMaxSchemaJsonDepth)
      return fail("nested too deeply (over " + std::to_string(kMaxSchemaJsonDepth) + " levels of JSON)", frames_.size());
    frames_.push_back(Frame{array, 0, 0, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  // Records `why` at the location of the frames' path (`levels` of them: each names its child).
  bool fail(const std::string& why, std::size_t levels) {
    error = why;
    for (std::size_t i = 0; i < levels; ++i)
      pointer += "/" + (frames_[i].array ? std::to_string(frames_[i].index) : escape_pointer_token(frames_[i].key));
    return false;
  }
};

}  // namespace

SchemaCompileResult compile_json_schema(const ordered_json& schema, const SchemaOptions& options) {
  if (json_depth(schema, kMaxSchemaJsonDepth) > kMaxSchemaJsonDepth)
    throw SchemaError("", "", "schema nested too deeply (over " + std::to_string(kMaxSchemaJsonDepth) +
                                  " levels of JSON)");
  try {
    return Compiler(schema, options).run();
  } catch (const nlohmann::json::exception& e) {
    // A keyword of the wrong JSON type (e.g. "minLength": "3").
    throw SchemaError("", "", std::string("malformed schema: ") + e.what());
  } catch (const RegexError& e) {
    throw SchemaError("", "pattern", e.what());
  }
}

SchemaCompileResult compile_json_schema(std::string_view text, const SchemaOptions& options) {
  if (text.size() > kMaxSchemaTextBytes)
    throw SchemaError("", "", "schema of " + std::to_string(text.size()) + " bytes is larger than the limit of " +
                                  std::to_string(kMaxSchemaTextBytes));
  {
    ShapeScan scan;
    if (!ordered_json::sax_parse(text, &scan) && !scan.error.empty()) throw SchemaError(scan.pointer, "", scan.error);
  }
  ordered_json j;
  try {
    j = ordered_json::parse(text);
  } catch (const std::exception& e) {
    throw SchemaError("", "", std::string("invalid JSON: ") + e.what());
  }
  return compile_json_schema(j, options);
}

bool check_instance(const Grammar& g, const ordered_json& instance, bool any_key_order) {
  Parser p(g);
  ParseState st = p.initial();
  if (!any_key_order) {
    if (!feed(p, st, dump_compact(instance))) return false;
    return st.can_end;
  }
  KeyOrderSearch search{p};
  if (!search.value(st, instance)) return false;
  return st.can_end;
}

}  // namespace quarry::engine::grammar
