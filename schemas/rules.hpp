// Business rules of invoice documents shaped like schemas/invoice.schema.json, run as Checks after
// JSON Schema conformance (see schemas/validate.hpp).
//
// Each rule reports Violations with its rule id as `keyword` and a JSON pointer (RFC 6901) to the value
// that breaks it. A rule only looks at values of the type the schema gives them: a null (the document
// does not state the value) or a value of the wrong type (already a schema violation) is skipped, so
// missing data never counts as a rule violation. The rules never throw, whatever the input.
//
// Rule ids (Violation::keyword) and where they come from:
//   rule:line_sum        sum of line_items[*].net_amount - totals.allowance_total + totals.charge_total
//                        = totals.net (EN 16931 BR-CO-10 with BR-CO-13; the document-level allowances
//                        BT-107 and charges BT-108 count as 0 when absent or null). Checked when every
//                        line has a net amount and there is at least one line.
//   rule:gross           totals.net + totals.vat = totals.gross (BR-CO-15).
//   rule:vat_sum         sum of vat_breakdown[*].vat_amount = totals.vat (BR-CO-14).
//   rule:taxable_sum     sum of vat_breakdown[*].taxable_amount = totals.net (each BT-116 is its
//                        category's line amounts less allowances plus charges, so they add up to BT-109).
//   rule:vat_rate        vat_breakdown[i].vat_amount = taxable_amount x rate / 100 (BR-S-09 and the like).
//   rule:line_vat        line_items[i].vat_amount = net_amount x vat_rate / 100, where both are stated.
//   rule:date            a YYYY-MM-DD value that is not a calendar date (2023-02-30).
//   rule:date_order      issue_date <= due_date, issue_date <= payment.due_date.
//   rule:due_date_match  payment.due_date = due_date (the schema states it is the same date).
//   rule:iban            payment.iban, shaped as the schema's pattern requires, fails ISO 13616
//                        (unknown ISO 3166-1 country, or mod-97 != 1).
//   rule:hu_tax_number   a Hungarian adószám (a tax_id with 8 or 11 digits of a Hungarian party, i.e.
//                        address country HU or an HU VAT id, or any value printed as NNNNNNNN-N-NN)
//                        with a wrong format, check digit or VAT code.
//   rule:hu_vat_id       an "HU" VAT identifier that is not HU + 8 digits (a space or hyphen after
//                        "HU" allowed) with a valid check digit, or
//                        whose 8 digits differ from the party's adószám base (except for VAT group
//                        members, VAT code 4 or 5, whose group identifier differs).
//   rule:currency        currency is not an ISO 4217 code.
//   rule:country         an address country that is not an ISO 3166-1 alpha-2 code.
// Code lists (ISO 4217, ISO 3166-1) are converted at build time from Debian's iso-codes package data.
//
// Real documents do break some of these rules (tests/rules lists each with its reason): example IBANs
// with made-up check digits fail rule:iban; NAV advance invoices paid before they were issued and two
// EN 16931 examples with due dates before their issue dates fail rule:date_order; two NAV samples have
// VAT totals that do not add up. A caller that must accept such documents decides per rule id what
// makes a record invalid.
//
// Rounding tolerance. Amounts are rounded to a quantum q: 1 when every amount of the document is a whole
// number (a document kept in whole units, such as a HUF invoice), else 0.01 (cents). A total compared
// with a sum of N rounded amounts may differ from it by at most N x q/2 when the writer summed unrounded
// values (each rounded term is within q/2 of its unrounded value), so the tolerance of such a rule is
// (N + 1) x q/2 (the total itself is rounded too), plus 1e-9 relative for binary floating point. For a
// product (VAT = base x rate) the tolerance is q/2 for the rounding of the VAT plus q/2 x rate for the
// rounding of the base, and, for a breakdown entry, N x q/2 over the document's N lines (VAT summed
// line by line, as NAV invoices do).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "schemas/validate.hpp"

namespace quarry::schemas {

/// Registers every invoice business rule above as one Check on `v` (call before sharing `v`).
void add_invoice_rules(Validator& v);

/// The invoice business rule Violations of `doc` (what the Check registered by add_invoice_rules
/// appends), in the order of the rule list above. Never throws; any JSON value is accepted.
std::vector<Violation> check_invoice_rules(const nlohmann::json& doc);

/// ISO 13616 IBAN check of an electronic-format IBAN (upper case, no spaces): 2-letter country code
/// that is an ISO 3166-1 alpha-2 code, 2 check digits, 1-30 alphanumerics, and the mod-97 check
/// (letters A..Z as 10..35, the first four characters moved to the end, remainder 1 by 97).
/// Country-specific lengths and BBAN formats (SWIFT's IBAN registry) are not checked.
bool iban_valid(std::string_view iban);

/// Why `s` is not a valid Hungarian tax number (adószám), or nullopt when it is. Accepted forms:
/// "NNNNNNNN-V-CC", the 11 digits without hyphens, and the shortened "NNNNNNNN-V" and "NNNNNNNN"
/// (the 8-digit base, törzsszám, as NAV e-invoices may carry it). The 8th digit is the check digit of the first
/// seven, weights 9,7,3,1,9,7,3: check = (10 - weighted sum mod 10) mod 10 (the rule of the Hungarian
/// tax administration, NAV); V, the VAT code, is 1..5. The
/// county code CC is only checked to be two digits.
std::optional<std::string> hu_tax_number_error(std::string_view s);

/// True when the 8 digits `base` (adószám base, or the digits of an "HU" VAT id) carry a valid check
/// digit (weights above).
bool hu_tax_base_valid(std::string_view base);

/// True when `s` is a calendar date written YYYY-MM-DD (proleptic Gregorian; years 0001..9999).
bool calendar_date_valid(std::string_view s);

/// True when `code` is an ISO 4217 alphabetic currency code (list from iso-codes).
bool iso4217_valid(std::string_view code);

/// True when `code` is an ISO 3166-1 alpha-2 country code (list from iso-codes).
bool iso3166_alpha2_valid(std::string_view code);

}  // namespace quarry::schemas
