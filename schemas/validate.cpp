#include "schemas/validate.hpp"

#include <stdexcept>
#include <utility>

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include "schemas/schemas.hpp"

namespace quarry::schemas {
namespace {

// valijson reports, besides the failure itself, one summary error per enclosing object or array
// ("Failed to validate item #3 in array.", "Failed to validate against schema associated with
// property name 'seller'."). These carry no information once a deeper failure is reported.
bool is_summary(std::string_view msg) {
  return msg.starts_with("Failed to validate item #") ||
         msg.starts_with("Failed to validate against schema associated with property name") ||
         msg.starts_with("Failed to validate against additional properties schema") ||
         msg.starts_with("Failed to validate against schema associated with pattern");
}

bool is_below(std::string_view pointer, std::string_view parent) {
  return pointer.size() > parent.size() && pointer.starts_with(parent) && pointer[parent.size()] == '/';
}

// Borrows a valijson::Validator from the pool for one call and gives it back.
class Lease {
 public:
  Lease(std::mutex& mu, std::vector<std::unique_ptr<valijson::Validator>>& pool) : mu_(mu), pool_(pool) {
    std::lock_guard lock(mu_);
    if (!pool_.empty()) {
      v_ = std::move(pool_.back());
      pool_.pop_back();
    }
    if (!v_) v_ = std::make_unique<valijson::Validator>(valijson::Validator::kStrongTypes);
  }
  ~Lease() {
    std::lock_guard lock(mu_);
    pool_.push_back(std::move(v_));
  }
  valijson::Validator& operator*() { return *v_; }

 private:
  std::mutex& mu_;
  std::vector<std::unique_ptr<valijson::Validator>>& pool_;
  std::unique_ptr<valijson::Validator> v_;
};

}  // namespace

std::string context_to_pointer(const std::vector<std::string>& context) {
  std::string out;
  for (std::size_t i = 0; i < context.size(); ++i) {
    std::string_view c = context[i];
    if (i == 0 && c == "<root>") continue;
    if (c.size() >= 2 && c.front() == '[' && c.back() == ']') c = c.substr(1, c.size() - 2);
    out += '/';
    for (char ch : c) {
      if (ch == '~')
        out += "~0";
      else if (ch == '/')
        out += "~1";
      else
        out += ch;
    }
  }
  return out;
}

std::string keyword_of(std::string_view m) {
  struct Prefix {
    std::string_view prefix;
    std::string_view keyword;
  };
  static constexpr Prefix kPrefixes[] = {
      {"Value type not permitted by 'type'", "type"},
      {"Missing required property", "required"},
      {"Object contains a property that could not be validated", "additionalProperties"},
      {"Failed to validate against additional properties schema", "additionalProperties"},
      {"Failed to match against any enum values", "enum"},
      {"Failed to match expected value set by 'const'", "const"},
      {"Failed to match regex specified by 'pattern'", "pattern"},
      {"String should be a valid", "format"},
      {"String should be no more than", "maxLength"},
      {"String should be no fewer than", "minLength"},
      {"Expected number less than or equal to", "maximum"},
      {"Expected number less than", "exclusiveMaximum"},
      {"Expected number greater than or equal to", "minimum"},
      {"Expected number greater than", "exclusiveMinimum"},
      {"Array should contain no more than", "maxItems"},
      {"Array should contain no fewer than", "minItems"},
      {"Array contains more items than allowed", "items"},
      {"Elements at indexes", "uniqueItems"},
      {"Object should have no more than", "maxProperties"},
      {"Object should have no fewer than", "minProperties"},
      {"Value should be a multiple of", "multipleOf"},
      {"Value could not be converted", "multipleOf"},
      {"Failed to validate against any schemas allowed by anyOf", "anyOf"},
      {"Failed to validate against any child schemas allowed by oneOf", "oneOf"},
      {"Failed to validate against exactly one child schema", "oneOf"},
      {"Target should not validate against schema specified in 'not'", "not"},
      {"Failed to validate against child schema #", "allOf"},
      {"Failed to validate against a conditional schema", "if"},
      {"Failed to any values against subschema in 'contains'", "contains"},
      {"Missing dependency", "dependencies"},
      {"Failed to validate against dependent schema", "dependencies"},
      {"Failed to validate against schema associated with property name", "properties"},
      {"Failed to validate against schema associated with pattern", "patternProperties"},
      {"Failed to validate item #", "items"},
      {"Cannot validate item #", "items"},
  };
  for (const auto& p : kPrefixes)
    if (m.starts_with(p.prefix)) return std::string(p.keyword);
  return "schema";
}

Validator::Validator(const nlohmann::json& schema, std::string name)
    : name_(std::move(name)), schema_json_(schema), schema_(std::make_unique<valijson::Schema>()) {
  valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
  valijson::adapters::NlohmannJsonAdapter adapter(schema_json_);
  try {
    parser.populateSchema(adapter, *schema_);
  } catch (const std::exception& e) {
    throw std::runtime_error(name_ + ": not a valid JSON Schema: " + e.what());
  }
}

Validator::~Validator() = default;

void Validator::add_check(Check check) { checks_.push_back(std::move(check)); }

std::vector<Violation> Validator::validate(const nlohmann::json& doc) const {
  std::vector<Violation> all;
  {
    Lease v(pool_mu_, pool_);
    valijson::ValidationResults results;
    valijson::adapters::NlohmannJsonAdapter target(doc);
    try {
      (*v).validate(*schema_, target, &results);
    } catch (const std::exception& e) {
      all.push_back({"", "valijson", name_ + ": validation stopped: " + e.what()});
    }
    valijson::ValidationResults::Error err;
    while (results.popError(err))
      all.push_back({context_to_pointer(err.context), keyword_of(err.description), err.description});
  }
  // Keep leaf failures: drop a summary error when a failure below its pointer explains it.
  std::vector<Violation> out;
  out.reserve(all.size());
  for (const auto& v : all) {
    bool explained = false;
    if (is_summary(v.message))
      for (const auto& w : all)
        if (!is_summary(w.message) && (w.pointer == v.pointer || is_below(w.pointer, v.pointer))) {
          explained = true;
          break;
        }
    if (!explained) out.push_back(v);
  }
  for (const auto& check : checks_) check(doc, out);
  return out;
}

std::shared_ptr<Validator> SchemaCache::get(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = compiled_.find(std::string(name));
  if (it != compiled_.end()) return it->second;
  auto v = std::make_shared<Validator>(load(name), (schema_dir() / std::string(name)).string());
  compiled_.emplace(std::string(name), v);
  return v;
}

}  // namespace quarry::schemas
