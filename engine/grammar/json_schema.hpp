// JSON Schema -> byte-level grammar (grammar.hpp).
//
// Supported (drafts 2020-12, 2019-09, 07, 06, 04): type (incl. arrays of types), enum, const,
// properties, required, additionalProperties (true / false / schema), patternProperties,
// minProperties / maxProperties (member counting), propertyNames (string constraints on keys), items,
// prefixItems, additionalItems (<= 2019-09), minItems, maxItems, minLength, maxLength, pattern,
// format (date, time, date-time, email, uri, uuid, ipv4, ipv6), minimum, maximum, exclusiveMinimum,
// exclusiveMaximum (draft 4 booleans too), multipleOf (exact: decimal digits automaton), anyOf, oneOf, allOf, $ref / $defs / definitions (JSON
// pointers, `$id` / `$anchor` names inside the document; recursion), boolean schemas.
//
// Semantics and limits (documented, see also engine/grammar/README.md):
// - Objects are generated with the declared `properties` in schema order (required ones always,
//   optional ones may be skipped), then any additional / pattern properties. Instances whose keys are
//   in another order are judged with `check_instance(..., any_key_order=true)`, which searches for a
//   key order the grammar accepts.
// - multipleOf: numbers with it are generated without exponent (exactly the multiples).
// - Integers: exact digit-level grammars for bounds within int64. Numbers: exact for decimal bounds
//   with up to 18 integer digits (digit automata for x >= L and x <= H; bounded numbers are generated
//   without exponent); larger bounds are listed in `post_validation` (checked afterwards).
// - oneOf: exact when the branches are provably disjoint (disjoint type sets or disjoint enum / const
//   values); otherwise compiled as anyOf and listed in `post_validation`.
// - enum / const values are checked against the sibling type / length / bound / pattern keywords.
// - Duplicate keys among additional properties are not prevented; keys are compared as written
//   (escapes like \u0061 are not normalised).
// - Conditional keywords are rewritten exactly (see engine/grammar/README.md): if/then/else (draft 7+),
//   dependencies, dependentRequired, dependentSchemas (2019-09+), contains / minContains; `not` when
//   the complement of its schema is expressible (type, scalar const / enum, required, properties,
//   number bounds, lengths, pattern, counts, items, anyOf, not).
// - Over-approximations, listed in `post_validation` (validation afterwards rejects what they let
//   through): uniqueItems: true, maxContains, non-disjoint oneOf, an if whose complement is not
//   expressible (the else branch then also admits instances passing if).
// - Generated numbers have at most SchemaOptions::max_fraction_digits fraction digits (default 16).
// - String length bounds over 1,024 characters are widened (a longer minLength to 1,024, a longer
//   maxLength to none) and listed in `post_validation`: a length counter costs grammar nodes per
//   character.
// - `x-quarry-source` ("copy", "number", "date", "free"; anything else is a SchemaError): grounded
//   decoding (grounding.hpp). A copy / date string or a number at such a location gets grammar nodes
//   of its own tagged with the kind (GNode::source); the language is unchanged. Without a
//   GroundingIndex given to the matcher the tags do nothing.
// Unsupported keywords (not with a complement the grammar cannot express, unevaluated*,
// $dynamicRef, $recursiveRef, remote $ref) raise SchemaError naming the keyword and its JSON pointer;
// with `lenient` they are ignored with a warning.
//
// Hostile schemas are refused with SchemaError (pointer + reason), never by a crash or a hang:
// - $ref cycles that make no progress: a schema that reaches itself through in-place applicators
//   only ($ref, allOf, anyOf, oneOf, not, if / then / else, dependentSchemas, dependencies), e.g.
//   {"$ref": "#"} or two definitions naming each other; the message lists the cycle's pointers.
//   Recursion through a part of the value (items, properties, additionalProperties, ...) is fine;
// - more than 100,000 schemas applied in place to one value (allOf chains that name the next
//   definition twice double at every step);
// - schema text over 32 MiB, JSON nesting over 512 levels, an object of more than 20,000 keys
//   (checked by a linear SAX pass before the order-keeping parse, which is quadratic in an
//   object's keys), more than 20,000 declared properties in one object;
// - a grammar of more than 2,000,000 nodes (checked before each string automaton is lowered).
// Compile time and memory are near-linear in the schema: rule bodies are built from a work list
// (a $ref chain as long as the schema needs no deep recursion), long lists of optional properties
// are split into rules of 64 members (instead of a quadratic number of skip edges), and the
// automata are minimised in O(m log n) (automaton.hpp). Measured with bench/grammar/bench_schema_size.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.hpp"

