// UBL 2.1 Invoice / CreditNote -> invoice JSON, following the EN 16931-3-2 syntax binding.
//
//   document_type      cbc:InvoiceTypeCode | cbc:CreditNoteTypeCode (BT-3; UNTDID 1001), else root kind
//   invoice_number     cbc:ID (BT-1)                      issue_date   cbc:IssueDate (BT-2)
//   due_date           cbc:DueDate (BT-9), else cac:PaymentMeans/cbc:PaymentDueDate (CreditNote)
//   delivery_date      cac:Delivery/cbc:ActualDeliveryDate (BT-72)
//   currency           cbc:DocumentCurrencyCode (BT-5)    buyer_reference  cbc:BuyerReference (BT-10)
//   order_reference    cac:OrderReference/cbc:ID (BT-13)
//   preceding_invoice  cac:BillingReference/cac:InvoiceDocumentReference/cbc:ID (BT-25)
//   seller / buyer     cac:AccountingSupplierParty/cac:Party (BG-4), cac:AccountingCustomerParty/cac:Party (BG-7):
//                      name = cac:PartyLegalEntity/cbc:RegistrationName (BT-27/44), else cac:PartyName/cbc:Name;
//                      vat_id = cac:PartyTaxScheme/cbc:CompanyID whose cac:TaxScheme/cbc:ID is VAT (BT-31/48);
//                      tax_id = the cac:PartyTaxScheme/cbc:CompanyID of another scheme (BT-32);
//                      address = cac:PostalAddress (BG-5/8): StreetName + BuildingNumber, AdditionalStreetName,
//                      cac:AddressLine/cbc:Line -> street; CityName; PostalZone; cac:Country/cbc:IdentificationCode
//   line_items         cac:InvoiceLine | cac:CreditNoteLine (BG-25): cac:Item/cbc:Name (BT-153),
//                      cbc:InvoicedQuantity | cbc:CreditedQuantity (BT-129) with @unitCode (BT-130),
//                      cac:Price/cbc:PriceAmount (BT-146), cbc:LineExtensionAmount (BT-131),
//                      cac:Item/cac:ClassifiedTaxCategory/cbc:Percent (BT-152); vat_amount null (not in UBL)
//   vat_breakdown      cac:TaxTotal/cac:TaxSubtotal (BG-23) of the TaxTotal in the document currency
//   totals             cac:LegalMonetaryTotal: TaxExclusiveAmount (BT-109), TaxInclusiveAmount (BT-112),
//                      PayableAmount (BT-115), AllowanceTotalAmount (BT-107), ChargeTotalAmount (BT-108);
//                      vat = cac:TaxTotal/cbc:TaxAmount in the document currency (BT-110)
//   payment            first cac:PaymentMeans (BG-16): cbc:PaymentMeansCode (BT-81),
//                      cac:PayeeFinancialAccount/cbc:ID (BT-84), .../cac:FinancialInstitutionBranch/cbc:ID (BT-86)
#include "extractors/einvoice/formats.hpp"
#include "extractors/xml/xml_safe.hpp"

