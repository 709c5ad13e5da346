// Cross-check: the values a model read from a document's visible text compared, field by field,
// with the values mapped from the same document's structured e-invoice XML (the reference).
//
//   auto r = schemas::cross_check(schema, model_data, xml_data);
//   for (const auto& f : r.fields) if (f.outcome == FieldOutcome::disagree) ...  // rule:cross_check
//
// What is compared (both values are JSON following the same schema, e.g. schemas/invoice.schema.json):
//  - every scalar of the reference (the XML's mapping) with the scalar at the same JSON pointer of
//    the model's output. Absent means null, missing, or a string of only whitespace; an empty array
//    or object counts as absent too.
//    - reference present, model equal after normalisation: agree;
//    - reference present, model different or absent: disagree;
//    - reference absent, model present: model_only (the XML does not carry the field, so nothing
//      is checked; counted apart, never a disagreement);
//    - both absent: not listed;
//    - at a number location, zero and absent agree (an allowance total of 0 in the XML and none
//      printed): XML 0 and no model value agree, model 0 and no XML value are not listed.
//  - arrays: the number of elements is one field at the array's pointer (values: the two counts),
//    when the reference has elements; then elements are compared index by index up to the shorter
//    length (documents list their lines in order); elements of the model beyond the reference's are
//    model_only, elements of the reference beyond the model's are covered by the count.
// Normalisation, by the schema at the value's location (`x-quarry-source`, `type`, `format`):
//  - number: by value (exact decimal: grammar::canonical_decimal), so 100, 100.0 and 1e2 agree; a
//    string holding a JSON number is read as that number;
//  - date: ISO 8601 YYYY-MM-DD; YYYYMMDD (CII format 102) and a string that is exactly one date in
//    one of the forms grammar::find_dates reads (`15.03.2024`, `March 15, 2024`, ...) are turned into it;
//  - text (anything else): Unicode NFKC_Casefold (ICU; compatibility forms, case folded) with every
//    white-space character removed, as grounded `copy` values are matched: `HU42 1177 3016` and
//    `hu4211773016` agree, as do `MÜLLER GMBH` and `Müller GmbH`. Punctuation is kept.
// Limits: object members whose schema is unknown are compared as text (numbers by value); a
// location reached through anyOf / oneOf / allOf takes the first branch that describes it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace quarry::schemas {

/// How the values of one schema location are normalised before they are compared.
enum class CompareAs { text, number, date };

/// The normalised form of `value` compared as `as` (see the top of this file), or nullopt when the
/// value is absent (null, or a string of only whitespace). Arrays and objects are written as their
/// compact JSON text normalised as text. Never throws.
std::optional<std::string> normalise_for_compare(const nlohmann::ordered_json& value, CompareAs as);

enum class FieldOutcome { agree, disagree, model_only };
const char* field_outcome_name(FieldOutcome o);

/// One compared location.
struct FieldComparison {
  std::string pointer;  ///< JSON pointer of the value ("/line_items/0/net_amount"); of the array for a count
  std::string field;    ///< the pointer with array indices written `*` ("/line_items/*/net_amount")
  FieldOutcome outcome = FieldOutcome::agree;
  bool count = false;          ///< the number of elements of the array at `pointer`
  nlohmann::ordered_json model, xml;  ///< the values as written (null when absent); the counts when `count`
};

struct CrossCheckResult {
  std::vector<FieldComparison> fields;  ///< every location compared, and the model-only ones
  std::size_t agree = 0, disagree = 0, model_only = 0;
  std::size_t compared() const { return agree + disagree; }
};

/// Compares `model` (the model's output) with `reference` (the e-invoice XML's mapping) along
/// `schema` (used only to pick the normalisation of each location). Fields come in the member order
/// of `reference`, model-only members after them. Never throws for any JSON.
CrossCheckResult cross_check(const nlohmann::json& schema, const nlohmann::ordered_json& model,
                             const nlohmann::ordered_json& reference);

}  // namespace quarry::schemas
