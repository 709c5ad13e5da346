// Structured e-invoices mapped straight to the invoice JSON (schemas/invoice.schema.json), no model.
//
// Formats, recognised by the root element's local name and namespace:
//   "ubl": OASIS UBL 2.1 Invoice (urn:oasis:names:specification:ubl:schema:xsd:Invoice-2) and
//          CreditNote (...:CreditNote-2), as profiled by EN 16931-3-2 / Peppol BIS Billing 3.0;
//   "cii": UN/CEFACT Cross Industry Invoice D16B (urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100),
//          the syntax of EN 16931-3-3, Factur-X / ZUGFeRD 2.x and XRechnung CII; also the ZUGFeRD 1.0
//          CrossIndustryDocument (urn:ferd:CrossIndustryDocument:invoice:1p0);
//   "nav": Hungarian NAV Online Számla InvoiceData 3.0 (http://schemas.nav.gov.hu/OSA/3.0/data).
// The field-by-field mapping (which element feeds which BT) is documented at the top of ubl.cpp,
// cii.cpp and nav.cpp. Values are taken as the document states them: amounts in the invoice currency
// with their sign, tax identifiers as printed, dates normalised to YYYY-MM-DD.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <tl/expected.hpp>

#include "extractors/document.hpp"

namespace quarry::einvoice {

/// An invoice JSON mapped from a structured e-invoice. `invoice` follows schemas/invoice.schema.json
/// (every property present, null where the document does not state it); `format` is "ubl", "cii" or "nav".
struct Mapped {
  nlohmann::json invoice;
  std::string format;
};

/// Maps the XML in `xml` (UTF-8 or as declared) to the invoice JSON. `source` names the input in errors.
/// Returns:
///  - nullopt when the XML is not one of the formats above (other XML, and other e-invoice syntaxes such
///    as FatturaPA, which then take the text path), when the bytes are not XML at all (nothing but
///    white space before the first '<', after an optional byte order mark; e.g. a PNG attachment),
///    or when `opts.map_einvoices` is false;
///  - an ExtractError when the XML cannot be parsed safely (malformed, entity declarations, nesting
///    deeper than `opts.max_xml_depth`, larger than `opts.max_file_bytes`; see extractors/xml/xml_safe.hpp),
///    or when it is one of the formats but lacks what the schema requires (invoice number, issue date,
///    currency, grand total) or holds a value that cannot be read (an amount that is not a number, a date
///    that is not a calendar date); the reason names the element;
///  - the mapped invoice otherwise.
/// Thread-safe (no shared state); never throws for bad input.
tl::expected<std::optional<Mapped>, ExtractError> map_xml(std::string_view xml, const std::string& source,
                                                          const ExtractOptions& opts);

}  // namespace quarry::einvoice
