// Internal: one mapper per e-invoice syntax. Each takes the root element of a parsed document that
// einvoice.cpp recognised as its format, returns the invoice JSON, and throws detail::MapError with
// the reason when the document cannot be mapped.
#pragma once

#include <libxml/tree.h>

#include "extractors/einvoice/common.hpp"

namespace quarry::einvoice::detail {

Json map_ubl(const xmlNode* root);  ///< UBL 2.1 Invoice or CreditNote
Json map_cii(const xmlNode* root);  ///< CII D16B CrossIndustryInvoice or ZUGFeRD 1.0 CrossIndustryDocument
Json map_nav(const xmlNode* root);  ///< NAV Online Számla InvoiceData 3.0

}  // namespace quarry::einvoice::detail
