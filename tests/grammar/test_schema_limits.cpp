// Hostile schemas against the schema -> grammar compiler: $ref cycles that make no progress are
// refused naming their JSON pointers, recursion with progress still compiles, and size grows
// linearly with the schema (long optional member lists, long $ref chains, length bounds, node budget).
// Every schema here is generated at test time.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <set>

#include "engine/grammar/automaton.hpp"
#include "engine/grammar/json_schema.hpp"

namespace g = quarry::engine::grammar;
using g::ordered_json;

namespace {

bool accepts(const g::SchemaCompileResult& r, const std::string& text, bool any_order = false) {
  return g::check_instance(*r.grammar, ordered_json::parse(text), any_order);
}

// The SchemaError of compiling `schema`, or "" when it compiles.
std::string refusal(const std::string& schema) {
  try {
    g::compile_json_schema(std::string_view(schema));
  } catch (const g::SchemaError& e) {
    return e.what();
  }
  return "";
}

std::string pad(std::size_t i) {
  std::string s = std::to_string(i);
  return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
}

ordered_json optional_properties(std::size_t n) {
  ordered_json props = ordered_json::object();
  for (std::size_t i = 0; i < n; ++i) props["field_" + pad(i)] = {{"type", "string"}};
  return {{"type", "object"}, {"properties", props}};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(SchemaLimits, RefCyclesWithoutProgressAreRefusedNamingThePointers) {
  std::string e = refusal(R"({"$ref":"#"})");
  EXPECT_TRUE(contains(e, "$ref cycle that makes no progress: (root) -> (root)")) << e;
  e = refusal(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})");
  EXPECT_TRUE(contains(e, "/$defs/a -> /$defs/b -> /$defs/a")) << e;
  e = refusal(R"({"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}},
                  "type":"object","properties":{"x":{"$ref":"#/definitions/a"}}})");
  EXPECT_TRUE(contains(e, "/definitions/a -> /definitions/b -> /definitions/a")) << e;
  // Through the other in-place applicators.
  for (const char* s : {R"({"allOf":[{"$ref":"#"}]})", R"({"anyOf":[{"type":"null"},{"$ref":"#"}]})",
                        R"({"oneOf":[{"$ref":"#"},{"type":"null"}]})", R"({"not":{"$ref":"#"}})",
                        R"({"if":{"$ref":"#"},"then":true})", R"({"dependentSchemas":{"a":{"$ref":"#"}}})",
                        R"({"properties":{"a":{"$ref":"#/properties/a"}}})"}) {
    e = refusal(s);
    EXPECT_TRUE(contains(e, "makes no progress")) << s << ": " << e;
  }
  // The error carries the pointer of the cycle's first schema and the keyword.
  try {
    g::compile_json_schema(std::string_view(R"({"properties":{"a":{"allOf":[{"$ref":"#/properties/a"}]}}})"));
    FAIL() << "no refusal";
  } catch (const g::SchemaError& err) {
    EXPECT_EQ(err.pointer, "/properties/a");
    EXPECT_EQ(err.keyword, "$ref");
  }
}

TEST(SchemaLimits, DraftSevenIgnoresSiblingsOfRef) {
  // Before 2019-09 the siblings of $ref are ignored, so this allOf is no cycle there.
  const std::string s = R"({"definitions":{"x":{"type":"string"}},"$ref":"#/definitions/x","allOf":[{"$ref":"#"}]})";
  EXPECT_EQ(refusal(R"({"$schema":"http://json-schema.org/draft-07/schema#",)" + s.substr(1)), "");
  EXPECT_TRUE(contains(refusal(s), "makes no progress"));
}

TEST(SchemaLimits, RecursionWithProgressStillCompiles) {
  auto r = g::compile_json_schema(std::string_view(
      R"({"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}},
          "additionalProperties":false})"));
  EXPECT_TRUE(accepts(r, R"({"name":"a","children":[{"name":"b","children":[{"children":[]}]}]})"));
  EXPECT_FALSE(accepts(r, R"({"name":"a","children":[{"name":1}]})"));
  r = g::compile_json_schema(std::string_view(R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"$ref":"#"}}]})"));
  EXPECT_TRUE(accepts(r, "[1,[2,[3,[]]]]"));
  EXPECT_FALSE(accepts(r, R"([1,["x"]])"));
}

TEST(SchemaLimits, DiamondsOfAllOfAreBounded) {
  // d_i = allOf [d_{i+1}, d_{i+1}]: 2^40 schemas applied to one value if expanded.
  ordered_json defs = ordered_json::object();
  for (int i = 0; i < 40; ++i) {
    ordered_json next = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
    defs["d" + std::to_string(i)] = {{"allOf", {next, next}}};
  }
  defs["d40"] = {{"type", "string"}};
  ordered_json s = {{"$defs", defs}, {"$ref", "#/$defs/d0"}};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    g::compile_json_schema(s);
    FAIL() << "no refusal";
  } catch (const g::SchemaError& e) {
    EXPECT_TRUE(contains(e.what(), "more than 100000 schemas")) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));  // hang check only
}

