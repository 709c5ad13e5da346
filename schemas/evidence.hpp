// Evidence of grounded values: where in the document each value of a schema location annotated
// `"x-quarry-source": "copy" | "number" | "date"` (engine/grammar/grounding.hpp) is printed, and the
// rule that every such value has some (`rule:evidence`).
//
//   auto ev = schemas::find_evidence(schema, data, pages);
//   record["evidence"] = ev.evidence;                  // {"/invoice_number": {"page":1,"start":..,...}}
//   for (auto& v : ev.violations) errors.push_back(v); // rule:evidence
//
// Evidence of a value, by its kind:
//  - copy: the first span of the pages that equals the string whitespace-insensitively
//    (grammar::find_copy_span: a whitespace run of the value meets one of the document; one of the
//    document may be skipped);
//  - number: the first printed number with the same value in some reading (grammar::find_numbers:
//    `1 234,50`, `1.234,50`, `1,234.50`, `-1234.5`, ...); failing that, a value that equals the sum
//    of one number field over the elements of an array of the same record (to 1e-6) is derived:
//    {"derived": "sum", "of": "/line_items/*/net_amount"};
//  - date: the first printed date whose ISO 8601 form is the value (grammar::find_dates).
// Entries are {"page", "start", "end", "text"}: page is 1-based; start / end are byte offsets in
// that page's UTF-8 text ([start, end)), text the bytes there. Empty or whitespace-only copy
// strings need none.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schemas/validate.hpp"

namespace quarry::schemas {

struct EvidenceResult {
  nlohmann::ordered_json evidence = nlohmann::ordered_json::object();  ///< JSON pointer -> entry
  std::vector<Violation> violations;  ///< rule:evidence, one per grounded value without evidence
  std::size_t grounded = 0;           ///< grounded values seen
};

/// Walks `data` along `schema` (properties, items, prefixItems, local $ref, allOf / anyOf / oneOf
/// branches) and finds the evidence of every value at an annotated location whose JSON type fits its
/// kind (copy, date: strings; number: numbers). `pages`: the document, one string per page. Never
/// throws for any data; a schema $ref that does not resolve is skipped.
EvidenceResult find_evidence(const nlohmann::json& schema, const nlohmann::json& data,
                             const std::vector<std::string>& pages);

/// Whether the schema annotates any location with copy, number or date.
bool has_grounded_locations(const nlohmann::json& schema);

}  // namespace quarry::schemas
