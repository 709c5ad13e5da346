// Validation of JSON documents against the schemas quarry ships (schemas/*.schema.json).
//
// Conformance to JSON Schema is checked by valijson (header-only; draft-07 parser, which also reads
// the draft 2020-12 subset our schemas keep to). Each failure is reported as a Violation: where (a
// JSON pointer, RFC 6901), which keyword or rule failed, and a message.
//
// Extension point: a Validator carries an ordered list of Checks that run after the JSON Schema
// conformance check on every document. Business rules (line sums, VAT arithmetic, IBAN mod-97, ...)
// are added there with `add_check` and report their own Violations with their rule id as `keyword`.
//
// Known valijson 1.0 limitation, and why our schemas use `pattern` for dates: its "format" check
// is applied to values of any type (a null date fails "format": "date"; a number makes it throw).
// The Validator turns such a throw into a Violation with keyword "valijson" instead of propagating it.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace valijson {
class Schema;
class Validator;
}  // namespace valijson

namespace quarry::schemas {

/// One failure of a document against a schema or a rule.
struct Violation {
  std::string pointer;   ///< JSON pointer to the failing value ("" = the whole document, "/line_items/0/quantity")
  std::string keyword;   ///< JSON Schema keyword that failed ("type", "required", "pattern", ...) or a rule id
  std::string message;   ///< human-readable reason (valijson's description, or the rule's)
};

/// A check run after schema conformance: appends its Violations for `doc`. Must be thread-safe
/// (it is called concurrently from every thread that validates) and must not throw for any input.
using Check = std::function<void(const nlohmann::json& doc, std::vector<Violation>& out)>;

/// A compiled schema plus the checks that follow it. Thread-safe: `validate` may be called from
/// several threads at once (each call borrows its own valijson::Validator, whose regex cache is not
/// thread-safe, from a small pool).
class Validator {
 public:
  /// Compiles `schema` (valijson draft-07 parser). `name` labels the schema in errors.
  /// Throws std::runtime_error naming the schema when valijson cannot parse it.
  Validator(const nlohmann::json& schema, std::string name);
  ~Validator();
  Validator(const Validator&) = delete;
  Validator& operator=(const Validator&) = delete;

  /// Appends a check that runs after conformance on every document (see `Check`). Not thread-safe
  /// with respect to concurrent `validate` calls: add checks before sharing the Validator.
  void add_check(Check check);

  /// All Violations of `doc`: schema conformance first (leaf failures only; valijson's summary
  /// errors such as "Failed to validate item #0 in array" are dropped when a deeper failure explains
  /// them), then each check's. Empty = valid.
  std::vector<Violation> validate(const nlohmann::json& doc) const;

  const std::string& name() const { return name_; }
  const nlohmann::json& schema() const { return schema_json_; }

 private:
  std::string name_;
  nlohmann::json schema_json_;
  std::unique_ptr<valijson::Schema> schema_;
  std::vector<Check> checks_;
  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<valijson::Validator>> pool_;
};

/// Compiled shipped schemas by file name, compiled once on first use. An owned object (no global
/// state): the pipeline keeps one per run. Thread-safe.
class SchemaCache {
 public:
  /// The Validator for `schema_dir()/name` (e.g. "invoice.schema.json"), compiled on first call.
  /// Throws std::runtime_error naming the file if it is missing, malformed, or not a valid schema.
  std::shared_ptr<Validator> get(std::string_view name);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Validator>> compiled_;
};

/// valijson's error context (["<root>", "[line_items]", "[0]", "[quantity]"]) as a JSON pointer
/// ("/line_items/0/quantity"), escaping '~' and '/' per RFC 6901.
std::string context_to_pointer(const std::vector<std::string>& context);

/// `message` as a JSON Schema keyword, read from valijson's fixed descriptions; "schema" when none
/// matches.
std::string keyword_of(std::string_view message);

}  // namespace quarry::schemas