namespace quarry::einvoice::detail {
namespace {

Json party(const xmlNode* p) {
  Json out{{"name", nullptr}, {"tax_id", nullptr}, {"vat_id", nullptr}, {"address", nullptr}};
  if (!p) return out;
  out["name"] = str_or_null(xml::path(p, "PartyLegalEntity/RegistrationName"));
  if (out["name"].is_null()) out["name"] = str_or_null(xml::path(p, "PartyName/Name"));
  for (xmlNode* ts : children(p, "PartyTaxScheme")) {
    Json id = str_or_null(xml::child(ts, "CompanyID"));
    if (id.is_null()) continue;
    bool vat = xml::text(xml::path(ts, "TaxScheme/ID")) == "VAT";
    Json& slot = out[vat ? "vat_id" : "tax_id"];
    if (slot.is_null()) slot = id;
  }
  if (const xmlNode* a = xml::child(p, "PostalAddress")) {
    Json addr = empty_address();
    std::vector<std::string> street{
        xml::text(xml::child(a, "StreetName")) +
            (xml::child(a, "BuildingNumber") ? " " + xml::text(xml::child(a, "BuildingNumber")) : ""),
        xml::text(xml::child(a, "AdditionalStreetName"))};
    for (xmlNode* line : children(a, "AddressLine")) street.push_back(xml::text(xml::child(line, "Line")));
    for (auto& s : street)
      if (!s.empty() && s.front() == ' ') s.erase(0, 1);
    addr["street"] = join_nonempty(street, ", ");
    addr["city"] = str_or_null(xml::child(a, "CityName"));
    addr["postal_code"] = str_or_null(xml::child(a, "PostalZone"));
    addr["country"] = str_or_null(xml::path(a, "Country/IdentificationCode"));
    out["address"] = addr;
  }
  return out;
}

// The cac:TaxTotal whose cbc:TaxAmount is in the document currency (BT-110, not BT-111).
const xmlNode* document_tax_total(const xmlNode* root, const std::string& currency) {
  const xmlNode* first = nullptr;
  for (xmlNode* tt : children(root, "TaxTotal")) {
    std::string cur = xml::attr(xml::child(tt, "TaxAmount"), "currencyID");
    if (cur == currency) return tt;
    if (!first && cur.empty()) first = tt;
  }
  return first;
}

}  // namespace

Json map_ubl(const xmlNode* root) {
  const bool credit = xml::local_name(root) == "CreditNote";
  Json inv = skeleton();

  std::string code = xml::text(xml::child(root, credit ? "CreditNoteTypeCode" : "InvoiceTypeCode"));
  inv["document_type"] = document_type_from_untdid1001(code, credit ? "credit_note" : "invoice");

  inv["invoice_number"] = str_or_null(xml::child(root, "ID"));
  if (inv["invoice_number"].is_null()) fail("UBL document without cbc:ID (BT-1 invoice number)");
  inv["issue_date"] = date_or_null(xml::child(root, "IssueDate"), "cbc:IssueDate");
  if (inv["issue_date"].is_null()) fail("UBL document without cbc:IssueDate (BT-2)");
  inv["due_date"] = date_or_null(xml::child(root, "DueDate"), "cbc:DueDate");
  if (inv["due_date"].is_null())
    inv["due_date"] = date_or_null(xml::path(root, "PaymentMeans/PaymentDueDate"), "cbc:PaymentDueDate");
  inv["delivery_date"] = date_or_null(xml::path(root, "Delivery/ActualDeliveryDate"), "cbc:ActualDeliveryDate");
  inv["currency"] = str_or_null(xml::child(root, "DocumentCurrencyCode"));
  if (inv["currency"].is_null()) fail("UBL document without cbc:DocumentCurrencyCode (BT-5)");
  const std::string currency = inv["currency"];
  inv["buyer_reference"] = str_or_null(xml::child(root, "BuyerReference"));
  inv["order_reference"] = str_or_null(xml::path(root, "OrderReference/ID"));
  inv["preceding_invoice"] = str_or_null(xml::path(root, "BillingReference/InvoiceDocumentReference/ID"));

  inv["seller"] = party(xml::path(root, "AccountingSupplierParty/Party"));
  inv["buyer"] = party(xml::path(root, "AccountingCustomerParty/Party"));

  for (xmlNode* line : children(root, credit ? "CreditNoteLine" : "InvoiceLine")) {
    const xmlNode* qty = xml::child(line, credit ? "CreditedQuantity" : "InvoicedQuantity");
    Json item{{"description", str_or_null(xml::path(line, "Item/Name"))}};
    if (item["description"].is_null()) item["description"] = str_or_null(xml::path(line, "Item/Description"));
    item["quantity"] = num_or_null(qty, "line quantity (BT-129)");
    std::string unit = xml::attr(qty, "unitCode");
    item["unit"] = unit.empty() ? Json(nullptr) : Json(unit);
    item["unit_price"] = num_or_null(xml::path(line, "Price/PriceAmount"), "cbc:PriceAmount (BT-146)");
    item["net_amount"] = num_or_null(xml::child(line, "LineExtensionAmount"), "cbc:LineExtensionAmount (BT-131)");
    item["vat_rate"] = num_or_null(xml::path(line, "Item/ClassifiedTaxCategory/Percent"), "cbc:Percent (BT-152)");
    item["vat_amount"] = nullptr;
    inv["line_items"].push_back(std::move(item));
  }

  const xmlNode* tax_total = document_tax_total(root, currency);
  for (xmlNode* sub : children(tax_total, "TaxSubtotal")) {
    Json b;
    b["category"] = str_or_null(xml::path(sub, "TaxCategory/ID"));
    b["rate"] = num_or_null(xml::path(sub, "TaxCategory/Percent"), "TaxCategory/cbc:Percent (BT-119)");
    auto taxable = number(xml::child(sub, "TaxableAmount"), "cbc:TaxableAmount (BT-116)");
    auto tax = number(xml::child(sub, "TaxAmount"), "TaxSubtotal/cbc:TaxAmount (BT-117)");
    if (!taxable || !tax) fail("cac:TaxSubtotal without cbc:TaxableAmount or cbc:TaxAmount (BT-116/117)");
    b["taxable_amount"] = *taxable;
    b["vat_amount"] = *tax;
    inv["vat_breakdown"].push_back(std::move(b));
  }

  const xmlNode* lmt = xml::child(root, "LegalMonetaryTotal");
  if (!lmt) fail("UBL document without cac:LegalMonetaryTotal (BG-22)");
  Json& totals = inv["totals"];
  totals["net"] = num_or_null(xml::child(lmt, "TaxExclusiveAmount"), "cbc:TaxExclusiveAmount (BT-109)");
  totals["vat"] = num_or_null(xml::child(tax_total, "TaxAmount"), "TaxTotal/cbc:TaxAmount (BT-110)");
  totals["gross"] = num_or_null(xml::child(lmt, "TaxInclusiveAmount"), "cbc:TaxInclusiveAmount (BT-112)");
  if (totals["gross"].is_null()) fail("UBL document without cbc:TaxInclusiveAmount (BT-112)");
  totals["amount_due"] = num_or_null(xml::child(lmt, "PayableAmount"), "cbc:PayableAmount (BT-115)");
  totals["allowance_total"] = num_or_null(xml::child(lmt, "AllowanceTotalAmount"), "cbc:AllowanceTotalAmount (BT-107)");
  totals["charge_total"] = num_or_null(xml::child(lmt, "ChargeTotalAmount"), "cbc:ChargeTotalAmount (BT-108)");

  Json& pay = inv["payment"];
  if (const xmlNode* pm = xml::child(root, "PaymentMeans")) {
    pay["means"] = means_from_untdid4461(xml::text(xml::child(pm, "PaymentMeansCode")));
    const xmlNode* acct = xml::child(pm, "PayeeFinancialAccount");
    set_account(pay, xml::text(xml::child(acct, "ID")));
    pay["bic"] = str_or_null(first_path(acct, {"FinancialInstitutionBranch/ID",
                                               "FinancialInstitutionBranch/FinancialInstitution/ID"}));
  }
  pay["due_date"] = inv["due_date"];
  return inv;
}

}  // namespace quarry::einvoice::detail
