// libFuzzer target for the schema loaders (built with -DQUARRY_FUZZ=ON and clang; see
// tests/einvoice/CMakeLists.txt, ctest label `fuzz`). Seeds: the shipped schemas and the grammar
// test schemas. Every input goes through both places a schema is loaded:
// - the validator: schemas::parse_schema_text (size, depth, keys per object), Validator (checks,
//   rewrite for valijson, patterns on RE2), then a few documents validated;
// - the grammar compiler: engine/grammar/json_schema's compile_json_schema, then the same
//   documents checked against the grammar.
// Properties: never crashes, never hangs; a refusal is InvalidSchema / SchemaError and nothing
// else (any other exception aborts).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/json_schema.hpp"
#include "schemas/schema_check.hpp"
#include "schemas/validate.hpp"

namespace {

// Documents of every JSON type, with strings that exercise patterns and formats.
const std::vector<nlohmann::json>& documents() {
  static const std::vector<nlohmann::json> docs = [] {
    std::vector<nlohmann::json> d = {nullptr, true, 0, -7, 1.5, "", "2024-02-29", "23:59:60Z", "a-1",
                                     std::string(300, 'a') + "!", nlohmann::json::array(),
                                     nlohmann::json::array({1, "x", nlohmann::json::array({nullptr})}),
                                     nlohmann::json::object()};
    d.push_back({{"a", "b"}, {"x_1", 1}, {"name", "n"}, {"children", nlohmann::json::array({{{"name", 2}}})}});
    return d;
  }();
  return docs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::size_t seen = 0;
  try {
    const nlohmann::json schema = quarry::schemas::parse_schema_text(text, "fuzz.schema.json");
    quarry::schemas::Validator v(schema, "fuzz.schema.json");
    for (const auto& doc : documents())
      for (const auto& violation : v.validate(doc)) seen += violation.pointer.size() + violation.message.size();
    for (const auto& violation : v.validate(schema)) seen += violation.message.size();
  } catch (const quarry::schemas::InvalidSchema& e) {
    seen += std::string_view(e.what()).size();
  }
  namespace eg = quarry::engine::grammar;
  for (bool lenient : {false, true}) {
    try {
      eg::SchemaOptions opt;
      opt.lenient = lenient;
      auto r = eg::compile_json_schema(std::string_view(text), opt);
      for (const auto& doc : documents()) seen += eg::check_instance(*r.grammar, eg::ordered_json(doc), false);
    } catch (const eg::SchemaError& e) {
      seen += std::string_view(e.what()).size();
    }
  }
  return seen == static_cast<std::size_t>(-1);
}
