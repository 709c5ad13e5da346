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
// Regular expressions never reach std::regex (valijson 1.0 hard-wires it for `pattern`,
// `patternProperties` and the date / time formats; its backtracking recurses once per character and
// can take exponential time): the schema is checked and rewritten first (schemas/prepare.hpp) and
// those keywords are checked by constraints of ours on RE2 (schemas/ecma_regex.hpp), linear in the
// string. `format` applies to strings only (date, time, date-time: RFC 3339, with month lengths and
// leap years; other formats are annotations). A valijson exception still becomes a Violation with
// keyword "valijson" instead of propagating.
//
// Stack: valijson's parser and validator recurse once per nested schema (about 30 KiB per level
// under AddressSanitizer). The schema is parsed on a thread of its own with a 256 MiB stack, its
// nesting is limited (SchemaLimits::max_levels), and a document whose depth times the schema's
// in-place chains could need more than a small stack is validated on such a thread as well;
// deeper than kMaxValidationLevels it gets a Violation instead.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "schemas/schema_check.hpp"

namespace valijson {
class Schema;
class Validator;
}  // namespace valijson

namespace quarry::schemas {

namespace detail {
struct Tables;
}

/// Nested schema levels a validation may go through (the document's depth + 1 times the schema's
/// longest in-place chain + 1); a deeper document is reported, not validated.
inline constexpr std::size_t kMaxValidationLevels = 20000;

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
  /// Checks `schema` within `limits` (schema_check.hpp: shape, $ref resolution and cycles,
  /// patterns RE2 can run), then compiles it (valijson draft-07 parser). `name` labels the schema
  /// in errors (the file). Throws InvalidSchema ("<name>: <pointer>: <reason>", a
  /// std::runtime_error) when the schema is refused or valijson cannot parse it.
  Validator(const nlohmann::json& schema, std::string name, const SchemaLimits& limits = {});
  ~Validator();
  Validator(const Validator&) = delete;
  Validator& operator=(const Validator&) = delete;

  /// Appends a check that runs after conformance on every document (see `Check`). Not thread-safe
  /// with respect to concurrent `validate` calls: add checks before sharing the Validator.
  void add_check(Check check);

  /// All Violations of `doc`: schema conformance first (leaf failures only; valijson's summary
  /// errors such as "Failed to validate item #0 in array" are dropped when a deeper failure explains
  /// them), then each check's. Empty = valid. Time linear in the document for the regular
  /// expressions; a document too deep to validate (kMaxValidationLevels) gets one Violation with
  /// keyword "depth" and is not validated further.
  std::vector<Violation> validate(const nlohmann::json& doc) const;

  const std::string& name() const { return name_; }
  const nlohmann::json& schema() const { return schema_json_; }

 private:
  std::string name_;
  nlohmann::json schema_json_;
  std::shared_ptr<detail::Tables> tables_;  // patterns, member rules, member subschemas
  std::unique_ptr<valijson::Schema> schema_, targets_;
  std::size_t in_place_depth_ = 1;
  std::vector<Check> checks_;
  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<valijson::Validator>> pool_;
};

/// Compiled shipped schemas by file name, compiled once on first use. An owned object (no global
/// state): the pipeline keeps one per run. Thread-safe.
class SchemaCache {
 public:
  /// The Validator for `schema_dir()/name` (e.g. "invoice.schema.json"), compiled on first call.
  /// Throws InvalidSchema (a std::runtime_error) naming the file if it is missing, malformed, or
  /// not a valid schema.
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