namespace quarry::engine::grammar {

using ordered_json = nlohmann::ordered_json;

enum class Draft { kAuto, k4, k6, k7, k2019_09, k2020_12 };

struct SchemaOptions {
  Draft draft = Draft::kAuto;  ///< kAuto: from `$schema`, default 2020-12
  bool lenient = false;        ///< ignore unsupported keywords (with a warning) instead of failing
  /// Whitespace between JSON tokens: 0 = compact (none, the default); n > 0 = up to n whitespace
  /// bytes ([ \t\n\r]) allowed around each structural character.
  int max_whitespace = 0;
  /// Treat a missing additionalProperties / items as false (closed objects and arrays), as
  /// structured-output APIs do. Off by default (JSON Schema semantics).
  bool strict = false;
  /// Most fraction digits a generated number may have (0 = unbounded). Keeps a model from
  /// writing digits forever; instances with more fraction digits are rejected by the grammar.
  int max_fraction_digits = 16;
};

/// A schema the compiler cannot handle: `what()` = "<pointer>: <reason>".
struct SchemaError : std::runtime_error {
  SchemaError(std::string pointer_, std::string keyword_, const std::string& msg)
      : std::runtime_error((pointer_.empty() ? std::string("(root)") : pointer_) + ": " + msg),
        pointer(std::move(pointer_)), keyword(std::move(keyword_)) {}
  std::string pointer;  ///< JSON pointer of the schema location ("" = root)
  std::string keyword;  ///< offending keyword, if any
};

struct SchemaCompileResult {
  std::shared_ptr<const Grammar> grammar;
  Draft draft = Draft::k2020_12;
  std::vector<std::string> warnings;         ///< "<pointer>: <message>"
  std::vector<std::string> post_validation;  ///< constraints the grammar does not enforce exactly
};

/// Compiles a JSON Schema. Throws SchemaError (unsupported keyword, bad $ref, $ref cycle without
/// progress, bad regex, unsatisfiable schema, limits above) — never crashes or hangs on bad input.
SchemaCompileResult compile_json_schema(const ordered_json& schema, const SchemaOptions& options = {});
/// Checks the text's size, nesting and keys per object (linear), parses, then compiles; throws
/// SchemaError with the pointer of an excess, or ("", "", "invalid JSON: ...") on a parse error.
SchemaCompileResult compile_json_schema(std::string_view schema_text, const SchemaOptions& options = {});
inline SchemaCompileResult compile_json_schema(const std::string& schema_text, const SchemaOptions& options = {}) {
  return compile_json_schema(std::string_view(schema_text), options);
}
inline SchemaCompileResult compile_json_schema(const char* schema_text, const SchemaOptions& options = {}) {
  return compile_json_schema(std::string_view(schema_text), options);
}

/// Compact serialisation as the grammar generates it: no whitespace, keys in the stored order,
/// integral floats printed as integers (1.0 -> 1), strings escaped as nlohmann::json does
/// (UTF-8 kept, \" \\ \b \f \n \r \t, other controls \u00xx).
std::string dump_compact(const ordered_json& value);

/// Whether the grammar accepts the instance serialised by dump_compact. With any_key_order, object
/// members may be matched in any order (a search over orders the grammar accepts, member by member);
/// otherwise the instance's key order is kept.
bool check_instance(const Grammar& g, const ordered_json& instance, bool any_key_order);

}  // namespace quarry::engine::grammar
