// Unit tests of the grammar pieces: regex -> automaton (against std::regex ECMAScript as the
// reference), integer / number range grammars, byte matcher rollback and jump-forward.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "engine/grammar/automaton.hpp"
#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/matcher.hpp"

namespace g = quarry::engine::grammar;
using g::ordered_json;

namespace {

bool accepts(const g::SchemaCompileResult& r, const std::string& text) {
  return g::check_instance(*r.grammar, ordered_json::parse(text), false);
}

// The grammar run on the raw bytes (no JSON normalisation).
bool accepts_text(const g::SchemaCompileResult& r, const std::string& text) {
  g::Parser p(*r.grammar);
  g::ParseState a = p.initial(), b;
  for (char c : text) {
    if (!p.advance(a, static_cast<std::uint8_t>(c), b)) return false;
    std::swap(a, b);
  }
  return a.can_end;
}

}  // namespace

// Regex search semantics against std::regex_search (ECMAScript grammar) on ASCII strings.
TEST(Regex, MatchesStdRegexOnRandomStrings) {
  const std::vector<std::string> patterns = {
      "^[a-z]+$", "ab*c", "^(foo|bar)+$", "[0-9]{2,4}", "^a{3}$", "x?y", "^\\d+(\\.\\d+)?$", "^[^abc]*$",
      "(a|b)c$", "^$", "colou?r", "^[A-Z]{2}[0-9]{2}[A-Z0-9]{2,5}$", "\\s", "^\\w+@\\w+\\.com$", "a.c",
      "^(?:ab|cd){1,2}$", "[-a]", "[a\\-z]", "^\\x41\\u0042$", "b{2,}"};
  std::mt19937 rng(7);
  const std::string alphabet = "abcdxyzfoABCr019.@ \t-";
  for (const auto& p : patterns) {
    g::Dfa d = g::determinize(g::parse_regex(p));
    std::regex ref(p, std::regex::ECMAScript);
    for (int k = 0; k < 400; ++k) {
      std::string s;
      int len = static_cast<int>(rng() % 8);
      for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
      if (k % 5 == 0) {  // strings near the pattern's own literals
        s.clear();
        for (char c : p)
          if (std::isalnum(static_cast<unsigned char>(c)) && rng() % 2) s += c;
      }
      EXPECT_EQ(g::dfa_matches(d, s), std::regex_search(s, ref)) << "pattern /" << p << "/ on \"" << s << "\"";
    }
  }
}

TEST(Regex, RejectsUnsupportedFeaturesClearly) {
  for (std::string p : {"a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b", "(a)\\1", "\\bword", "\\p{L}"}) {
    try {
      g::parse_regex(p);
      FAIL() << "accepted " << p;
    } catch (const g::RegexError& e) {
      EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
    }
  }
}

TEST(Regex, Utf8SequencesCoverExactly) {
  std::mt19937 rng(1);
  for (int k = 0; k < 200; ++k) {
    std::uint32_t a = rng() % 0x110000, b = rng() % 0x110000;
    if (a > b) std::swap(a, b);
    auto seqs = g::utf8_sequences(a, b);
    for (int t = 0; t < 50; ++t) {
      std::uint32_t c = rng() % 0x110000;
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      std::string enc;
      g::utf8_append(enc, c);
      bool in = false;
      for (const auto& s : seqs) {
        if (s.size() != enc.size()) continue;
        bool ok = true;
        for (std::size_t i = 0; i < s.size(); ++i)
          ok = ok && static_cast<std::uint8_t>(enc[i]) >= s[i].first && static_cast<std::uint8_t>(enc[i]) <= s[i].second;
        in = in || ok;
      }
      EXPECT_EQ(in, c >= a && c <= b && !(c >= 0xD800 && c <= 0xDFFF)) << a << " " << b << " " << c;
    }
  }
}

