// schemas/validate.{hpp,cpp}: the shipped schemas themselves, valijson behaviour on the official
// JSON-Schema-Test-Suite (draft 7) for the keywords our schemas use, and the shape of Violations.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <unistd.h>

#include "schemas/ecma_regex.hpp"
#include "schemas/schema_check.hpp"
#include "schemas/schemas.hpp"
#include "schemas/validate.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using quarry::schemas::SchemaCache;
using quarry::schemas::Validator;
using quarry::schemas::Violation;

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error(p.string() + ": cannot open");
  return json::parse(in);
}

// Every object schema below `s` (including `s`), with its JSON pointer.
void object_schemas(const json& s, const std::string& ptr, std::vector<std::pair<std::string, json>>& out) {
  if (!s.is_object()) return;
  if (s.contains("properties")) out.emplace_back(ptr, s);
  if (s.contains("properties"))
    for (auto& [k, v] : s["properties"].items()) object_schemas(v, ptr + "/properties/" + k, out);
  if (s.contains("items")) object_schemas(s["items"], ptr + "/items", out);
}

}  // namespace

TEST(Schemas, ShippedSchemasAreValidDraft07) {
  // The draft-07 meta-schema as published by json-schema.org, shipped by Debian's python3-jsonschema.
  const fs::path meta_path = QUARRY_DRAFT7_METASCHEMA;
  ASSERT_TRUE(fs::exists(meta_path)) << meta_path << " missing: install python3-jsonschema";
  Validator meta(read_json(meta_path), meta_path.string());
  for (const char* name : {"invoice.schema.json", "rag_answer.schema.json"}) {
    SCOPED_TRACE(name);
    auto violations = meta.validate(quarry::schemas::load(name));
    for (const auto& v : violations) ADD_FAILURE() << v.pointer << " " << v.keyword << ": " << v.message;
    EXPECT_NO_THROW(Validator(quarry::schemas::load(name), name));  // valijson compiles it
  }
  // The meta-schema is not a rubber stamp: a schema with a wrong "type" value is rejected.
  EXPECT_FALSE(meta.validate(json{{"type", "strnig"}}).empty());
  EXPECT_FALSE(meta.validate(json{{"required", "name"}}).empty());
}

TEST(Schemas, InvoiceSchemaHasTheAgreedPropertyNames) {
  json s = quarry::schemas::load("invoice.schema.json");
  auto props = [&](const json& o) {
    std::set<std::string> names;
    for (auto& [k, v] : o.at("properties").items()) names.insert(k);
    return names;
  };
  auto top = props(s);
  for (auto n : {"invoice_number", "issue_date", "due_date", "currency", "seller", "buyer", "line_items", "totals",
                 "payment", "document_type", "vat_breakdown"})
    EXPECT_TRUE(top.count(n)) << n;
  for (auto party : {"seller", "buyer"}) {
    auto p = props(s["properties"][party]);
    for (auto n : {"name", "tax_id", "vat_id", "address"}) EXPECT_TRUE(p.count(n)) << party << "." << n;
    auto a = props(s["properties"][party]["properties"]["address"]);
    EXPECT_EQ(a, (std::set<std::string>{"street", "city", "postal_code", "country"}));
  }
  auto li = props(s["properties"]["line_items"]["items"]);
  for (auto n : {"description", "quantity", "unit", "unit_price", "net_amount", "vat_rate", "vat_amount"})
    EXPECT_TRUE(li.count(n)) << n;
  auto t = props(s["properties"]["totals"]);
  EXPECT_EQ(t, (std::set<std::string>{"net", "vat", "gross", "amount_due", "allowance_total", "charge_total"}));
  auto pay = props(s["properties"]["payment"]);
  for (auto n : {"iban", "account_number", "due_date"}) EXPECT_TRUE(pay.count(n)) << n;

  // Tidy for constrained generation: every object closed and every property required (optional
  // values are nullable instead), every property described with its BT/BG number or a reason. The
  // one exception: the document-level allowance and charge totals (BT-107, BT-108), added after the
  // default model was trained, are optional and last in totals, so that a writer that omits them
  // still follows the schema's property order.
  std::vector<std::pair<std::string, json>> objects;
  object_schemas(s, "", objects);
  EXPECT_GE(objects.size(), 9u);
  for (const auto& [ptr, o] : objects) {
    SCOPED_TRACE(ptr);
    EXPECT_EQ(o.value("additionalProperties", json(true)), json(false));
    std::set<std::string> required(o.at("required").begin(), o.at("required").end());
    std::set<std::string> expected = props(o);
    if (ptr == "/properties/totals") {
      for (const char* k : {"allowance_total", "charge_total"}) expected.erase(k);
      // Property order as written in the file (nlohmann::json sorts keys; ordered_json keeps them).
      std::ifstream in(quarry::schemas::schema_dir() / "invoice.schema.json");
      const auto file = nlohmann::ordered_json::parse(in);
      std::vector<std::string> order;
      for (auto& [k, v] : file["properties"]["totals"]["properties"].items()) order.push_back(k);
      EXPECT_EQ(order, (std::vector<std::string>{"net", "vat", "gross", "amount_due", "allowance_total", "charge_total"}));
    }
    EXPECT_EQ(required, expected);
    for (auto& [k, v] : o["properties"].items()) EXPECT_TRUE(v.contains("description")) << k;
  }
}

