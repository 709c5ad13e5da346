// Internal helpers shared by the e-invoice mappers (ubl.cpp, cii.cpp, nav.cpp). Not a public header.
#pragma once

#include <libxml/tree.h>

#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace quarry::einvoice::detail {

using Json = nlohmann::json;

/// Thrown inside a mapper when the document is of the format but cannot be mapped; map_xml turns it
/// into an ExtractError. Never escapes map_xml.
struct MapError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& reason);

/// The invoice JSON with every property of the schema present: strings and numbers null, arrays
/// empty, seller/buyer/totals/payment objects with null members (totals also with the schema's
/// optional allowance_total and charge_total). `document_type` is "invoice".
Json skeleton();
/// An address object with null members.
Json empty_address();

/// Child elements with the given local name, in document order.
std::vector<xmlNode*> children(const xmlNode* n, std::string_view local);
/// The first of several slash-separated local-name paths that exists below `n`, or nullptr.
xmlNode* first_path(const xmlNode* n, std::initializer_list<std::string_view> paths);

/// Trimmed text of `n`; null when `n` is absent or its text is empty.
Json str_or_null(const xmlNode* n);

/// Decimal number of `n` (xsd:decimal: optional sign, digits, optional fraction); nullopt when `n`
/// is absent or empty. Fails naming `what` when the text is not a number.
std::optional<double> number(const xmlNode* n, std::string_view what);
Json num_or_null(const xmlNode* n, std::string_view what);

/// A date as YYYY-MM-DD from "YYYY-MM-DD" (with an optional time or zone suffix, as xsd:date allows)
/// or "YYYYMMDD" (UNTDID 2379 format 102). Fails naming `what` when it is not a calendar date.
std::string iso_date(std::string_view s, std::string_view what);
Json date_or_null(const xmlNode* n, std::string_view what);

/// A fraction (NAV vatPercentage 0.27) as a percent (27), rounded to 1e-6 so that 0.27 gives 27, not
/// 27.000000000000004.
double fraction_to_percent(double f);

/// UNTDID 1001 document name code -> schema document_type; `fallback` for codes not listed.
std::string document_type_from_untdid1001(std::string_view code, std::string_view fallback);
/// UNTDID 4461 payment means code -> schema payment.means ("transfer", "cash", "card",
/// "direct_debit", "other"); null when `code` is empty.
Json means_from_untdid4461(std::string_view code);

/// Stores an account identifier in payment.iban (spaces removed, upper case) when it has the shape
/// of an IBAN, else in payment.account_number as printed. No-op for an empty string.
void set_account(Json& payment, const std::string& account);

/// Joins the non-empty strings with `sep`; null when all are empty.
Json join_nonempty(const std::vector<std::string>& parts, std::string_view sep);

}  // namespace quarry::einvoice::detail
