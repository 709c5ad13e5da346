// UN/CEFACT CII -> invoice JSON, following the EN 16931-3-3 syntax binding (D16B CrossIndustryInvoice,
// as in Factur-X / ZUGFeRD 2.x / XRechnung), and its ZUGFeRD 1.0 predecessor (CrossIndustryDocument),
// whose elements carry the same names under different containers. Paths below are D16B; the 1.0
// container is given in brackets where it differs.
//
//   document_type      rsm:ExchangedDocument [HeaderExchangedDocument]/ram:TypeCode (BT-3; UNTDID 1001)
//   invoice_number     .../ram:ID (BT-1)       issue_date  .../ram:IssueDateTime/udt:DateTimeString (BT-2)
//   transaction        rsm:SupplyChainTradeTransaction [SpecifiedSupplyChainTradeTransaction], holding
//   agreement          ram:ApplicableHeaderTradeAgreement [ApplicableSupplyChainTradeAgreement]:
//                      ram:BuyerReference (BT-10), ram:BuyerOrderReferencedDocument/ram:IssuerAssignedID
//                      [ram:ID] (BT-13), ram:SellerTradeParty (BG-4), ram:BuyerTradeParty (BG-7)
//   party              ram:Name (BT-27/44); ram:SpecifiedTaxRegistration/ram:ID with @schemeID VA -> vat_id
//                      (BT-31/48), FC -> tax_id (BT-32); ram:PostalTradeAddress (BG-5/8): LineOne, LineTwo,
//                      LineThree -> street; CityName; PostcodeCode; CountryID
//   delivery           ram:ApplicableHeaderTradeDelivery [ApplicableSupplyChainTradeDelivery]/
//                      ram:ActualDeliverySupplyChainEvent/ram:OccurrenceDateTime (BT-72)
//   settlement         ram:ApplicableHeaderTradeSettlement [ApplicableSupplyChainTradeSettlement]:
//                      ram:InvoiceCurrencyCode (BT-5); ram:InvoiceReferencedDocument/ram:IssuerAssignedID (BT-25);
//                      ram:SpecifiedTradePaymentTerms/ram:DueDateDateTime (BT-9);
//                      ram:SpecifiedTradeSettlementPaymentMeans (BG-16): ram:TypeCode (BT-81),
//                      ram:PayeePartyCreditorFinancialAccount/ram:IBANID | ram:ProprietaryID (BT-84),
//                      ram:PayeeSpecifiedCreditorFinancialInstitution/ram:BICID (BT-86);
//                      ram:ApplicableTradeTax (BG-23): ram:CategoryCode (BT-118), ram:RateApplicablePercent
//                      [ram:ApplicablePercent] (BT-119), ram:BasisAmount (BT-116), ram:CalculatedAmount (BT-117);
//                      ram:SpecifiedTradeSettlementHeaderMonetarySummation [SpecifiedTradeSettlementMonetarySummation]:
//                      TaxBasisTotalAmount (BT-109), TaxTotalAmount in the invoice currency (BT-110),
//                      GrandTotalAmount (BT-112), DuePayableAmount (BT-115), AllowanceTotalAmount (BT-107),
//                      ChargeTotalAmount (BT-108)
//   line_items         ram:IncludedSupplyChainTradeLineItem (BG-25): ram:SpecifiedTradeProduct/ram:Name (BT-153);
//                      ram:SpecifiedLineTradeDelivery [SpecifiedSupplyChainTradeDelivery]/ram:BilledQuantity
//                      (BT-129) with @unitCode (BT-130); ram:SpecifiedLineTradeAgreement
//                      [SpecifiedSupplyChainTradeAgreement]/ram:NetPriceProductTradePrice/ram:ChargeAmount (BT-146);
//                      ram:SpecifiedLineTradeSettlement [SpecifiedSupplyChainTradeSettlement]: ram:ApplicableTradeTax/
//                      ram:RateApplicablePercent [ram:ApplicablePercent] (BT-152),
//                      ram:SpecifiedTradeSettlementLineMonetarySummation [SpecifiedTradeSettlementMonetarySummation]/
//                      ram:LineTotalAmount (BT-131); vat_amount null (not in CII)
// Dates: udt:DateTimeString with @format 102 (YYYYMMDD); other formats (610 month, 616 week) are not
// days and make the mapping fail.
#include "extractors/einvoice/formats.hpp"
#include "extractors/xml/xml_safe.hpp"