TEST(SchemaLimits, OptionalMemberListsGrowLinearly) {
  // Skipping optional members used to cost m^2 / 2 byte edges; now blocks of members are rules.
  auto edges = [](std::size_t n) { return g::compile_json_schema(optional_properties(n)).grammar->num_byte_edges(); };
  const std::size_t e1 = edges(500), e4 = edges(2000);
  EXPECT_LT(e4, e1 * 6) << e1 << " -> " << e4;  // quadratic would be 16x

  auto r = g::compile_json_schema(optional_properties(300));
  EXPECT_TRUE(accepts(r, "{}"));
  EXPECT_TRUE(accepts(r, R"({"field_00299":"z"})"));
  // Members across block boundaries (blocks of 64), in schema order, then an additional one.
  EXPECT_TRUE(accepts(r, R"({"field_00000":"a","field_00063":"b","field_00064":"c","field_00200":"d","zz":1})"));
  EXPECT_FALSE(accepts(r, R"({"field_00064":"c","field_00063":"b"})"));
  EXPECT_TRUE(accepts(r, R"({"field_00064":"c","field_00063":"b"})", true));
  EXPECT_FALSE(accepts(r, R"({"field_00100":1})"));

  // A required member in a later block, and a closed object.
  ordered_json s = optional_properties(300);
  s["required"] = {"field_00130"};
  s["additionalProperties"] = false;
  r = g::compile_json_schema(s);
  EXPECT_FALSE(accepts(r, "{}"));
  EXPECT_TRUE(accepts(r, R"({"field_00130":"x"})"));
  EXPECT_TRUE(accepts(r, R"({"field_00001":"a","field_00130":"x","field_00299":"y"})"));
  EXPECT_FALSE(accepts(r, R"({"field_00001":"a","field_00299":"y"})"));
  EXPECT_FALSE(accepts(r, R"({"field_00130":"x","zz":1})"));
}

TEST(SchemaLimits, LongRefChainsCompile) {
  // d_i has a property holding d_{i+1}: a chain as long as the schema (rule bodies are built from a
  // work list, not by recursion).
  ordered_json defs = ordered_json::object();
  const int n = 3000;
  for (int i = 0; i < n; ++i)
    defs["d" + std::to_string(i)] = {{"type", "object"},
                                     {"properties", {{"next", {{"$ref", "#/definitions/d" + std::to_string(i + 1)}}}}},
                                     {"additionalProperties", false}};
  defs["d" + std::to_string(n)] = {{"type", "integer"}};
  ordered_json s = {{"definitions", defs}, {"$ref", "#/definitions/d0"}};
  auto r = g::compile_json_schema(s);
  EXPECT_TRUE(accepts(r, R"({"next":{"next":{}}})"));
  EXPECT_FALSE(accepts(r, R"({"next":{"other":1}})"));
}

TEST(SchemaLimits, LongLengthBoundsAreLeftToValidation) {
  auto r = g::compile_json_schema(std::string_view(R"({"type":"string","minLength":5000,"maxLength":100000})"));
  ASSERT_FALSE(r.post_validation.empty());
  EXPECT_TRUE(contains(r.post_validation[0], "not enforced by the grammar")) << r.post_validation[0];
  EXPECT_LT(r.grammar->nodes.size(), 200000u);
  EXPECT_TRUE(accepts(r, ordered_json(std::string(6000, 'x')).dump()));
  EXPECT_FALSE(accepts(r, ordered_json(std::string(100, 'x')).dump()));
  EXPECT_TRUE(contains(refusal(R"({"type":"string","minLength":-1})"), "non-negative"));
}

TEST(SchemaLimits, NodeBudgetRefusesHugeGrammars) {
  const std::string e = refusal(R"({"type":"object","properties":{"a":{"type":"string","pattern":"^.{0,5000}$"}}})");
  EXPECT_TRUE(contains(e, "/properties/a: the grammar of this schema would exceed")) << e;
}

TEST(SchemaLimits, HugeObjectsAndDeepNestingAreRefusedBeforeParsing) {
  // The order-keeping parse is quadratic in an object's keys: the text is scanned first.
  std::string text = R"({"type":"object","properties":{)";
  for (int i = 0; i < 20001; ++i) text += (i ? ",\"p" : "\"p") + std::to_string(i) + R"(":{})";
  text += "}}";
  std::string e = refusal(text);
  EXPECT_TRUE(contains(e, "/properties: an object with more than 20000 keys")) << e;
  std::string deep;
  for (int i = 0; i < 600; ++i) deep += R"({"items":[)";
  e = refusal(deep);  // refused before the syntax error at its end is reached
  EXPECT_TRUE(contains(e, "nested too deeply")) << e;
  EXPECT_TRUE(contains(e, "/items/0/items/0")) << e;
}