// The official JSON-Schema-Test-Suite (draft 7, every file, plus the optional ECMA-262 regex tests
// and the date / time / date-time formats) run through our Validator: `valid` must equal "no
// violations". `pattern` and `patternProperties` run on RE2 here. A schema is refused only for a
// reference to another document (the suite's remote refs, e.g. to the draft-07 meta-schema).
TEST(Validator, OfficialTestSuiteDraft7) {
  const fs::path dir = fs::path(QUARRY_JSON_SCHEMA_TEST_SUITE) / "tests" / "draft7";
  ASSERT_TRUE(fs::exists(dir)) << dir << " missing: install json-schema-test-suite";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  for (const char* f : {"optional/ecmascript-regex.json", "optional/format/date.json", "optional/format/time.json",
                        "optional/format/date-time.json"})
    files.push_back(dir / f);
  std::sort(files.begin(), files.end());
  int cases = 0, refused = 0, patterns = 0;
  for (const auto& file : files) {
    for (const auto& group : read_json(file)) {
      // format "regex" (whether a string is a valid ECMA-262 pattern) is an annotation for us.
      if (group["schema"].is_object() && group["schema"].value("format", "") == "regex") continue;
      const std::string where = file.filename().string() + ": " + group["description"].get<std::string>();
      std::unique_ptr<Validator> v;
      try {
        v = std::make_unique<Validator>(group["schema"], where);
      } catch (const quarry::schemas::InvalidSchema& e) {
        EXPECT_NE(std::string(e.what()).find("remote documents are not fetched"), std::string::npos) << e.what();
        refused += static_cast<int>(group["tests"].size());
        continue;
      }
      const std::string text = group["schema"].dump();
      const bool has_pattern = text.find("\"pattern") != std::string::npos;
      for (const auto& test : group["tests"]) {
        SCOPED_TRACE(where + ": " + test["description"].get<std::string>());
        auto violations = v->validate(test["data"]);
        EXPECT_EQ(violations.empty(), test["valid"].get<bool>()) << test["data"].dump();
        ++cases;
        patterns += has_pattern;
      }
    }
  }
  EXPECT_GT(cases, 400);
  EXPECT_GT(patterns, 40);
  EXPECT_LT(refused, 25);
}

