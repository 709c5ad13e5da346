// NAV Online Számla InvoiceData 3.0 (Hungarian tax authority's invoice data report) -> invoice JSON.
// Element names from NAV's invoiceData.xsd / invoiceBase.xsd 3.0; EN 16931 terms they correspond to:
//
//   invoice_number     invoiceNumber (BT-1)           issue_date  invoiceIssueDate (BT-2)
//   head               invoiceMain/invoice/invoiceHead; invoiceMain/batchInvoice (several modifying
//                      documents in one report) is refused: it is not one invoice.
//   document_type      invoiceReference present (a modifying or cancelling document) -> corrected_invoice;
//                      every line marked advanceData/advanceIndicator -> prepayment_invoice; else invoice
//   preceding_invoice  invoiceReference/originalInvoiceNumber (BT-25)
//   seller             supplierInfo: supplierName (BT-27); supplierTaxNumber (base:taxpayerId, base:vatCode,
//                      base:countyCode) printed "taxpayerId-vatCode-countyCode", e.g. 12345678-2-41 (BT-32);
//                      communityVatNumber (BT-31); supplierAddress (BG-5); supplierBankAccountNumber (BT-84)
//   buyer              customerInfo: customerName (BT-44); customerVatData/customerTaxNumber printed as above,
//                      else customerVatData/thirdStateTaxId; customerVatData/communityVatNumber (BT-48);
//                      customerAddress (BG-8)
//   address            base:simpleAddress (additionalAddressDetail -> street) or base:detailedAddress
//                      (streetName publicPlaceCategory number building staircase floor door lotNumber, joined
//                      by spaces -> street); base:city; base:postalCode; base:countryCode
//   invoiceDetail      currencyCode (BT-5); invoiceDeliveryDate (BT-72); paymentDate (BT-9);
//                      paymentMethod TRANSFER/CASH/CARD/VOUCHER/OTHER (BT-81);
//                      conventionalInvoiceInfo/orderNumbers/orderNumber (first; BT-13)
//   line_items         invoiceLines/line: lineDescription (BT-153), quantity (BT-129), unitOfMeasure or, when
//                      OWN, unitOfMeasureOwn (BT-130), unitPrice (BT-146); lineAmountsNormal: lineNetAmountData/
//                      lineNetAmount (BT-131), lineVatRate/vatPercentage as percent (BT-152), lineVatData/
//                      lineVatAmount; lineAmountsSimplified (gross-based simplified invoices): no net amount and
//                      no rate (vatContent is a share of the gross, not a rate), so those stay null
//   vat_breakdown      invoiceSummary/summaryNormal/summaryByVatRate (BG-23): vatRate (category and rate, see
//                      the schema), vatRateNetData/vatRateNetAmount (BT-116), vatRateVatData/vatRateVatAmount (BT-117)
//   totals             summaryNormal/invoiceNetAmount (BT-109), summaryNormal/invoiceVatAmount (BT-110),
//                      summaryGrossData/invoiceGrossAmount (BT-112; when absent: net + VAT for a normal summary,
//                      the sum of summarySimplified/vatContentGrossAmount for a simplified one); amount_due (BT-115)
//                      equals the gross amount, since InvoiceData has no prepaid amount (BT-113: advance
//                      deductions are lines, already inside the gross); allowance_total (BT-107) and
//                      charge_total (BT-108) stay null: InvoiceData has no document-level allowance or charge
//                      (a discount is line-level, lineDiscountData, already inside lineNetAmount, or a line
//                      of its own)
// All amounts are the invoice-currency ones (lineNetAmount, not lineNetAmountHUF), signed as stated.
#include "extractors/einvoice/formats.hpp"
#include "extractors/xml/xml_safe.hpp"