// minimize() against a reference: the language is kept (random strings), no two states of the
// result are equivalent (a round-by-round Moore refinement finds no split), and a chain of 20000
// states (a maxLength counter) is minimised in linear time.
TEST(SchemaLimits, MinimizeKeepsTheLanguageAndIsMinimal) {
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    g::Dfa d;
    const int n = 1 + static_cast<int>(rng() % 12);
    d.out.resize(n);
    d.accepting.resize(n);
    for (int s = 0; s < n; ++s) {
      d.accepting[s] = rng() % 3 == 0;
      for (std::uint32_t c = 'a'; c <= 'd'; ++c)
        if (rng() % 4) d.out[s].push_back({c, c, static_cast<int>(rng() % n)});
    }
    const g::Dfa m = g::minimize(d);
    for (int k = 0; k < 100; ++k) {
      std::string s;
      for (int i = static_cast<int>(rng() % 7); i > 0; --i) s += static_cast<char>('a' + rng() % 4);
      ASSERT_EQ(g::dfa_matches(d, s), g::dfa_matches(m, s)) << "round " << round << " on " << s;
    }
    // Moore's refinement on the result: every class must already be a single state.
    std::vector<int> cls(m.size());
    for (std::size_t s = 0; s < m.size(); ++s) cls[s] = m.accepting[s];
    for (std::size_t it = 0; it <= m.size(); ++it) {
      std::map<std::pair<int, std::vector<int>>, int> sig;
      std::vector<int> next(m.size());
      for (std::size_t s = 0; s < m.size(); ++s) {
        std::vector<int> key;
        for (std::uint32_t c = 'a'; c <= 'd'; ++c) {
          int to = -1;
          for (const auto& e : m.out[s])
            if (e.lo <= c && c <= e.hi) to = cls[static_cast<std::size_t>(e.to)];
          key.push_back(to);
        }
        next[s] = sig.emplace(std::make_pair(cls[s], key), static_cast<int>(sig.size())).first->second;
      }
      cls = next;
    }
    EXPECT_EQ(std::set<int>(cls.begin(), cls.end()).size(), m.size()) << "round " << round;
  }
  // A 20000-state counter and its product with a pattern (quadratic with Moore's algorithm).
  const g::Dfa len = g::dfa_length(0, 20000);
  const g::Dfa m = g::minimize(g::dfa_intersect(len, g::determinize(g::parse_regex("a")), 100000));
  EXPECT_TRUE(g::dfa_matches(m, std::string(19999, 'b') + "a"));
  EXPECT_FALSE(g::dfa_matches(m, std::string(20001, 'a')));
  EXPECT_FALSE(g::dfa_matches(m, std::string(300, 'b')));
}

TEST(SchemaLimits, LiteralSetsAreTries) {
  std::mt19937 rng(5);
  std::set<std::string> words;
  while (words.size() < 20000) {
    std::string w;
    for (int i = 1 + static_cast<int>(rng() % 10); i > 0; --i) w += static_cast<char>('a' + rng() % 26);
    words.insert(w);
  }
  const g::Dfa d = g::dfa_literals(std::vector<std::string>(words.begin(), words.end()));
  std::size_t chars = 0;
  for (const auto& w : words) chars += w.size();
  EXPECT_LE(d.size(), chars + 1);
  int checked = 0;
  for (const auto& w : words)
    if (++checked % 50 == 0) {
      EXPECT_TRUE(g::dfa_matches(d, w)) << w;
      EXPECT_EQ(g::dfa_matches(d, w + "q"), words.count(w + "q") > 0) << w;
    }
  EXPECT_FALSE(g::dfa_matches(d, ""));
}

// The hardening issue's patterns in the grammar's own automata: determinised once (a few states),
// then one step per character, whatever the nesting of quantifiers.
TEST(SchemaLimits, NestedQuantifiersStayBounded) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const char* p : {"^([A-Z0-9]+-?)+$", "^(a+)+$", "^((a+)+)+$", "^(a|aa)*$"}) {
    ordered_json s = {{"type", "string"}, {"pattern", p}};
    auto r = g::compile_json_schema(s);
    EXPECT_LT(r.grammar->nodes.size(), 2000u) << p;
    const char c = p[3] == 'A' ? 'A' : 'a';
    EXPECT_FALSE(accepts(r, ordered_json(std::string(40, c) + "!").dump())) << p;
    EXPECT_TRUE(accepts(r, ordered_json(std::string(100003, c)).dump())) << p;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));  // hang check only
}