namespace {

json minimal_invoice() {
  auto party = json{{"name", "A"}, {"tax_id", nullptr}, {"vat_id", nullptr}, {"address", nullptr}};
  return json{{"document_type", "invoice"},
              {"invoice_number", "1"},
              {"issue_date", "2024-01-15"},
              {"due_date", nullptr},
              {"delivery_date", nullptr},
              {"currency", "EUR"},
              {"buyer_reference", nullptr},
              {"order_reference", nullptr},
              {"preceding_invoice", nullptr},
              {"seller", party},
              {"buyer", party},
              {"line_items", json::array({json{{"description", "x"},
                                               {"quantity", 1},
                                               {"unit", "C62"},
                                               {"unit_price", 10},
                                               {"net_amount", 10},
                                               {"vat_rate", 19},
                                               {"vat_amount", nullptr}}})},
              {"vat_breakdown", json::array()},
              {"totals", {{"net", 10}, {"vat", 1.9}, {"gross", 11.9}, {"amount_due", 11.9}}},
              {"payment",
               {{"means", nullptr}, {"iban", nullptr}, {"account_number", nullptr}, {"bic", nullptr}, {"due_date", nullptr}}}};
}

bool has(const std::vector<Violation>& vs, const std::string& pointer, const std::string& keyword) {
  for (const auto& v : vs)
    if (v.pointer == pointer && v.keyword == keyword) return true;
  return false;
}

std::string dump(const std::vector<Violation>& vs) {
  std::string s;
  for (const auto& v : vs) s += v.pointer + " [" + v.keyword + "] " + v.message + "\n";
  return s;
}

}  // namespace

TEST(Validator, ViolationsCarryPointerAndKeyword) {
  SchemaCache cache;
  auto v = cache.get("invoice.schema.json");
  EXPECT_EQ(v, cache.get("invoice.schema.json"));  // compiled once
  ASSERT_TRUE(v->validate(minimal_invoice()).empty()) << dump(v->validate(minimal_invoice()));

  json bad = minimal_invoice();
  bad["line_items"][0]["quantity"] = "one";
  bad["seller"].erase("vat_id");
  bad["totals"]["tip"] = 1;
  bad["issue_date"] = "2024-13-01";
  bad["currency"] = "euro";
  bad["payment"]["means"] = "cheque";
  bad["line_items"][0]["vat_rate"] = 270;
  auto vs = v->validate(bad);
  EXPECT_TRUE(has(vs, "/line_items/0/quantity", "type")) << dump(vs);
  EXPECT_TRUE(has(vs, "/seller", "required")) << dump(vs);
  EXPECT_TRUE(has(vs, "/totals", "additionalProperties")) << dump(vs);
  EXPECT_TRUE(has(vs, "/issue_date", "pattern")) << dump(vs);
  EXPECT_TRUE(has(vs, "/currency", "pattern")) << dump(vs);
  EXPECT_TRUE(has(vs, "/payment/means", "enum")) << dump(vs);
  EXPECT_TRUE(has(vs, "/line_items/0/vat_rate", "maximum")) << dump(vs);
  // valijson's summaries ("Failed to validate item #0 in array") are explained by the leaves above.
  for (const auto& x : vs) EXPECT_NE(x.keyword, "items") << dump(vs);
  EXPECT_EQ(vs.size(), 7u) << dump(vs);
}

TEST(Validator, PointersEscapePerRfc6901) {
  EXPECT_EQ(quarry::schemas::context_to_pointer({"<root>"}), "");
  EXPECT_EQ(quarry::schemas::context_to_pointer({"<root>", "[a/b]", "[m~n]", "[0]"}), "/a~1b/m~0n/0");
}

TEST(Validator, ChecksRunAfterConformance) {
  Validator v(quarry::schemas::load("invoice.schema.json"), "invoice");
  v.add_check([](const json& doc, std::vector<Violation>& out) {
    if (doc.value("/totals/gross"_json_pointer, 0.0) < doc.value("/totals/net"_json_pointer, 0.0))
      out.push_back({"/totals/gross", "gross-not-below-net", "gross below net"});
  });
  json doc = minimal_invoice();
  EXPECT_TRUE(v.validate(doc).empty());
  doc["totals"]["gross"] = 5;
  auto vs = v.validate(doc);
  ASSERT_EQ(vs.size(), 1u) << dump(vs);
  EXPECT_EQ(vs[0].keyword, "gross-not-below-net");
}

