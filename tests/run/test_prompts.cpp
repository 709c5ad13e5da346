// Prompt templates: the "schema" template for a user's own schema, and the {schema} text, which must be
// what the bundled model was trained on (tools/train/build_corpus.py renders it in Python; the expected
// text below is that renderer's output for the same schema).
#include <gtest/gtest.h>

#include <fstream>

#include "pipeline/run/prompts.hpp"
#include "tests/engine/fixtures.hpp"

namespace quarry::run {
namespace {

const char* kSchema = R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Mietvertrag", "type": "object",
 "additionalProperties": false, "required": ["landlord", "rent"],
 "properties": {
   "landlord": {"type": ["string", "null"], "description": "Vermieter – Name", "maxLength": 200},
   "rent": {"type": "number", "minimum": 0},
   "start": {"type": "string", "format": "date", "pattern": "^\\d{4}"},
   "parties": {"type": "array", "items": {"type": "object", "properties": {
       "role": {"enum": ["tenant", "landlord"]}, "note": {"type": "string", "title": "Bemerkung \"x\""}}}}}})";

TEST(SchemaPrompt, RendersAsTheTrainingDataDoes) {
  EXPECT_EQ(schema_for_prompt(nlohmann::ordered_json::parse(kSchema)),
            R"({"title":"Mietvertrag","type":"object","required":["landlord","rent"],"properties":{"landlord":{"type":["string","null"],"description":"Vermieter – Name"},"rent":{"type":"number"},"start":{"type":"string","format":"date"},"parties":{"type":"array","items":{"type":"object","properties":{"role":{"enum":["tenant","landlord"]},"note":{"type":"string","title":"Bemerkung \"x\""}}}}}})");
}

TEST(SchemaPrompt, LocalRefsAreInlinedAndCyclesEnd) {
  const auto s = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "seller": {"$ref": "#/$defs/party", "description": "who sells"},
      "buyer": {"$ref": "#/definitions/party"},
      "elsewhere": {"$ref": "https://example.org/x.json"},
      "self": {"$ref": "#"}},
    "$defs": {"party": {"type": "object", "properties": {"name": {"type": "string"}}}},
    "definitions": {"party": {"type": "object", "properties": {"name": {"type": "string"}}}}})");
  const auto text = schema_for_prompt(s);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["properties"]["seller"]["properties"]["name"]["type"], "string");
  EXPECT_EQ(j["properties"]["seller"]["description"], "who sells");
  EXPECT_EQ(j["properties"]["buyer"]["type"], "object");
  EXPECT_EQ(j["properties"]["elsewhere"], nlohmann::json::object());
  EXPECT_TRUE(j["properties"]["self"].is_object());  // "#" recursion is cut at depth 32
  EXPECT_EQ(text.find("$defs"), std::string::npos);
}

TEST(SchemaPrompt, TemplatesFillSchemaThenDocument) {
  const auto dir = engine::testing::scratch_dir("schema_prompt");
  std::ofstream(dir / "prompts.json") << R"({"kie": {"system": "K", "user": "{document}"},
    "schema": {"system": "S", "user": "JSON Schema: {schema}\n\n{document}"}})";
  const auto p = PromptTemplates::load(dir / "prompts.json");
  ASSERT_TRUE(p.has_schema_template());
  const auto m = p.schema_messages("text with {schema} in it", "{\"type\":\"object\"}");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].content, "S");
  EXPECT_EQ(m[1].content, "JSON Schema: {\"type\":\"object\"}\n\ntext with {schema} in it");
  std::ofstream(dir / "old.json") << R"({"kie": {"system": "K", "user": "{document}"}})";
  EXPECT_FALSE(PromptTemplates::load(dir / "old.json").has_schema_template());
  std::ofstream(dir / "bad.json") << R"({"kie": {"system": "K", "user": "{document}"}, "schema": {"user": 3}})";
  try {
    PromptTemplates::load(dir / "bad.json");
    FAIL() << "accepted a schema template without strings";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quarry::run