namespace quarry::einvoice::detail {
namespace {

// A udt:DateTimeString below `n` (or `n` itself) as YYYY-MM-DD; null when absent.
Json cii_date(const xmlNode* n, std::string_view what) {
  if (!n) return nullptr;
  const xmlNode* s = xml::local_name(n) == "DateTimeString" ? n : xml::child(n, "DateTimeString");
  if (!s) s = n;  // some producers put the value directly in the container
  std::string value = xml::text(s);
  if (value.empty()) return nullptr;
  std::string format = xml::attr(s, "format");
  if (!format.empty() && format != "102")
    fail(std::string(what) + ": date format " + format + " ('" + value + "') is not a day (only 102 is mapped)");
  return iso_date(value, what);
}

Json party(const xmlNode* p) {
  Json out{{"name", nullptr}, {"tax_id", nullptr}, {"vat_id", nullptr}, {"address", nullptr}};
  if (!p) return out;
  out["name"] = str_or_null(xml::child(p, "Name"));
  for (xmlNode* reg : children(p, "SpecifiedTaxRegistration")) {
    const xmlNode* id = xml::child(reg, "ID");
    std::string scheme = xml::attr(id, "schemeID");
    Json v = str_or_null(id);
    if (v.is_null()) continue;
    if (scheme == "VA" && out["vat_id"].is_null()) out["vat_id"] = v;
    if (scheme == "FC" && out["tax_id"].is_null()) out["tax_id"] = v;
  }
  if (const xmlNode* a = xml::child(p, "PostalTradeAddress")) {
    Json addr = empty_address();
    addr["street"] = join_nonempty({xml::text(xml::child(a, "LineOne")), xml::text(xml::child(a, "LineTwo")),
                                    xml::text(xml::child(a, "LineThree"))},
                                   ", ");
    addr["city"] = str_or_null(xml::child(a, "CityName"));
    addr["postal_code"] = str_or_null(xml::child(a, "PostcodeCode"));
    addr["country"] = str_or_null(xml::child(a, "CountryID"));
    out["address"] = addr;
  }
  return out;
}

}  // namespace

Json map_cii(const xmlNode* root) {
  const bool v1 = xml::local_name(root) == "CrossIndustryDocument";  // ZUGFeRD 1.0
  Json inv = skeleton();

  const xmlNode* doc = xml::child(root, v1 ? "HeaderExchangedDocument" : "ExchangedDocument");
  if (!doc) fail(v1 ? "no rsm:HeaderExchangedDocument" : "no rsm:ExchangedDocument");
  inv["document_type"] = document_type_from_untdid1001(xml::text(xml::child(doc, "TypeCode")), "invoice");
  inv["invoice_number"] = str_or_null(xml::child(doc, "ID"));
  if (inv["invoice_number"].is_null()) fail("CII document without ram:ID (BT-1 invoice number)");
  inv["issue_date"] = cii_date(xml::child(doc, "IssueDateTime"), "ram:IssueDateTime (BT-2)");
  if (inv["issue_date"].is_null()) fail("CII document without ram:IssueDateTime (BT-2)");

  const xmlNode* tx = xml::child(root, v1 ? "SpecifiedSupplyChainTradeTransaction" : "SupplyChainTradeTransaction");
  if (!tx) fail("CII document without a supply chain trade transaction");
  const xmlNode* agreement =
      xml::child(tx, v1 ? "ApplicableSupplyChainTradeAgreement" : "ApplicableHeaderTradeAgreement");
  const xmlNode* delivery = xml::child(tx, v1 ? "ApplicableSupplyChainTradeDelivery" : "ApplicableHeaderTradeDelivery");
  const xmlNode* settlement =
      xml::child(tx, v1 ? "ApplicableSupplyChainTradeSettlement" : "ApplicableHeaderTradeSettlement");
  if (!settlement) fail("CII document without a header trade settlement");

  inv["currency"] = str_or_null(xml::child(settlement, "InvoiceCurrencyCode"));
  if (inv["currency"].is_null()) fail("CII document without ram:InvoiceCurrencyCode (BT-5)");
  const std::string currency = inv["currency"];
  inv["due_date"] = cii_date(xml::path(settlement, "SpecifiedTradePaymentTerms/DueDateDateTime"),
                             "ram:DueDateDateTime (BT-9)");
  inv["delivery_date"] = cii_date(xml::path(delivery, "ActualDeliverySupplyChainEvent/OccurrenceDateTime"),
                                  "ram:OccurrenceDateTime (BT-72)");
  inv["buyer_reference"] = str_or_null(xml::child(agreement, "BuyerReference"));
  inv["order_reference"] = str_or_null(
      first_path(agreement, {"BuyerOrderReferencedDocument/IssuerAssignedID", "BuyerOrderReferencedDocument/ID"}));
  inv["preceding_invoice"] = str_or_null(
      first_path(settlement, {"InvoiceReferencedDocument/IssuerAssignedID", "InvoiceReferencedDocument/ID"}));

  inv["seller"] = party(xml::child(agreement, "SellerTradeParty"));
  inv["buyer"] = party(xml::child(agreement, "BuyerTradeParty"));

  for (xmlNode* li : children(tx, "IncludedSupplyChainTradeLineItem")) {
    const xmlNode* la = xml::child(li, v1 ? "SpecifiedSupplyChainTradeAgreement" : "SpecifiedLineTradeAgreement");
    const xmlNode* ld = xml::child(li, v1 ? "SpecifiedSupplyChainTradeDelivery" : "SpecifiedLineTradeDelivery");
    const xmlNode* ls = xml::child(li, v1 ? "SpecifiedSupplyChainTradeSettlement" : "SpecifiedLineTradeSettlement");
    const xmlNode* qty = xml::child(ld, "BilledQuantity");
    Json item{{"description", str_or_null(xml::path(li, "SpecifiedTradeProduct/Name"))}};
    if (item["description"].is_null())
      item["description"] = str_or_null(xml::path(li, "SpecifiedTradeProduct/Description"));
    item["quantity"] = num_or_null(qty, "ram:BilledQuantity (BT-129)");
    std::string unit = xml::attr(qty, "unitCode");
    item["unit"] = unit.empty() ? Json(nullptr) : Json(unit);
    item["unit_price"] =
        num_or_null(xml::path(la, "NetPriceProductTradePrice/ChargeAmount"), "net price ram:ChargeAmount (BT-146)");
    item["net_amount"] = num_or_null(first_path(ls, {"SpecifiedTradeSettlementLineMonetarySummation/LineTotalAmount",
                                                     "SpecifiedTradeSettlementMonetarySummation/LineTotalAmount"}),
                                     "line ram:LineTotalAmount (BT-131)");
    item["vat_rate"] = num_or_null(
        first_path(ls, {"ApplicableTradeTax/RateApplicablePercent", "ApplicableTradeTax/ApplicablePercent"}),
        "line VAT rate (BT-152)");
    item["vat_amount"] = nullptr;
    inv["line_items"].push_back(std::move(item));
  }

  for (xmlNode* tax : children(settlement, "ApplicableTradeTax")) {
    Json b;
    b["category"] = str_or_null(xml::child(tax, "CategoryCode"));
    b["rate"] = num_or_null(first_path(tax, {"RateApplicablePercent", "ApplicablePercent"}), "VAT rate (BT-119)");
    auto basis = number(xml::child(tax, "BasisAmount"), "ram:BasisAmount (BT-116)");
    auto calculated = number(xml::child(tax, "CalculatedAmount"), "ram:CalculatedAmount (BT-117)");
    if (!basis || !calculated) fail("ram:ApplicableTradeTax without ram:BasisAmount or ram:CalculatedAmount");
    b["taxable_amount"] = *basis;
    b["vat_amount"] = *calculated;
    inv["vat_breakdown"].push_back(std::move(b));
  }

  const xmlNode* sum = first_path(settlement, {"SpecifiedTradeSettlementHeaderMonetarySummation",
                                               "SpecifiedTradeSettlementMonetarySummation"});
  if (!sum) fail("CII document without the monetary summation (BG-22)");
  Json& totals = inv["totals"];
  totals["net"] = num_or_null(xml::child(sum, "TaxBasisTotalAmount"), "ram:TaxBasisTotalAmount (BT-109)");
  // BT-110 is the TaxTotalAmount in the invoice currency; a second one in the VAT accounting
  // currency (BT-111) carries another currencyID.
  const xmlNode* tax_total = nullptr;
  for (xmlNode* t : children(sum, "TaxTotalAmount")) {
    std::string cur = xml::attr(t, "currencyID");
    if (cur == currency || (cur.empty() && !tax_total)) tax_total = t;
  }
  totals["vat"] = num_or_null(tax_total, "ram:TaxTotalAmount (BT-110)");
  totals["gross"] = num_or_null(xml::child(sum, "GrandTotalAmount"), "ram:GrandTotalAmount (BT-112)");
  if (totals["gross"].is_null()) fail("CII document without ram:GrandTotalAmount (BT-112)");
  totals["amount_due"] = num_or_null(xml::child(sum, "DuePayableAmount"), "ram:DuePayableAmount (BT-115)");
  totals["allowance_total"] = num_or_null(xml::child(sum, "AllowanceTotalAmount"), "ram:AllowanceTotalAmount (BT-107)");
  totals["charge_total"] = num_or_null(xml::child(sum, "ChargeTotalAmount"), "ram:ChargeTotalAmount (BT-108)");

  Json& pay = inv["payment"];
  if (const xmlNode* pm = xml::child(settlement, "SpecifiedTradeSettlementPaymentMeans")) {
    pay["means"] = means_from_untdid4461(xml::text(xml::child(pm, "TypeCode")));
    const xmlNode* acct = xml::child(pm, "PayeePartyCreditorFinancialAccount");
    std::string iban = xml::text(xml::child(acct, "IBANID"));
    set_account(pay, iban.empty() ? xml::text(xml::child(acct, "ProprietaryID")) : iban);
    pay["bic"] = str_or_null(xml::path(pm, "PayeeSpecifiedCreditorFinancialInstitution/BICID"));
  }
  pay["due_date"] = inv["due_date"];
  return inv;
}

}  // namespace quarry::einvoice::detail