TEST(Validator, ConcurrentValidationGivesTheSameResult) {
  SchemaCache cache;
  auto v = cache.get("invoice.schema.json");
  json bad = minimal_invoice();
  bad["issue_date"] = "15.01.2024";
  const auto expected = v->validate(bad).size();
  ASSERT_EQ(expected, 1u);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if (v->validate(bad).size() != expected) ++mismatches[t];
        if (!v->validate(minimal_invoice()).empty()) ++mismatches[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(Validator, UnparsableSchemaThrowsNamingIt) {
  try {
    Validator v(json{{"properties", {{"a", {{"type", 5}}}}}}, "broken.schema.json");
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.schema.json"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Hostile schemas and documents: everything below is generated here.

namespace {

using quarry::schemas::InvalidSchema;
using quarry::schemas::Pattern;
using Clock = std::chrono::steady_clock;

// The message of the InvalidSchema that building a Validator for `schema` throws ("" if none).
std::string refusal(const json& schema, const std::string& name = "hostile.schema.json") {
  try {
    Validator v(schema, name);
  } catch (const InvalidSchema& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

json string_with_pattern(const std::string& pattern) { return {{"type", "string"}, {"pattern", pattern}}; }

// A random pattern of ECMA-262 constructs whose meaning std::regex (ECMAScript) and RE2 share on
// ASCII strings, with the constructs the translation rewrites.
std::string random_pattern(std::mt19937& rng, int depth = 0) {
  static const char* atoms[] = {"a", "b", "c", "1", ".", "\\d", "\\w", "\\s", "\\S", "[ab]", "[^a]", "[a-c1]",
                                "\\.", "-", "\\-", " ", "[\\s1]", "\\x61", "\\u0062", "[.]", "\\D", "[^\\s]"};
  std::string out;
  const int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n; ++i) {
    std::string atom;
    if (depth < 2 && rng() % 4 == 0)
      atom = std::string(rng() % 2 ? "(" : "(?:") + random_pattern(rng, depth + 1) + "|" + random_pattern(rng, depth + 1) + ")";
    else
      atom = atoms[rng() % (sizeof atoms / sizeof atoms[0])];
    static const char* quantifiers[] = {"", "", "", "*", "+", "?", "{1,2}", "{2}", "*?"};
    atom += quantifiers[rng() % 9];
    out += atom;
  }
  if (depth == 0 && rng() % 3 == 0) out = "^" + out;
  if (depth == 0 && rng() % 3 == 0) out += "$";
  return out;
}

}  // namespace

// The ECMA-262 -> RE2 translation against std::regex's ECMAScript grammar (the reference for the
// ECMA-262 meaning) on short ASCII strings, where std::regex is safe to run.
TEST(Patterns, TranslationMatchesStdRegexOnShortStrings) {
  std::mt19937 rng(42);
  const std::string alphabet = "abc1 .-_\n\t\r\v";
  int compared = 0;
  for (int k = 0; k < 200; ++k) {
    const std::string p = random_pattern(rng);
    Pattern re2(p);
    std::regex ref;
    try {
      ref = std::regex(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      ADD_FAILURE() << "std::regex refuses /" << p << "/: " << e.what();
      continue;
    }
    for (int t = 0; t < 40; ++t) {
      std::string s;
      for (int i = static_cast<int>(rng() % 6); i > 0; --i) s += alphabet[rng() % alphabet.size()];
      ASSERT_EQ(re2.search(s), std::regex_search(s, ref)) << "pattern /" << p << "/ (RE2: " << re2.translated()
                                                          << ") on \"" << s << "\"";
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8000);
}

// ECMA-262 meanings that RE2's syntax spells differently (see schemas/ecma_regex.hpp).
TEST(Patterns, EcmaSemanticsRe2LacksAreTranslated) {
  struct Case {
    const char* pattern;
    const char* text;
    bool match;
  };
  const Case cases[] = {
      {"^\\s$", "\u00a0", true},        {"^\\s$", "\u3000", true},      {"^\\s$", "\v", true},
      {"^\\S$", "\u2028", false},       {"^[\\s]$", "\ufeff", true},    {"^[^\\S]$", "\u2003", true},
      {"^.$", "\u2028", false},         {"^.$", "\r", false},           {"^.$", "\u00e9", true},
      {"^.$", "\U0001F600", true},      {"[]", "a", false},             {"^[^]$", "\n", true},
      {"^\\u0041$", "A", true},         {"^\\u{1F600}$", "\U0001F600", true},
      {"^\\uD83D\\uDE00$", "\U0001F600", true},                         {"\\uD800", "a", false},
      {"^\\cJ$", "\n", true},           {"^a{$", "a{", true},           {"^x}$", "x}", true},
      {"^]$", "]", true},               {"^a{1,$", "a{1,", true},       {"(?<year>\\d{4})", "in 2024", true},
      {"^\\p{L}+$", "\u00c1rv\u00edzt\u0171r\u0151", true},             {"^\\p{Lu}$", "a", false},
      {"^\\p{Script=Greek}$", "\u03b1", true},                          {"^[\\b]$", "\b", true},
      {"^\\/$", "/", true},             {"^\\a$", "a", true},           {"^\\d$", "\u0663", false},
      {"^\\w$", "\u00e9", false},       {"^[[:alpha:]]$", ":]", true},  {"^[[:alpha:]]$", "a", false},
      {"^\\x41\\x42$", "AB", true},     {"a$", "a\n", false},           {"^$", "", true},
  };
  for (const auto& c : cases) {
    Pattern p(c.pattern);
    EXPECT_EQ(p.search(c.text), c.match) << "/" << c.pattern << "/ (RE2: " << p.translated() << ") on \"" << c.text << "\"";
  }
  EXPECT_TRUE(Pattern("^\\0$").search(std::string(1, '\0')));
}

TEST(Patterns, NonLinearFeaturesAreRefusedAtLoad) {
  struct Case {
    const char* pattern;
    const char* reason;
  };
  for (const Case& c : {Case{"(a)\\1", "backreferences"}, Case{"(?<n>a)\\k<n>", "named backreferences"},
                        Case{"a(?=b)", "lookahead"}, Case{"a(?!b)", "lookahead"}, Case{"(?<=a)b", "lookbehind"},
                        Case{"(?<!a)b", "lookbehind"}, Case{"(?i)abc", "inline flags"}, Case{"a{1001}", "over 1000"},
                        Case{"(a", "missing ')'"}, Case{"a)", "unmatched ')'"}, Case{"[a", "missing ']'"},
                        Case{"[z-a]", "out of order"}, Case{"\\p{NoSuchProperty}", "RE2"}, Case{"a**", "RE2"}}) {
    const json s = {{"type", "object"}, {"properties", {{"id", string_with_pattern(c.pattern)}}}};
    const std::string e = refusal(s);
    EXPECT_TRUE(contains(e, "hostile.schema.json: /properties/id/pattern: pattern /")) << c.pattern << ": " << e;
    EXPECT_TRUE(contains(e, c.reason)) << c.pattern << ": " << e;
  }
  const std::string e = refusal({{"patternProperties", {{"^x(?=y)", true}}}});
  EXPECT_TRUE(contains(e, "/patternProperties/^x(?=y): pattern")) << e;
  EXPECT_TRUE(contains(refusal(string_with_pattern(std::string(20000, 'a'))), "longer than the limit"));
  EXPECT_TRUE(contains(refusal({{"pattern", 5}}), "/pattern: a pattern must be a string"));
}

// The hardening issue's cases: a pattern with nested quantifiers over an ID of 40 letters and '!'
// (minutes of backtracking on std::regex) and over an ID of 100,003 characters (std::regex recursed
// once per character and overflowed the stack). On RE2 both are linear.
TEST(Patterns, CatastrophicPatternsRunInLinearTime) {
  json schema = quarry::schemas::load("invoice.schema.json");
  schema["properties"]["invoice_number"]["pattern"] = "^([A-Z0-9]+-?)+$";
  Validator v(schema, "invoice+pattern");
  const auto t0 = Clock::now();
  json doc = minimal_invoice();
  doc["invoice_number"] = std::string(40, 'A') + "!";
  auto vs = v.validate(doc);
  EXPECT_TRUE(has(vs, "/invoice_number", "pattern")) << dump(vs);
  EXPECT_EQ(vs.size(), 1u) << dump(vs);
  doc["invoice_number"] = std::string(100003, 'A');
  EXPECT_TRUE(v.validate(doc).empty()) << v.validate(doc).size() << " violations";
  doc["invoice_number"] = std::string(50000, 'A') + "-" + std::string(50002, '7');
  EXPECT_TRUE(v.validate(doc).empty());
  doc["invoice_number"] = std::string(100002, 'A') + "!";
  EXPECT_TRUE(has(v.validate(doc), "/invoice_number", "pattern"));

  // ^(a+)+$ in patternProperties, on property names.
  Validator pp({{"type", "object"}, {"patternProperties", {{"^(a+)+$", {{"type", "integer"}}}}}}, "pp");
  EXPECT_TRUE(pp.validate({{std::string(40, 'a') + "!", "x"}}).empty());  // no pattern matches: allowed
  vs = pp.validate({{std::string(100003, 'a'), "x"}});
  ASSERT_EQ(vs.size(), 1u);  // the type failure (the pattern's summary is explained by it)
  EXPECT_TRUE(has(vs, "/" + std::string(100003, 'a'), "type"));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(60));  // a hang check, not a speed test
}

TEST(Patterns, PatternPropertiesKeepTheirSemantics) {
  const json schema = json::parse(R"({
    "definitions": {"n": {"type": "integer"}},
    "type": "object",
    "properties": {"x_fixed": {"type": "string"}, "plain": {"type": "string"}},
    "patternProperties": {"^x_": {"$ref": "#/definitions/n"}, "_b$": {"minimum": 10}},
    "additionalProperties": {"type": "string"}})");
  Validator v(schema, "pp.schema.json");
  EXPECT_TRUE(v.validate(json::parse(R"({"x_a": 1, "other": "s", "plain": "p"})")).empty());
  auto vs = v.validate(json::parse(R"({"x_a": "1", "other": 2, "x_fixed": "q", "x_b": 3, "plain": "p"})"));
  EXPECT_TRUE(has(vs, "/x_a", "type")) << dump(vs);      // pattern ^x_ -> integer
  EXPECT_TRUE(has(vs, "/other", "type")) << dump(vs);    // additionalProperties -> string
  EXPECT_TRUE(has(vs, "/x_fixed", "type")) << dump(vs);  // declared and matching ^x_: both apply
  EXPECT_TRUE(has(vs, "/x_b", "minimum")) << dump(vs);   // two patterns match x_b
  EXPECT_FALSE(has(vs, "/plain", "type")) << dump(vs);
  // Inside anyOf (no error collection): the branch fails or passes as a whole.
  Validator any({{"anyOf", {{{"type", "object"}, {"patternProperties", {{"^a", {{"type", "integer"}}}}},
                             {"additionalProperties", false}},
                            {{"type", "string"}}}}},
                "any");
  EXPECT_TRUE(any.validate(json::parse(R"({"ab": 1})")).empty());
  EXPECT_FALSE(any.validate(json::parse(R"({"ab": "x"})")).empty());
  EXPECT_FALSE(any.validate(json::parse(R"({"b": 1})")).empty());
  // A schema that names our internal keywords gets no say in them.
  Validator sneaky({{"x-quarry-internal-pattern", 0}, {"type", "string"}}, "sneaky");
  EXPECT_TRUE(sneaky.validate("anything").empty());
}

TEST(Validator, FormatsApplyToStringsOnly) {
  Validator v({{"type", "object"},
               {"properties", {{"d", {{"format", "date"}}}, {"t", {{"format", "time"}}}, {"dt", {{"format", "date-time"}}},
                               {"e", {{"format", "email"}}}}}},
              "formats");
  EXPECT_TRUE(v.validate({{"d", "2024-02-29"}, {"t", "23:59:60Z"}, {"dt", "2000-02-29T00:00:00+01:00"}}).empty());
  EXPECT_TRUE(v.validate({{"d", 5}, {"t", nullptr}, {"dt", json::array()}, {"e", "not an email"}}).empty());
  for (const char* bad : {"2023-02-29", "2024-13-01", "2024-04-31", "1900-02-29", "24-01-01", "2024-01-01x"})
    EXPECT_TRUE(has(v.validate({{"d", bad}}), "/d", "format")) << bad;
  EXPECT_TRUE(has(v.validate({{"t", "24:00:00Z"}}), "/t", "format"));
  EXPECT_TRUE(has(v.validate({{"dt", "2024-02-30T00:00:00Z"}}), "/dt", "format"));
  EXPECT_TRUE(has(v.validate({{"d", std::string(100003, '1') + "-01-01"}}), "/d", "format"));
}

TEST(Validator, RefCyclesAreRefusedNamingFileAndPointers) {
  EXPECT_EQ(refusal(json::parse(R"({"$ref":"#"})"), "cycle.schema.json"),
            "cycle.schema.json: (root): $ref cycle that makes no progress: (root) -> (root) (each step applies a "
            "schema to the same value; none descends into a part of it)");
  std::string e = refusal(json::parse(
      R"({"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}},"$ref":"#/definitions/a"})"));
  EXPECT_TRUE(contains(e, "hostile.schema.json: /definitions/a: $ref cycle that makes no progress: /definitions/a -> "
                          "/definitions/b -> /definitions/a"))
      << e;
  for (const char* s : {R"({"allOf":[{"$ref":"#"}]})", R"({"anyOf":[{"type":"null"},{"$ref":"#"}]})",
                        R"({"oneOf":[{"$ref":"#"}]})", R"({"not":{"$ref":"#"}})", R"({"if":{"$ref":"#"}})",
                        R"({"then":{"$ref":"#"}})", R"({"dependencies":{"a":{"$ref":"#"}}})",
                        R"({"properties":{"a":{"$ref":"#/properties/a"}}})",
                        R"({"$id":"http://x.test/s.json","allOf":[{"$ref":"http://x.test/s.json#"}]})"})
    EXPECT_TRUE(contains(refusal(json::parse(s)), "makes no progress")) << s;
  // Recursion through a part of the value is a tree, not a cycle.
  Validator tree(json::parse(R"({"type":"object","properties":{"name":{"type":"string"},
                                  "children":{"type":"array","items":{"$ref":"#"}}},"additionalProperties":false})"),
                 "tree");
  EXPECT_TRUE(tree.validate(json::parse(R"({"name":"a","children":[{"children":[{"name":"c"}]}]})")).empty());
  EXPECT_TRUE(has(tree.validate(json::parse(R"({"children":[{"children":[{"name":1}]}]})")), "/children/0/children/0/name",
                  "type"));
}

TEST(Validator, SchemaLimitsAreEnforcedWithPointers) {
  // JSON depth.
  json deep = json::object();
  for (int i = 0; i < 600; ++i) deep = {{"items", deep}};
  EXPECT_TRUE(contains(refusal(deep), "nested deeper than 512 levels of JSON")) << refusal(deep);
  // Keys of one object.
  json props = json::object();
  for (int i = 0; i < 20001; ++i) props["p" + std::to_string(i)] = json::object();
  EXPECT_TRUE(contains(refusal({{"properties", props}}), "hostile.schema.json: /properties: an object with more than 20000 keys"));
  // The validator's parse nesting: a chain of 3000 definitions (two levels each: the schema and a
  // $ref hop).
  json defs = json::object();
  for (int i = 0; i < 3000; ++i)
    defs["d" + std::to_string(i)] = {{"properties", {{"a", {{"$ref", "#/definitions/d" + std::to_string(i + 1)}}}}}};
  defs["d3000"] = true;
  std::string e = refusal({{"definitions", defs}, {"$ref", "#/definitions/d0"}});
  EXPECT_TRUE(contains(e, "nested schemas (subschemas and $refs) reaches here; the limit is 5000")) << e;
  // In-place work: allOf naming the next definition twice, 30 times.
  defs = json::object();
  for (int i = 0; i < 30; ++i) {
    const json next = {{"$ref", "#/definitions/d" + std::to_string(i + 1)}};
    defs["d" + std::to_string(i)] = {{"allOf", {next, next}}};
  }
  defs["d30"] = {{"type", "string"}};
  e = refusal({{"definitions", defs}, {"$ref", "#/definitions/d0"}});
  EXPECT_TRUE(contains(e, "apply more than 100000 schemas to one value")) << e;
  // References: unresolvable, remote, too long.
  EXPECT_TRUE(contains(refusal({{"$ref", "#/definitions/none"}}), "/$ref: $ref '#/definitions/none' does not resolve"));
  EXPECT_TRUE(contains(refusal({{"$ref", "https://example.com/s.json"}}), "remote documents are not fetched"));
  EXPECT_TRUE(contains(refusal({{"$ref", "#/" + std::string(3000, 'a')}}), "bytes (the limit is 2048)"));
  EXPECT_TRUE(contains(refusal({{"properties", {{"a", 5}}}}), "/properties/a: a schema must be an object or a boolean"));
}

TEST(Validator, LongChainsAndDeepDocumentsDoNotOverflowTheStack) {
  // 4,800 levels of valijson's parse (near the limit; it recurses per level: parsed, and this
  // document validated, on a large stack).
  json defs = json::object();
  const int n = 2400;
  for (int i = 0; i < n; ++i)
    defs["d" + std::to_string(i)] = {{"type", "object"},
                                     {"properties", {{"a", {{"$ref", "#/definitions/d" + std::to_string(i + 1)}}}}}};
  defs["d" + std::to_string(n)] = {{"type", "integer"}};
  Validator chain({{"definitions", defs}, {"$ref", "#/definitions/d0"}}, "chain");
  // Documents nested `levels` deep, built in place (assigning a nested value would copy it).
  auto nested = [](int levels, const char* key, const json& leaf) {
    json doc;
    json* cur = &doc;
    for (int i = 0; i < levels; ++i) {
      if (key) cur = &(*cur)[key];
      else cur = &(*cur = json::array({json()}))[0];
    }
    *cur = leaf;
    return doc;
  };
  std::string pointer;
  for (int i = 0; i < n; ++i) pointer += "/a";
  EXPECT_TRUE(chain.validate(nested(n, "a", 1)).empty());
  EXPECT_TRUE(has(chain.validate(nested(n, "a", "x")), pointer, "type"));
  // A recursive schema and documents 3,000 and 30,000 levels deep.
  Validator tree({{"type", "array"}, {"items", {{"$ref", "#"}}}}, "tree");
  EXPECT_TRUE(tree.validate(nested(3000, nullptr, json::array())).empty());
  auto vs = tree.validate(nested(30000, nullptr, json::array()));
  ASSERT_EQ(vs.size(), 1u) << dump(vs);
  EXPECT_EQ(vs[0].keyword, "depth");
}

TEST(Validator, LargeSchemasLoad) {
  json props = json::object();
  for (int i = 0; i < 14000; ++i) props["field_" + std::to_string(i)] = {{"type", "string"}, {"description", "field"}};
  Validator v({{"type", "object"}, {"properties", props}}, "wide");
  EXPECT_TRUE(v.validate({{"field_13999", "x"}, {"other", 1}}).empty());
  EXPECT_TRUE(has(v.validate({{"field_13999", 1}}), "/field_13999", "type"));
}

TEST(Schemas, SchemaFilesAreCheckedWhileParsing) {
  const auto dir = fs::temp_directory_path() / ("quarry_schema_files_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  };
  auto refused = [](const fs::path& p) -> std::string {
    try {
      quarry::schemas::load_schema_file(p);
    } catch (const InvalidSchema& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_TRUE(contains(refused(dir / "missing.json"), "missing.json: (root): cannot open the schema"));
  EXPECT_TRUE(contains(refused(write("bad.json", "{\"type\":")), "bad.json: (root): malformed JSON"));
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "[";
  EXPECT_TRUE(contains(refused(write("deep.json", deep)), "deep.json: /0/0/0"));
  std::string wide = "{\"properties\":{";
  for (int i = 0; i < 20001; ++i) wide += (i ? ",\"p" : "\"p") + std::to_string(i) + "\":{}";
  wide += "}}";
  EXPECT_TRUE(contains(refused(write("wide.json", wide)), "wide.json: /properties: an object with more than 20000 keys"));
  EXPECT_EQ(refused(write("ok.json", R"({"type":"string","pattern":"^a"})")), "");
  fs::remove_all(dir);
}