// Integer bounds: the digit-level grammar equals the arithmetic predicate.
TEST(Schema, IntegerRangesAreExact) {
  std::mt19937 rng(3);
  const std::vector<std::pair<long long, long long>> ranges = {
      {0, 0}, {-5, 5}, {1, 100}, {-1000, -37}, {17, 4219}, {99, 101}, {-1, 0}, {123456, 987654}};
  for (auto [lo, hi] : ranges) {
    ordered_json s = {{"type", "integer"}, {"minimum", lo}, {"maximum", hi}};
    auto r = g::compile_json_schema(s);
    for (long long v = lo - 30; v <= hi + 30; ++v) EXPECT_EQ(accepts(r, std::to_string(v)), v >= lo && v <= hi) << lo << ".." << hi << " " << v;
    for (int k = 0; k < 300; ++k) {
      long long v = static_cast<long long>(rng() % 2000000) - 1000000;
      EXPECT_EQ(accepts(r, std::to_string(v)), v >= lo && v <= hi) << lo << ".." << hi << " " << v;
    }
  }
  auto r = g::compile_json_schema(ordered_json{{"type", "integer"}, {"exclusiveMinimum", 10}});
  EXPECT_FALSE(accepts(r, "10"));
  EXPECT_TRUE(accepts(r, "11"));
  EXPECT_TRUE(accepts(r, "123456789012"));
  EXPECT_FALSE(accepts(r, "-11"));
}

TEST(Schema, NumberIntegerBoundsAreExact) {
  auto r = g::compile_json_schema(ordered_json{{"type", "number"}, {"minimum", -2}, {"exclusiveMaximum", 3}});
  for (const char* t : {"-2", "-2.0", "-1.999", "0", "2.999", "-0.5", "2"}) EXPECT_TRUE(accepts(r, t)) << t;
  for (const char* t : {"-2.001", "3", "3.0", "3.5", "-3", "100"}) EXPECT_FALSE(accepts(r, t)) << t;
  EXPECT_TRUE(r.post_validation.empty());
}

// Decimal bounds: the digit automata equal exact comparison (values and bounds as integers scaled
// by 10^4).
TEST(Schema, NumberDecimalBoundsAreExact) {
  struct B { const char* lo; const char* hi; bool lo_ex, hi_ex; };
  std::mt19937 rng(21);
  for (B b : {B{"2.5", nullptr, false, false}, B{"-1.25", "0.05", true, false}, B{"0.1", "0.35", false, true},
              B{nullptr, "-0.5", false, true}, B{"-3", "-2.75", false, false}, B{"0", "0.001", true, false}}) {
    ordered_json s{{"type", "number"}};
    auto scaled = [](const std::string& t) {  // decimal text -> value * 10^4
      bool neg = t[0] == '-';
      std::string u = neg ? t.substr(1) : t;
      auto dot = u.find('.');
      std::string ip = u.substr(0, dot), fp = dot == std::string::npos ? "" : u.substr(dot + 1);
      fp.resize(4, '0');
      long long v = std::stoll(ip) * 10000 + std::stoll(fp);
      return neg ? -v : v;
    };
    if (b.lo) s[b.lo_ex ? "exclusiveMinimum" : "minimum"] = ordered_json::parse(b.lo);
    if (b.hi) s[b.hi_ex ? "exclusiveMaximum" : "maximum"] = ordered_json::parse(b.hi);
    auto r = g::compile_json_schema(s);
    EXPECT_TRUE(r.post_validation.empty());
    for (int t = 0; t < 600; ++t) {
      long long ip = static_cast<long long>(rng() % 9) - 4;
      int fd = static_cast<int>(rng() % 5);
      std::string text = (ip < 0 ? "-" : "") + std::to_string(std::llabs(ip));
      if (ip == 0 && rng() % 2) text = "-0";
      for (int k = 0; k < fd; ++k) text += (k == 0 ? "." : "") + std::to_string(rng() % 10);
      long long v = scaled(text);
      bool want = true;
      if (b.lo) want = want && (b.lo_ex ? v > scaled(b.lo) : v >= scaled(b.lo));
      if (b.hi) want = want && (b.hi_ex ? v < scaled(b.hi) : v <= scaled(b.hi));
      if (text.rfind("-0", 0) == 0 && v == 0) continue;  // "-0": sign of zero, not compared
      EXPECT_EQ(accepts(r, text), want) << s.dump() << " " << text;
    }
  }
}

TEST(Schema, PropertiesInSchemaOrderAndAnyOrderCheck) {
  ordered_json s = ordered_json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
    "required":["b"],"additionalProperties":false})");
  auto r = g::compile_json_schema(s);
  EXPECT_TRUE(accepts(r, R"({"a":1,"b":"x"})"));
  EXPECT_TRUE(accepts(r, R"({"b":"x"})"));
  EXPECT_FALSE(accepts(r, R"({"a":1})"));
  EXPECT_FALSE(accepts(r, R"({"b":"x","a":1})"));  // generation order is schema order
  EXPECT_TRUE(g::check_instance(*r.grammar, ordered_json::parse(R"({"b":"x","a":1})"), true));
  EXPECT_FALSE(accepts(r, R"({"a":1,"b":"x","c":2})"));
}

