// schemas/validate.{hpp,cpp}: the shipped schemas themselves, valijson behaviour on the official
// JSON-Schema-Test-Suite (draft 7) for the keywords our schemas use, and the shape of Violations.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

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

// The official JSON-Schema-Test-Suite (draft 7) for every keyword the shipped schemas use, run
// through our Validator: `valid` must equal "no violations".
TEST(Validator, OfficialTestSuiteDraft7) {
  const fs::path dir = fs::path(QUARRY_JSON_SCHEMA_TEST_SUITE) / "tests" / "draft7";
  ASSERT_TRUE(fs::exists(dir)) << dir << " missing: install json-schema-test-suite";
  int cases = 0;
  for (auto keyword : {"type", "properties", "required", "additionalProperties", "items", "enum", "pattern",
                       "minimum", "maximum", "minLength", "uniqueItems"}) {
    for (const auto& group : read_json(dir / (std::string(keyword) + ".json"))) {
      Validator v(group["schema"], group["description"]);
      for (const auto& test : group["tests"]) {
        SCOPED_TRACE(std::string(keyword) + ": " + group["description"].get<std::string>() + ": " +
                     test["description"].get<std::string>());
        auto violations = v.validate(test["data"]);
        EXPECT_EQ(violations.empty(), test["valid"].get<bool>()) << test["data"].dump();
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 150);
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