namespace quarry::einvoice::detail {
namespace {

// base:TaxNumberType as printed on Hungarian invoices: 8-digit taxpayer id, VAT code, county code.
Json tax_number(const xmlNode* n) {
  if (!n) return nullptr;
  std::string id = xml::text(xml::child(n, "taxpayerId"));
  if (id.empty()) return nullptr;
  std::string vat = xml::text(xml::child(n, "vatCode"));
  std::string county = xml::text(xml::child(n, "countyCode"));
  if (!vat.empty()) {
    id += "-" + vat;
    if (!county.empty()) id += "-" + county;
  }
  return id;
}

Json address(const xmlNode* n) {
  if (!n) return nullptr;
  const xmlNode* a = xml::child(n, "detailedAddress");
  Json addr = empty_address();
  if (a) {
    std::vector<std::string> parts;
    for (auto el : {"streetName", "publicPlaceCategory", "number", "building", "staircase", "floor", "door",
                    "lotNumber"})
      parts.push_back(xml::text(xml::child(a, el)));
    addr["street"] = join_nonempty(parts, " ");
  } else if ((a = xml::child(n, "simpleAddress"))) {
    addr["street"] = str_or_null(xml::child(a, "additionalAddressDetail"));
  } else {
    return nullptr;
  }
  addr["city"] = str_or_null(xml::child(a, "city"));
  addr["postal_code"] = str_or_null(xml::child(a, "postalCode"));
  addr["country"] = str_or_null(xml::child(a, "countryCode"));
  return addr;
}

Json means(const std::string& m) {
  if (m.empty()) return nullptr;
  if (m == "TRANSFER") return "transfer";
  if (m == "CASH") return "cash";
  if (m == "CARD") return "card";
  return "other";  // VOUCHER, OTHER
}

// vatRate (base:VatRateType) -> {category, rate}.
std::pair<Json, Json> vat_rate(const xmlNode* r) {
  if (!r) return {nullptr, nullptr};
  if (const xmlNode* mismatch = xml::child(r, "vatAmountMismatch")) r = mismatch;
  if (const xmlNode* p = xml::child(r, "vatPercentage")) {
    auto f = number(p, "vatPercentage");
    if (!f) return {nullptr, nullptr};
    double pct = fraction_to_percent(*f);
    return {pct == 0 ? "Z" : "S", pct};
  }
  if (xml::child(r, "vatExemption")) return {"E", nullptr};
  if (xml::child(r, "vatOutOfScope") || xml::child(r, "noVatCharge")) return {"O", nullptr};
  if (xml::child(r, "vatDomesticReverseCharge")) return {"AE", nullptr};
  return {nullptr, nullptr};  // marginSchemeIndicator, vatContent (simplified invoices)
}

}  // namespace

Json map_nav(const xmlNode* root) {
  Json inv = skeleton();
  inv["invoice_number"] = str_or_null(xml::child(root, "invoiceNumber"));
  if (inv["invoice_number"].is_null()) fail("NAV InvoiceData without invoiceNumber");
  inv["issue_date"] = date_or_null(xml::child(root, "invoiceIssueDate"), "invoiceIssueDate");
  if (inv["issue_date"].is_null()) fail("NAV InvoiceData without invoiceIssueDate");

  const xmlNode* main = xml::child(root, "invoiceMain");
  if (xml::child(main, "batchInvoice"))
    fail("NAV InvoiceData with batchInvoice: several modifying documents in one report, not one invoice");
  const xmlNode* invoice = xml::child(main, "invoice");
  if (!invoice) fail("NAV InvoiceData without invoiceMain/invoice");
  const xmlNode* head = xml::child(invoice, "invoiceHead");
  const xmlNode* detail = xml::child(head, "invoiceDetail");
  if (!detail) fail("NAV InvoiceData without invoiceHead/invoiceDetail");

  if (const xmlNode* ref = xml::child(invoice, "invoiceReference")) {
    inv["document_type"] = "corrected_invoice";
    inv["preceding_invoice"] = str_or_null(xml::child(ref, "originalInvoiceNumber"));
  }

  inv["currency"] = str_or_null(xml::child(detail, "currencyCode"));
  if (inv["currency"].is_null()) fail("NAV InvoiceData without invoiceDetail/currencyCode");
  inv["delivery_date"] = date_or_null(xml::child(detail, "invoiceDeliveryDate"), "invoiceDeliveryDate");
  inv["due_date"] = date_or_null(xml::child(detail, "paymentDate"), "paymentDate");
  inv["order_reference"] = str_or_null(xml::path(detail, "conventionalInvoiceInfo/orderNumbers/orderNumber"));

  const xmlNode* sup = xml::child(head, "supplierInfo");
  Json& seller = inv["seller"];
  seller["name"] = str_or_null(xml::child(sup, "supplierName"));
  seller["tax_id"] = tax_number(xml::child(sup, "supplierTaxNumber"));
  seller["vat_id"] = str_or_null(xml::child(sup, "communityVatNumber"));
  seller["address"] = address(xml::child(sup, "supplierAddress"));

  const xmlNode* cus = xml::child(head, "customerInfo");
  const xmlNode* cvat = xml::child(cus, "customerVatData");
  Json& buyer = inv["buyer"];
  buyer["name"] = str_or_null(xml::child(cus, "customerName"));
  buyer["tax_id"] = tax_number(xml::child(cvat, "customerTaxNumber"));
  if (buyer["tax_id"].is_null()) buyer["tax_id"] = str_or_null(xml::child(cvat, "thirdStateTaxId"));
  buyer["vat_id"] = str_or_null(xml::child(cvat, "communityVatNumber"));
  buyer["address"] = address(xml::child(cus, "customerAddress"));

  bool all_advance = true;
  std::size_t n_lines = 0;
  for (xmlNode* line : children(xml::child(invoice, "invoiceLines"), "line")) {
    ++n_lines;
    if (xml::text(xml::path(line, "advanceData/advanceIndicator")) != "true") all_advance = false;
    Json item{{"description", str_or_null(xml::child(line, "lineDescription"))}};
    item["quantity"] = num_or_null(xml::child(line, "quantity"), "line quantity");
    std::string unit = xml::text(xml::child(line, "unitOfMeasure"));
    if (unit == "OWN") unit = xml::text(xml::child(line, "unitOfMeasureOwn"));
    item["unit"] = unit.empty() ? Json(nullptr) : Json(unit);
    item["unit_price"] = num_or_null(xml::child(line, "unitPrice"), "line unitPrice");
    item["net_amount"] = nullptr;
    item["vat_rate"] = nullptr;
    item["vat_amount"] = nullptr;
    if (const xmlNode* normal = xml::child(line, "lineAmountsNormal")) {
      item["net_amount"] = num_or_null(xml::path(normal, "lineNetAmountData/lineNetAmount"), "lineNetAmount");
      item["vat_rate"] = vat_rate(xml::child(normal, "lineVatRate")).second;
      item["vat_amount"] = num_or_null(xml::path(normal, "lineVatData/lineVatAmount"), "lineVatAmount");
    }
    inv["line_items"].push_back(std::move(item));
  }
  if (n_lines > 0 && all_advance && inv["document_type"] == "invoice") inv["document_type"] = "prepayment_invoice";

  const xmlNode* summary = xml::child(invoice, "invoiceSummary");
  if (!summary) fail("NAV InvoiceData without invoiceSummary");
  Json& totals = inv["totals"];
  const xmlNode* normal = xml::child(summary, "summaryNormal");
  if (normal) {
    for (xmlNode* by : children(normal, "summaryByVatRate")) {
      auto [category, rate] = vat_rate(xml::child(by, "vatRate"));
      auto net = number(xml::path(by, "vatRateNetData/vatRateNetAmount"), "vatRateNetAmount");
      auto vat = number(xml::path(by, "vatRateVatData/vatRateVatAmount"), "vatRateVatAmount");
      if (!net || !vat) fail("summaryByVatRate without vatRateNetAmount or vatRateVatAmount");
      inv["vat_breakdown"].push_back(
          Json{{"category", category}, {"rate", rate}, {"taxable_amount", *net}, {"vat_amount", *vat}});
    }
    totals["net"] = num_or_null(xml::child(normal, "invoiceNetAmount"), "invoiceNetAmount");
    totals["vat"] = num_or_null(xml::child(normal, "invoiceVatAmount"), "invoiceVatAmount");
  }
  totals["gross"] = num_or_null(xml::path(summary, "summaryGrossData/invoiceGrossAmount"), "invoiceGrossAmount");
  if (totals["gross"].is_null()) {
    if (normal && totals["net"].is_number() && totals["vat"].is_number()) {
      totals["gross"] = totals["net"].get<double>() + totals["vat"].get<double>();
    } else {
      double gross = 0;
      bool any = false;
      for (xmlNode* s : children(summary, "summarySimplified"))
        if (auto g = number(xml::child(s, "vatContentGrossAmount"), "vatContentGrossAmount")) gross += *g, any = true;
      if (!any) fail("NAV InvoiceData without invoiceGrossAmount and without amounts to derive it from");
      totals["gross"] = gross;
    }
  }
  totals["amount_due"] = totals["gross"];

  Json& pay = inv["payment"];
  pay["means"] = means(xml::text(xml::child(detail, "paymentMethod")));
  set_account(pay, xml::text(xml::child(sup, "supplierBankAccountNumber")));
  pay["due_date"] = inv["due_date"];
  return inv;
}

}  // namespace quarry::einvoice::detail
