// Internal to schemas/: a schema checked (schema_check.hpp) and rewritten for valijson, so that no
// regular expression of the schema ever reaches std::regex (which valijson 1.0 hard-wires: its
// backtracking executor recurses once per character of the string and can take exponential time).
//
// The rewrite, at every schema location valijson will parse (reached from the root):
// - `pattern` -> "x-quarry-internal-pattern": index into `patterns` (an RE2 Pattern);
// - `format` is removed (valijson checks date / time / date-time with std::regex and throws on
//   non-strings); the three it knows become "x-quarry-internal-format": name, checked with RE2;
// - `patternProperties` and the sibling `additionalProperties` are renamed to
//   "x-quarry-internal-patternProperties" / "-additionalProperties" (kept in the document, where
//   `targets` point) and replaced by "x-quarry-internal-members": index into `members`;
// - `$ref` becomes "#" + the JSON pointer of its target in the rewritten document; `$id` / `id`
//   are removed (references no longer depend on base URIs);
// - keys starting with "x-quarry-internal-" that the schema itself holds are removed.
#pragma once

#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schemas/ecma_regex.hpp"
#include "schemas/schema_check.hpp"

namespace quarry::schemas::detail {

inline constexpr const char* kPatternKey = "x-quarry-internal-pattern";
inline constexpr const char* kFormatKey = "x-quarry-internal-format";
inline constexpr const char* kMembersKey = "x-quarry-internal-members";
inline constexpr const char* kPatternPropertiesKey = "x-quarry-internal-patternProperties";
inline constexpr const char* kAdditionalPropertiesKey = "x-quarry-internal-additionalProperties";
inline constexpr const char* kInternalPrefix = "x-quarry-internal-";

/// What a member is validated against: anything (true), nothing (false), or targets[index].
struct Target {
  enum Kind { kAny, kNone, kSchema } kind = kAny;
  std::size_t index = 0;
};

/// The members of an object: each is validated against the schema of every pattern its name
/// matches; one that `properties` does not name and no pattern matches, against `additional`.
struct MemberRule {
  std::set<std::string> declared;                        ///< names in `properties` (valijson checks those)
  std::vector<std::pair<std::size_t, Target>> patterns;  ///< index into PreparedSchema::patterns, target
  Target additional;
};

struct PreparedSchema {
  nlohmann::json document;                               ///< what valijson parses
  std::vector<std::shared_ptr<const Pattern>> patterns;  ///< compiled once per distinct pattern
  std::vector<MemberRule> members;
  std::vector<std::string> targets;  ///< JSON pointers into `document` of the member subschemas
  std::size_t levels = 0;            ///< deepest nesting of valijson's parse (schemas and $ref hops)
  std::size_t in_place_depth = 0;    ///< longest chain of in-place applicators
};

/// Depth, keys per object and values of a document already parsed (iterative). Throws InvalidSchema.
void check_shape(const nlohmann::json& schema, const std::string& file, const SchemaLimits& limits);

/// Checks `schema` (check_shape first, then see schema_check.hpp) and rewrites it. Throws
/// InvalidSchema naming `file`.
PreparedSchema prepare_schema(const nlohmann::json& schema, const std::string& file, const SchemaLimits& limits);

/// JSON nesting depth of `v` (1 for a scalar), counted without recursion; stops past `limit`.
std::size_t json_depth(const nlohmann::json& v, std::size_t limit);

}  // namespace quarry::schemas::detail
