// TEMPORARY placeholder of the e-invoice mapper interface (the real header and mappers come from the
// e-invoice branch; this file and einvoice_stub.cpp are dropped when it is merged).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <tl/expected.hpp>

#include "extractors/document.hpp"

namespace quarry::einvoice {

/// An invoice mapped from a structured e-invoice: JSON by schemas/invoice.schema.json, and the
/// syntax it came from: "ubl", "cii" or "nav".
struct Mapped {
  nlohmann::json invoice;
  std::string format;
};

/// Maps an XML e-invoice (UBL 2.1, UN/CEFACT CII, NAV InvoiceData) to the invoice JSON.
/// nullopt: the XML is not an e-invoice; error: it is one but could not be mapped (reason).
tl::expected<std::optional<Mapped>, ExtractError> map_xml(std::string_view xml, const std::string& source,
                                                         const ExtractOptions& opts);

}  // namespace quarry::einvoice