TEST(Schema, UnsupportedKeywordNamesPointer) {
  ordered_json s = ordered_json::parse(R"({"properties":{"x":{"unevaluatedProperties":false}}})");
  try {
    g::compile_json_schema(s);
    FAIL();
  } catch (const g::SchemaError& e) {
    EXPECT_EQ(e.keyword, "unevaluatedProperties");
    EXPECT_EQ(e.pointer, "/properties/x/unevaluatedProperties");
  }
  g::SchemaOptions lenient;
  lenient.lenient = true;
  auto r = g::compile_json_schema(s, lenient);
  EXPECT_FALSE(r.warnings.empty());
}

TEST(Schema, RecursionThroughRef) {
  ordered_json s = ordered_json::parse(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
    "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}},
    "$ref":"#/$defs/node"})");
  auto r = g::compile_json_schema(s);
  EXPECT_TRUE(accepts(r, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(accepts(r, R"({"v":1,"kids":[{"v":"x"}]})"));
  EXPECT_THROW(g::compile_json_schema(ordered_json::parse(R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})")), g::SchemaError);
}

TEST(Schema, FormatsAndPatterns) {
  auto r = g::compile_json_schema(ordered_json{{"type", "string"}, {"format", "date-time"}});
  EXPECT_TRUE(accepts(r, R"("2024-02-29T12:30:00Z")"));
  EXPECT_FALSE(accepts(r, R"("2024-13-29T12:30:00Z")"));
  auto ip = g::compile_json_schema(ordered_json{{"type", "string"}, {"format", "ipv6"}});
  for (const char* t : {"\"::1\"", "\"2001:db8::8a2e:370:7334\"", "\"::ffff:192.168.1.1\""}) EXPECT_TRUE(accepts(ip, t)) << t;
  for (const char* t : {"\"1:2:3\"", "\"::g\"", "\"1::2::3\""}) EXPECT_FALSE(accepts(ip, t)) << t;
  auto p = g::compile_json_schema(ordered_json{{"type", "string"}, {"pattern", "^[A-Z]{2}\"$"}, {"maxLength", 3}});
  EXPECT_TRUE(accepts(p, R"("AB\"")"));  // the quote is escaped in JSON
  EXPECT_FALSE(accepts(p, R"("ABC")"));
  auto len = g::compile_json_schema(ordered_json{{"type", "string"}, {"minLength", 2}, {"maxLength", 3}});
  EXPECT_TRUE(accepts(len, "\"\xc3\xa9\xc3\xa9\""));  // 2 code points, 4 bytes
  EXPECT_FALSE(accepts(len, "\"\xc3\xa9\""));
  EXPECT_TRUE(accepts(len, R"("a\nb")"));
}

// Byte matcher with a toy vocabulary: masks equal the brute-force check of every token, rollback
// restores masks, jump-forward returns the forced bytes, EOS only at the end.
TEST(Matcher, ToyVocabularyMasksRollbackJumpForward) {
  std::vector<std::string> vocab = {"{", "}", "\"", "a", "\"a\"", ":", ",", "1", "12", "\"b\":", "true", "{\"", "<eos>", "<s>", "b"};
  auto tok = std::make_shared<g::TokenizerInfo>(vocab, std::vector<g::TokenId>{12}, std::vector<g::TokenId>{13});
  auto r = g::compile_json_schema(ordered_json::parse(
      R"({"type":"object","properties":{"b":{"type":"integer","maximum":20}},"required":["b"],"additionalProperties":false})"));
  auto cg = std::make_shared<g::CompiledGrammar>(r.grammar, tok, r);
  g::GrammarMatcher m(cg);
  std::vector<std::uint32_t> mask(tok->mask_words());
  auto allowed = [&]() {
    m.fill_bitmask(mask);
    std::vector<int> ids;
    for (int i = 0; i < static_cast<int>(vocab.size()); ++i)
      if ((mask[i / 32] >> (i % 32)) & 1) ids.push_back(i);
    return ids;
  };
  EXPECT_EQ(allowed(), (std::vector<int>{0, 11}));
  EXPECT_EQ(m.jump_forward(), "{\"b\":");
  ASSERT_TRUE(m.accept(11));  // {"
  EXPECT_EQ(allowed(), (std::vector<int>{14}));
  ASSERT_TRUE(m.accept(14));
  ASSERT_TRUE(m.accept(2));
  ASSERT_TRUE(m.accept(5));
  EXPECT_EQ(allowed(), (std::vector<int>{7, 8}));
  ASSERT_TRUE(m.accept(8));  // 12
  EXPECT_EQ(allowed(), (std::vector<int>{1}));  // 120 > 20; "}" only
  EXPECT_FALSE(m.accept(12));                  // EOS not yet
  ASSERT_TRUE(m.accept(1));
  EXPECT_EQ(allowed(), (std::vector<int>{12}));
  ASSERT_TRUE(m.accept(12));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(3);  // EOS, "}", "12"
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(allowed(), (std::vector<int>{7, 8}));
  ASSERT_TRUE(m.accept(7));  // 1
  EXPECT_EQ(allowed(), (std::vector<int>{1, 7}));  // "}" or "1" (11); "12" would make 112 > 20
}

TEST(Schema, DateFormatKnowsMonthLengthsAndLeapYears) {
  auto r = g::compile_json_schema(ordered_json{{"type", "string"}, {"format", "date"}});
  for (const char* t : {"2024-02-29", "2000-02-29", "2023-04-30", "2023-12-31", "1999-01-01"})
    EXPECT_TRUE(accepts(r, std::string("\"") + t + "\"")) << t;
  for (const char* t : {"2023-02-29", "1900-02-29", "2023-04-31", "2023-02-30", "2023-13-01", "2023-00-10"})
    EXPECT_FALSE(accepts(r, std::string("\"") + t + "\"")) << t;
}

TEST(Schema, PrefixItemsAndItemCounts) {
  auto r = g::compile_json_schema(ordered_json::parse(
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false,"minItems":1})"));
  EXPECT_TRUE(accepts(r, R"([1])"));
  EXPECT_TRUE(accepts(r, R"([1,"a"])"));
  EXPECT_FALSE(accepts(r, R"([])"));
  EXPECT_FALSE(accepts(r, R"([1,"a",2])"));
  EXPECT_FALSE(accepts(r, R"(["a"])"));
  auto c = g::compile_json_schema(ordered_json::parse(R"({"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":3})"));
  EXPECT_FALSE(accepts(c, R"([true])"));
  EXPECT_TRUE(accepts(c, R"([true,false])"));
  EXPECT_TRUE(accepts(c, R"([true,false,true])"));
  EXPECT_FALSE(accepts(c, R"([true,false,true,true])"));
}

TEST(Schema, WhitespaceOption) {
  g::SchemaOptions o;
  o.max_whitespace = 2;
  auto r = g::compile_json_schema(ordered_json::parse(R"({"type":"object","properties":{"a":{"type":"array"}}})"), o);
  g::Parser p(*r.grammar);
  g::ParseState st = p.initial(), tmp;
  for (char c : std::string("{ \"a\" :\n[ 1 , 2 ] }")) {
    ASSERT_TRUE(p.advance(st, static_cast<std::uint8_t>(c), tmp)) << c;
    std::swap(st, tmp);
  }
  EXPECT_TRUE(st.can_end);
  auto compact = g::compile_json_schema(ordered_json::parse(R"({"type":"object"})"));
  g::Parser q(*compact.grammar);
  g::ParseState s2 = q.initial();
  EXPECT_FALSE(q.advance(s2, ' ', tmp));
}

// Bad input: a clear SchemaError, never a crash.
TEST(Schema, MalformedSchemasFailCleanly) {
  const char* bad[] = {R"({"type":5})", R"({"minLength":"x"})", R"({"pattern":5})", R"({"properties":[]})",
                       R"({"items":5})", R"({"$ref":"#/nowhere"})", R"({"pattern":"(a"})", R"({"enum":3})",
                       R"({"type":"string","minLength":5,"maxLength":2,"x":1})", R"({"$ref":"http://example.com/s.json"})"};
  for (const char* b : bad) {
    try {
      auto r = g::compile_json_schema(std::string_view(b));
      // Compiling may succeed (e.g. an empty string range is unsatisfiable only in one branch).
      (void)r;
    } catch (const g::SchemaError& e) {
      EXPECT_FALSE(std::string(e.what()).empty());
    }
  }
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += R"({"items":)";
  deep += "true";
  for (int i = 0; i < 5000; ++i) deep += "}";
  EXPECT_THROW(g::compile_json_schema(std::string_view(deep)), g::SchemaError);
}

// multipleOf: the digit automaton equals exact decimal arithmetic (values as scaled integers).
TEST(Schema, MultipleOfIsExact) {
  struct Case { const char* k; long long m; int e; };  // k = m * 10^-e
  for (Case c : {Case{"0.01", 1, 2}, Case{"3", 3, 0}, Case{"2.5", 25, 1}, Case{"0.3", 3, 1}, Case{"7", 7, 0}}) {
    auto r = g::compile_json_schema(ordered_json::parse(std::string(R"({"type":"number","multipleOf":)") + c.k + "}"));
    auto ri = g::compile_json_schema(ordered_json::parse(std::string(R"({"type":"integer","multipleOf":)") + c.k + ",\"minimum\":-50}"));
    std::mt19937 rng(9);
    for (int t = 0; t < 400; ++t) {
      long long ip = static_cast<long long>(rng() % 200) - 100;
      int fd = static_cast<int>(rng() % 4);  // fraction digits
      long long fv = fd ? static_cast<long long>(rng() % static_cast<unsigned>(std::pow(10, fd))) : 0;
      std::string text = std::to_string(ip);
      if (fd) {
        std::string f = std::to_string(fv);
        text += "." + std::string(static_cast<std::size_t>(fd) - f.size(), '0') + f;
      }
      // value * 10^(fd + e) as an integer, compared with m * 10^fd.
      long long scaled = std::llabs(ip);
      for (int k = 0; k < fd; ++k) scaled *= 10;
      scaled += fv;  // |value| * 10^fd
      bool neg = ip < 0 || text[0] == '-';
      (void)neg;
      long long num = scaled;
      for (int k = 0; k < c.e; ++k) num *= 10;           // |value| * 10^(fd+e)
      long long den = c.m;
      for (int k = 0; k < fd; ++k) den *= 10;            // k * 10^(fd+e)
      bool want = num % den == 0;
      if (text == "-0" || text.rfind("-0.", 0) == 0) continue;  // "-0..." : sign of zero, skip
      EXPECT_EQ(accepts(r, text), want) << c.k << " " << text;
      if (fd == 0 && ip >= -50) {
        EXPECT_EQ(accepts(ri, text), want) << "integer " << c.k << " " << text;
      }
    }
  }
}

TEST(Schema, NotWithTypes) {
  auto r = g::compile_json_schema(ordered_json::parse(R"({"not":{"type":["string","object"]}})"));
  for (const char* t : {"1", "1.5", "null", "true", "[1]"}) EXPECT_TRUE(accepts(r, t)) << t;
  for (const char* t : {"\"a\"", "{}"}) EXPECT_FALSE(accepts(r, t)) << t;
  auto ni = g::compile_json_schema(ordered_json::parse(R"({"type":"number","not":{"type":"integer"}})"));
  for (const char* t : {"1.5", "-0.01", "3.10"}) EXPECT_TRUE(accepts(ni, t)) << t;
  for (const char* t : {"1", "2.0", "-7", "0"}) EXPECT_FALSE(accepts(ni, t)) << t;
  // Complements of other keywords where the grammar can express them; a clear error otherwise.
  auto nm = g::compile_json_schema(ordered_json::parse(R"({"not":{"minimum":3}})"));
  for (const char* t : {"2", "2.99", "-1"}) EXPECT_TRUE(accepts(nm, t)) << t;
  for (const char* t : {"3", "4.5", "\"x\"", "null"}) EXPECT_FALSE(accepts(nm, t)) << t;  // non-numbers pass minimum
  EXPECT_THROW(g::compile_json_schema(ordered_json::parse(R"({"not":{"multipleOf":3}})")), g::SchemaError);
}

TEST(Schema, ConditionalKeywordsAreExact) {
  // if/then/else with a negatable condition.
  auto r = g::compile_json_schema(ordered_json::parse(
      R"({"if":{"properties":{"c":{"const":"US"}}},"then":{"properties":{"z":{"pattern":"^[0-9]{5}$"}}},
          "else":{"properties":{"z":{"maxLength":3}}}})"));
  EXPECT_TRUE(r.post_validation.empty());
  EXPECT_TRUE(accepts(r, R"({"c":"US","z":"12345"})"));
  EXPECT_FALSE(accepts(r, R"({"c":"US","z":"1234"})"));
  EXPECT_TRUE(accepts(r, R"({"c":"CA","z":"A1"})"));
  EXPECT_FALSE(accepts(r, R"({"c":"CA","z":"12345"})"));
  EXPECT_TRUE(accepts(r, R"({"z":"12345"})"));  // no "c": the condition holds vacuously, "then" applies
  EXPECT_FALSE(accepts(r, R"({"z":"abc"})"));
  // dependentRequired / dependencies (array and schema forms).
  auto d = g::compile_json_schema(ordered_json::parse(
      R"({"dependentRequired":{"a":["b"]},"dependentSchemas":{"b":{"properties":{"a":{"type":"integer"}}}}})"));
  EXPECT_TRUE(accepts(d, R"({})"));
  EXPECT_TRUE(accepts(d, R"({"b":1})"));
  EXPECT_FALSE(accepts(d, R"({"a":1})"));
  EXPECT_TRUE(accepts(d, R"({"a":1,"b":2})"));
  EXPECT_FALSE(accepts(d, R"({"a":"x","b":2})"));
  // contains with minContains: at least two matching items, wherever they are.
  auto c = g::compile_json_schema(ordered_json::parse(R"({"items":{"type":"integer"},"contains":{"minimum":10},"minContains":2})"));
  EXPECT_TRUE(accepts(c, R"([1,10,2,11])"));
  EXPECT_FALSE(accepts(c, R"([1,10,2])"));
  EXPECT_FALSE(accepts(c, R"([])"));
  // not with a complement the grammar can express.
  auto n = g::compile_json_schema(ordered_json::parse(R"({"type":"string","not":{"enum":["a","b"]}})"));
  EXPECT_TRUE(accepts(n, R"("c")"));
  EXPECT_FALSE(accepts(n, R"("a")"));
}

TEST(Schema, OverApproximationsAreListedForValidation) {
  // uniqueItems: duplicates are not prevented; the schema says so.
  auto u = g::compile_json_schema(ordered_json::parse(R"({"type":"array","uniqueItems":true})"));
  ASSERT_EQ(u.post_validation.size(), 1u);
  EXPECT_NE(u.post_validation[0].find("uniqueItems"), std::string::npos);
  EXPECT_TRUE(accepts(u, "[1,1]"));
  // if whose complement is not expressible (multipleOf): else is taken as a superset.
  auto i = g::compile_json_schema(ordered_json::parse(R"({"if":{"multipleOf":3},"then":{"minimum":9},"else":{"maximum":100}})"));
  ASSERT_FALSE(i.post_validation.empty());
  EXPECT_TRUE(accepts(i, "9"));
  EXPECT_TRUE(accepts(i, "4"));
  EXPECT_FALSE(accepts(i, "101"));
}

TEST(Schema, FractionDigitsAreCapped) {
  auto r = g::compile_json_schema(ordered_json::parse(R"({"type":"number"})"));
  EXPECT_TRUE(accepts(r, "0.1234567890123456"));    // 16 fraction digits (the default cap)
  EXPECT_FALSE(accepts(r, "0.12345678901234567"));  // 17
  auto b = g::compile_json_schema(ordered_json::parse(R"({"type":"number","minimum":0,"maximum":1})"));
  EXPECT_FALSE(accepts(b, "0.12345678901234567"));
  g::SchemaOptions o;
  o.max_fraction_digits = 2;
  auto two = g::compile_json_schema(ordered_json::parse(R"({"type":"number","multipleOf":0.01})"), o);
  EXPECT_TRUE(accepts_text(two, "1.25"));
  EXPECT_FALSE(accepts_text(two, "1.250"));  // as bytes: check_instance would normalise to 1.25
  o.max_fraction_digits = 0;  // unbounded
  auto any = g::compile_json_schema(ordered_json::parse(R"({"type":"number"})"), o);
  EXPECT_TRUE(accepts(any, "0.123456789012345678901234567890"));
}
