// extractors/einvoice: every real e-invoice of the corpora maps to invoice JSON that (a) validates
// against schemas/invoice.schema.json with valijson and (b) carries the source's values, read here
// independently with libxml2's XPath engine; hostile and broken XML is refused with a clear error.
#include <gtest/gtest.h>

#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>

#include <poppler-document.h>
#include <poppler-embedded-file.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "extractors/einvoice/einvoice.hpp"
#include "schemas/validate.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using quarry::ExtractOptions;
using quarry::einvoice::map_xml;

namespace {

const fs::path kCorpora = fs::path(QUARRY_SHARED_DIR) / "corpora";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// --- An independent reader: libxml2 XPath 1.0 with explicit namespace prefixes. ---------------------

struct Namespace {
  const char* prefix;
  const char* uri;
};

class XPathDoc {
 public:
  XPathDoc(const std::string& xml, const std::vector<Namespace>& ns) {
    doc_ = xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "test.xml", nullptr, XML_PARSE_NONET);
    if (!doc_) throw std::runtime_error("XPathDoc: cannot parse");
    ctx_ = xmlXPathNewContext(doc_);
    for (const auto& n : ns)
      xmlXPathRegisterNs(ctx_, reinterpret_cast<const xmlChar*>(n.prefix), reinterpret_cast<const xmlChar*>(n.uri));
  }
  ~XPathDoc() {
    xmlXPathFreeContext(ctx_);
    xmlFreeDoc(doc_);
  }
  XPathDoc(const XPathDoc&) = delete;
  XPathDoc& operator=(const XPathDoc&) = delete;

  // Nodes selected by `expr` relative to `ctx` (the document when null).
  std::vector<xmlNode*> nodes(const std::string& expr, xmlNode* ctx = nullptr) {
    ctx_->node = ctx ? ctx : reinterpret_cast<xmlNode*>(doc_);
    xmlXPathObject* r = xmlXPathEvalExpression(reinterpret_cast<const xmlChar*>(expr.c_str()), ctx_);
    if (!r) throw std::runtime_error("bad XPath: " + expr);
    std::vector<xmlNode*> out;
    if (r->type == XPATH_NODESET && r->nodesetval)
      for (int i = 0; i < r->nodesetval->nodeNr; ++i) out.push_back(r->nodesetval->nodeTab[i]);
    xmlXPathFreeObject(r);
    return out;
  }
  // string(expr): "" when nothing is selected.
  std::string str(const std::string& expr, xmlNode* ctx = nullptr) {
    ctx_->node = ctx ? ctx : reinterpret_cast<xmlNode*>(doc_);
    xmlXPathObject* r = xmlXPathEvalExpression(reinterpret_cast<const xmlChar*>(("string(" + expr + ")").c_str()), ctx_);
    if (!r) throw std::runtime_error("bad XPath: " + expr);
    std::string s = r->stringval ? reinterpret_cast<const char*>(r->stringval) : "";
    xmlXPathFreeObject(r);
    auto b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }
  // number(expr) of the first selected node as JSON; null when nothing is selected.
  json num(const std::string& expr, xmlNode* ctx = nullptr) {
    if (nodes(expr, ctx).empty() || str(expr, ctx).empty()) return nullptr;
    return std::stod(str("(" + expr + ")[1]", ctx));
  }
  json text(const std::string& expr, xmlNode* ctx = nullptr) {
    std::string s = str(expr, ctx);
    return s.empty() ? json(nullptr) : json(s);
  }
  std::string root_name() const { return reinterpret_cast<const char*>(xmlDocGetRootElement(doc_)->name); }

 private:
  xmlDoc* doc_ = nullptr;
  xmlXPathContext* ctx_ = nullptr;
};

// Where each key field sits in one syntax (XPath 1.0). Each alternative list is tried in order and
// the first non-empty one is the source's value.
struct Spec {
  std::vector<Namespace> ns;
  std::vector<std::string> number, issue_date, currency, seller_name, buyer_name;
  std::string net, vat, gross, amount_due;      // node-set expressions, null when empty
  std::string lines, line_net, line_quantity;   // line node-set, then per-line relative expressions
  std::string allowance_total, charge_total;    // BT-107, BT-108; "" where the syntax has none (null)
};

const Spec kUbl{
    {{"cac", "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"},
     {"cbc", "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"}},
    {"/*/cbc:ID"},
    {"/*/cbc:IssueDate"},
    {"/*/cbc:DocumentCurrencyCode"},
    {"/*/cac:AccountingSupplierParty/cac:Party/cac:PartyLegalEntity/cbc:RegistrationName",
     "/*/cac:AccountingSupplierParty/cac:Party/cac:PartyName/cbc:Name"},
    {"/*/cac:AccountingCustomerParty/cac:Party/cac:PartyLegalEntity/cbc:RegistrationName",
     "/*/cac:AccountingCustomerParty/cac:Party/cac:PartyName/cbc:Name"},
    "/*/cac:LegalMonetaryTotal/cbc:TaxExclusiveAmount",
    "/*/cac:TaxTotal/cbc:TaxAmount[@currencyID = /*/cbc:DocumentCurrencyCode]",
    "/*/cac:LegalMonetaryTotal/cbc:TaxInclusiveAmount",
    "/*/cac:LegalMonetaryTotal/cbc:PayableAmount",
    "/*/cac:InvoiceLine | /*/cac:CreditNoteLine",
    "cbc:LineExtensionAmount",
    "cbc:InvoicedQuantity | cbc:CreditedQuantity",
    "/*/cac:LegalMonetaryTotal/cbc:AllowanceTotalAmount",
    "/*/cac:LegalMonetaryTotal/cbc:ChargeTotalAmount",
};

const Spec kCii{
    {{"rsm", "urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"},
     {"ram", "urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100"},
     {"udt", "urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100"}},
    {"/rsm:CrossIndustryInvoice/rsm:ExchangedDocument/ram:ID"},
    {"/rsm:CrossIndustryInvoice/rsm:ExchangedDocument/ram:IssueDateTime/udt:DateTimeString"},
    {"//ram:ApplicableHeaderTradeSettlement/ram:InvoiceCurrencyCode"},
    {"//ram:ApplicableHeaderTradeAgreement/ram:SellerTradeParty/ram:Name"},
    {"//ram:ApplicableHeaderTradeAgreement/ram:BuyerTradeParty/ram:Name"},
    "//ram:SpecifiedTradeSettlementHeaderMonetarySummation/ram:TaxBasisTotalAmount",
    "//ram:SpecifiedTradeSettlementHeaderMonetarySummation/ram:TaxTotalAmount[not(@currencyID) or "
    "@currencyID = //ram:ApplicableHeaderTradeSettlement/ram:InvoiceCurrencyCode]",
    "//ram:SpecifiedTradeSettlementHeaderMonetarySummation/ram:GrandTotalAmount",
    "//ram:SpecifiedTradeSettlementHeaderMonetarySummation/ram:DuePayableAmount",
    "/rsm:CrossIndustryInvoice/rsm:SupplyChainTradeTransaction/ram:IncludedSupplyChainTradeLineItem",
    "ram:SpecifiedLineTradeSettlement/ram:SpecifiedTradeSettlementLineMonetarySummation/ram:LineTotalAmount",
    "ram:SpecifiedLineTradeDelivery/ram:BilledQuantity",
    "//ram:SpecifiedTradeSettlementHeaderMonetarySummation/ram:AllowanceTotalAmount",
    "//ram:SpecifiedTradeSettlementHeaderMonetarySummation/ram:ChargeTotalAmount",
};

const Spec kZugferd1{
    {{"rsm", "urn:ferd:CrossIndustryDocument:invoice:1p0"},
     {"ram", "urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:12"},
     {"udt", "urn:un:unece:uncefact:data:standard:UnqualifiedDataType:15"}},
    {"/rsm:CrossIndustryDocument/rsm:HeaderExchangedDocument/ram:ID"},
    {"/rsm:CrossIndustryDocument/rsm:HeaderExchangedDocument/ram:IssueDateTime/udt:DateTimeString"},
    {"//ram:ApplicableSupplyChainTradeSettlement/ram:InvoiceCurrencyCode"},
    {"//ram:ApplicableSupplyChainTradeAgreement/ram:SellerTradeParty/ram:Name"},
    {"//ram:ApplicableSupplyChainTradeAgreement/ram:BuyerTradeParty/ram:Name"},
    "//ram:ApplicableSupplyChainTradeSettlement/ram:SpecifiedTradeSettlementMonetarySummation/ram:TaxBasisTotalAmount",
    "//ram:ApplicableSupplyChainTradeSettlement/ram:SpecifiedTradeSettlementMonetarySummation/"
    "ram:TaxTotalAmount[not(@currencyID) or @currencyID = //ram:ApplicableSupplyChainTradeSettlement/ram:InvoiceCurrencyCode]",
    "//ram:ApplicableSupplyChainTradeSettlement/ram:SpecifiedTradeSettlementMonetarySummation/ram:GrandTotalAmount",
    "//ram:ApplicableSupplyChainTradeSettlement/ram:SpecifiedTradeSettlementMonetarySummation/ram:DuePayableAmount",
    "/rsm:CrossIndustryDocument/rsm:SpecifiedSupplyChainTradeTransaction/ram:IncludedSupplyChainTradeLineItem",
    "ram:SpecifiedSupplyChainTradeSettlement/ram:SpecifiedTradeSettlementMonetarySummation/ram:LineTotalAmount",
    "ram:SpecifiedSupplyChainTradeDelivery/ram:BilledQuantity",
    "//ram:ApplicableSupplyChainTradeSettlement/ram:SpecifiedTradeSettlementMonetarySummation/ram:AllowanceTotalAmount",
    "//ram:ApplicableSupplyChainTradeSettlement/ram:SpecifiedTradeSettlementMonetarySummation/ram:ChargeTotalAmount",
};

const Spec kNav{
    {{"d", "http://schemas.nav.gov.hu/OSA/3.0/data"}, {"base", "http://schemas.nav.gov.hu/OSA/3.0/base"}},
    {"/d:InvoiceData/d:invoiceNumber"},
    {"/d:InvoiceData/d:invoiceIssueDate"},
    {"//d:invoiceHead/d:invoiceDetail/d:currencyCode"},
    {"//d:invoiceHead/d:supplierInfo/d:supplierName"},
    {"//d:invoiceHead/d:customerInfo/d:customerName"},
    "//d:invoiceSummary/d:summaryNormal/d:invoiceNetAmount",
    "//d:invoiceSummary/d:summaryNormal/d:invoiceVatAmount",
    "//d:invoiceSummary/d:summaryGrossData/d:invoiceGrossAmount",
    "//d:invoiceSummary/d:summaryGrossData/d:invoiceGrossAmount",  // no BT-115 in NAV: amount due = gross
    "//d:invoiceLines/d:line",
    "d:lineAmountsNormal/d:lineNetAmountData/d:lineNetAmount",
    "d:quantity",
    "",  // no document-level allowances or charges in InvoiceData (discounts are line-level)
    "",
};

json first_text(XPathDoc& x, const std::vector<std::string>& alternatives) {
  for (const auto& e : alternatives)
    if (auto v = x.text(e); !v.is_null()) return v;
  return nullptr;
}

std::string dashed(std::string d) {  // CII format 102 -> ISO
  if (d.size() == 8 && d.find('-') == std::string::npos) d = d.substr(0, 4) + "-" + d.substr(4, 2) + "-" + d.substr(6, 2);
  return d.substr(0, 10);
}

void expect_amount(const json& got, const json& want, const std::string& what) {
  if (want.is_null()) {
    EXPECT_TRUE(got.is_null()) << what << ": got " << got.dump() << ", source has none";
    return;
  }
  ASSERT_TRUE(got.is_number()) << what << ": got " << got.dump() << ", source has " << want.dump();
  EXPECT_NEAR(got.get<double>(), want.get<double>(), 1e-9 * std::max(1.0, std::fabs(want.get<double>()))) << what;
}

std::string violations_text(const std::vector<quarry::schemas::Violation>& vs) {
  std::string s;
  for (const auto& v : vs) s += "  " + v.pointer + " [" + v.keyword + "] " + v.message + "\n";
  return s;
}

// Maps `xml`, validates the result, and compares its key fields with the source read through `spec`.
// Returns the mapped invoice for format-specific checks.
json check_file(const std::string& xml, const std::string& name, const Spec& spec, const std::string& format,
                const quarry::schemas::Validator& validator) {
  auto r = map_xml(xml, name, ExtractOptions{});
  if (!r) {
    ADD_FAILURE() << "error: " << r.error().reason;
    return nullptr;
  }
  if (!r->has_value()) {
    ADD_FAILURE() << "not recognised as an e-invoice";
    return nullptr;
  }
  const json& inv = (*r)->invoice;
  EXPECT_EQ((*r)->format, format);
  auto vs = validator.validate(inv);
  EXPECT_TRUE(vs.empty()) << "schema violations:\n" << violations_text(vs) << inv.dump(2);

  XPathDoc x(xml, spec.ns);
  EXPECT_EQ(inv["invoice_number"], first_text(x, spec.number));
  EXPECT_EQ(inv["issue_date"], dashed(first_text(x, spec.issue_date).get<std::string>()));
  EXPECT_EQ(inv["currency"], first_text(x, spec.currency));
  EXPECT_EQ(inv["seller"]["name"], first_text(x, spec.seller_name));
  EXPECT_EQ(inv["buyer"]["name"], first_text(x, spec.buyer_name));
  expect_amount(inv["totals"]["net"], x.num(spec.net), "totals.net");
  expect_amount(inv["totals"]["vat"], x.num(spec.vat), "totals.vat");
  expect_amount(inv["totals"]["gross"], x.num(spec.gross), "totals.gross");
  expect_amount(inv["totals"]["amount_due"], x.num(spec.amount_due), "totals.amount_due");
  // BT-107 / BT-108: always written by the mappers, null where the source states none.
  for (const auto& [key, expr] : {std::pair{"allowance_total", spec.allowance_total}, {"charge_total", spec.charge_total}}) {
    EXPECT_TRUE(inv["totals"].contains(key)) << key;
    expect_amount(inv["totals"][key], expr.empty() ? json(nullptr) : x.num(expr), std::string("totals.") + key);
  }
  auto lines = x.nodes(spec.lines);  // none in BASIC WL / MINIMUM profiles
  EXPECT_EQ(inv["line_items"].size(), lines.size());
  for (std::size_t i = 0; i < lines.size() && i < inv["line_items"].size(); ++i) {
    expect_amount(inv["line_items"][i]["net_amount"], x.num(spec.line_net, lines[i]),
                  "line " + std::to_string(i + 1) + " net_amount");
    expect_amount(inv["line_items"][i]["quantity"], x.num(spec.line_quantity, lines[i]),
                  "line " + std::to_string(i + 1) + " quantity");
  }
  return inv;
}


class EInvoice : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    validator_ = cache_.get("invoice.schema.json");
  }
  static inline quarry::schemas::SchemaCache cache_;
  static inline std::shared_ptr<quarry::schemas::Validator> validator_;
};

TEST_F(EInvoice, EveryUblExampleMaps) {
  auto files = files_in(kCorpora / "en16931" / "ubl");
  ASSERT_GE(files.size(), 19u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    std::string xml = read_file(f);
    json inv = check_file(xml, f.string(), kUbl, "ubl", *validator_);
    if (inv.is_null()) continue;
    XPathDoc x(xml, kUbl.ns);
    // BT-3: a CreditNote root (or a credit note type code) is a credit note; amounts stay as stated.
    const bool credit = x.root_name() == "CreditNote" || x.str("/*/cbc:InvoiceTypeCode") == "381";
    EXPECT_EQ(inv["document_type"] == "credit_note", credit);
    // Seller VAT identifier (BT-31) as printed.
    EXPECT_EQ(inv["seller"]["vat_id"],
              x.text("/*/cac:AccountingSupplierParty/cac:Party/cac:PartyTaxScheme[cac:TaxScheme/cbc:ID='VAT']/cbc:CompanyID"));
    EXPECT_EQ(inv["vat_breakdown"].size(),
              x.nodes("/*/cac:TaxTotal[cbc:TaxAmount/@currencyID = /*/cbc:DocumentCurrencyCode]/cac:TaxSubtotal").size());
  }
}

TEST_F(EInvoice, EveryCiiExampleMaps) {
  auto files = files_in(kCorpora / "en16931" / "cii");
  ASSERT_GE(files.size(), 15u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    std::string xml = read_file(f);
    json inv = check_file(xml, f.string(), kCii, "cii", *validator_);
    if (inv.is_null()) continue;
    XPathDoc x(xml, kCii.ns);
    EXPECT_EQ(inv["seller"]["vat_id"],
              x.text("//ram:SellerTradeParty/ram:SpecifiedTaxRegistration/ram:ID[@schemeID='VA']"));
    EXPECT_EQ(inv["vat_breakdown"].size(), x.nodes("//ram:ApplicableHeaderTradeSettlement/ram:ApplicableTradeTax").size());
  }
}

// The CII embedded in ZUGFeRD / Factur-X / XRechnung PDFs, read from the PDFs with poppler-cpp.
TEST_F(EInvoice, EveryEmbeddedCiiMaps) {
  int pdfs_with_xml = 0, mapped = 0;
  for (const auto& f : files_in(kCorpora / "zugferd")) {
    if (f.extension() != ".pdf") continue;
    SCOPED_TRACE(f.filename().string());
    std::unique_ptr<poppler::document> doc(poppler::document::load_from_file(f.string()));
    ASSERT_TRUE(doc) << "poppler cannot open it";
    bool any = false;
    for (poppler::embedded_file* ef : doc->embedded_files()) {
      // Recognised by content: poppler-cpp gives some names raw (UTF-16BE with a BOM, as in
      // zugferd_invoice.pdf), so the ".xml" suffix cannot be relied on.
      auto data = ef->data();
      std::string xml(data.begin(), data.end());
      auto start = xml.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
      if (start == std::string::npos || xml[start] != '<') continue;
      SCOPED_TRACE("attachment " + std::to_string(pdfs_with_xml));
      const std::string name = "attachment.xml";
      XPathDoc probe(xml, {});
      const Spec& spec = probe.root_name() == "CrossIndustryDocument" ? kZugferd1 : kCii;
      if (!check_file(xml, f.string() + ":" + name, spec, "cii", *validator_).is_null()) ++mapped;
      any = true;
    }
    pdfs_with_xml += any;
  }
  EXPECT_GE(pdfs_with_xml, 11);
  EXPECT_GE(mapped, 12);  // validV2PDF.pdf carries both a ZUGFeRD 1.0 and a 2.x XML
}

TEST_F(EInvoice, EveryNavInvoiceDataMaps) {
  auto files = files_in(kCorpora / "nav" / "xml");
  ASSERT_GE(files.size(), 10u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    std::string xml = read_file(f);
    json inv = check_file(xml, f.string(), kNav, "nav", *validator_);
    if (inv.is_null()) continue;
    XPathDoc x(xml, kNav.ns);
    // Structured tax number printed as taxpayerId-vatCode-countyCode.
    const std::string tn = "//d:supplierInfo/d:supplierTaxNumber/base:";
    EXPECT_EQ(inv["seller"]["tax_id"],
              x.str(tn + "taxpayerId") + "-" + x.str(tn + "vatCode") + "-" + x.str(tn + "countyCode"));
    EXPECT_EQ(inv["seller"]["address"]["postal_code"],
              x.text("//d:supplierInfo/d:supplierAddress/*/base:postalCode"));
    EXPECT_EQ(inv["seller"]["address"]["city"], x.text("//d:supplierInfo/d:supplierAddress/*/base:city"));
    EXPECT_EQ(inv["payment"]["account_number"], x.text("//d:supplierInfo/d:supplierBankAccountNumber"));
    EXPECT_EQ(inv["due_date"], x.text("//d:invoiceDetail/d:paymentDate"));
    EXPECT_EQ(inv["payment"]["due_date"], inv["due_date"]);
    EXPECT_EQ(inv["delivery_date"], x.text("//d:invoiceDetail/d:invoiceDeliveryDate"));
    // A modifying document refers to the invoice it modifies.
    const bool modifies = !x.nodes("//d:invoiceMain/d:invoice/d:invoiceReference").empty();
    EXPECT_EQ(inv["document_type"] == "corrected_invoice", modifies);
    EXPECT_EQ(inv["preceding_invoice"], x.text("//d:invoiceReference/d:originalInvoiceNumber"));
    // Line VAT: the rate is NAV's fraction as a percent, the amount as stated.
    auto lines = x.nodes(kNav.lines);
    for (std::size_t i = 0; i < lines.size() && i < inv["line_items"].size(); ++i) {
      const json& li = inv["line_items"][i];
      expect_amount(li["vat_amount"], x.num("d:lineAmountsNormal/d:lineVatData/d:lineVatAmount", lines[i]),
                    "line vat_amount");
      json frac = x.num("d:lineAmountsNormal/d:lineVatRate/d:vatPercentage", lines[i]);
      expect_amount(li["vat_rate"], frac.is_null() ? json(nullptr) : json(frac.get<double>() * 100), "line vat_rate");
      EXPECT_EQ(li["description"], x.text("d:lineDescription", lines[i]));
    }
    EXPECT_EQ(inv["vat_breakdown"].size(), x.nodes("//d:summaryNormal/d:summaryByVatRate").size());
  }
}

// --- what is not an e-invoice, and what must be refused ----------------------------------------------

std::string ubl_example() { return read_file(kCorpora / "en16931" / "ubl" / "ubl-tc434-example1.xml"); }

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  auto at = s.find(from);
  if (at == std::string::npos) throw std::runtime_error("replace_once: '" + from + "' not found");
  return s.replace(at, from.size(), to);
}

TEST(EInvoiceDetect, OtherXmlIsNotAnEInvoice) {
  const ExtractOptions opts;
  for (const char* xml : {
           "<html><body>Invoice</body></html>",
           "<Invoice><ID>1</ID></Invoice>",  // right name, no UBL namespace
           "<p:FatturaElettronica versione=\"FPR12\" "
           "xmlns:p=\"http://ivaservizi.agenziaentrate.gov.it/docs/xsd/fatture/v1.2\"><FatturaElettronicaHeader/>"
           "</p:FatturaElettronica>",
           "<InvoiceData xmlns=\"http://schemas.nav.gov.hu/OSA/2.0/data\"><invoiceNumber>1</invoiceNumber></InvoiceData>",
       }) {
    SCOPED_TRACE(xml);
    auto r = map_xml(xml, "other.xml", opts);
    ASSERT_TRUE(r) << r.error().reason;
    EXPECT_FALSE(r->has_value());
  }
  for (std::string bytes : {std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16), std::string("Invoice 2024/17"),
                            std::string(), std::string(" \n\t")}) {
    auto r = map_xml(bytes, "attachment.bin", opts);
    ASSERT_TRUE(r) << r.error().reason;
    EXPECT_FALSE(r->has_value());
  }
  ExtractOptions off;
  off.map_einvoices = false;
  auto r = map_xml(ubl_example(), "ubl.xml", off);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_value());
}

TEST(EInvoiceDetect, HostileXmlIsRefused) {
  const ExtractOptions opts;
  const std::string laughs =
      "<?xml version=\"1.0\"?><!DOCTYPE Invoice [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;\">"
      "<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;\">]>"
      "<Invoice xmlns=\"urn:oasis:names:specification:ubl:schema:xsd:Invoice-2\"><ID>&c;</ID></Invoice>";
  const std::string xxe =
      "<?xml version=\"1.0\"?><!DOCTYPE Invoice [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>"
      "<Invoice xmlns=\"urn:oasis:names:specification:ubl:schema:xsd:Invoice-2\"><ID>&x;</ID></Invoice>";
  std::string deep = "<Invoice xmlns=\"urn:oasis:names:specification:ubl:schema:xsd:Invoice-2\">";
  for (int i = 0; i < 10000; ++i) deep += "<n>";
  for (int i = 0; i < 10000; ++i) deep += "</n>";
  deep += "</Invoice>";
  struct Case {
    std::string name, xml, reason_has;
  };
  for (const Case& c : {Case{"billion laughs", laughs, "entities"}, Case{"external entity", xxe, "entities"},
                        Case{"deep nesting", deep, "nesting"},
                        Case{"truncated", ubl_example().substr(0, 3000), "malformed"}}) {
    SCOPED_TRACE(c.name);
    auto r = map_xml(c.xml, "hostile.xml", opts);
    ASSERT_FALSE(r) << "accepted";
    EXPECT_EQ(r.error().file, "hostile.xml");
    EXPECT_NE(r.error().reason.find(c.reason_has), std::string::npos) << r.error().reason;
  }
  ExtractOptions small;
  small.max_file_bytes = 1000;
  auto r = map_xml(ubl_example(), "big.xml", small);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("larger"), std::string::npos) << r.error().reason;
}

// A document of a known format that cannot be mapped gives an error naming the element.
TEST(EInvoiceDetect, BrokenValuesAreErrorsNamingTheElement) {
  const ExtractOptions opts;
  const std::string ubl = ubl_example();
  XPathDoc x(ubl, kUbl.ns);
  const std::string date = x.str("/*/cbc:IssueDate"), gross = x.str("/*/cac:LegalMonetaryTotal/cbc:TaxInclusiveAmount");
  const std::string id = x.str("/*/cbc:ID");
  struct Case {
    std::string name, xml, reason_has;
  };
  for (const Case& c : {
           Case{"impossible date", replace_once(ubl, ">" + date + "<", ">2017-02-30<"), "IssueDate"},
           Case{"comma decimal", replace_once(ubl, ">" + gross + "<", ">1.234,50<"), "TaxInclusiveAmount"},
           Case{"no invoice number", replace_once(ubl, "<cbc:ID>" + id + "</cbc:ID>", ""), "BT-1"},
       }) {
    SCOPED_TRACE(c.name);
    auto r = map_xml(c.xml, "broken.xml", opts);
    ASSERT_FALSE(r) << "mapped: " << (r && r->has_value() ? (*r)->invoice.dump() : "nullopt");
    EXPECT_NE(r.error().reason.find(c.reason_has), std::string::npos) << r.error().reason;
    EXPECT_NE(r.error().reason.find("UBL"), std::string::npos) << r.error().reason;
  }
  const std::string nav = read_file(kCorpora / "nav" / "xml" / "Belfoldi termekertekesites.xml");
  const std::string batch = replace_once(replace_once(nav, "<invoice>", "<batchInvoice><batchIndex>1</batchIndex><invoice>"),
                                         "</invoice>", "</invoice></batchInvoice>");
  auto r = map_xml(batch, "batch.xml", opts);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("batchInvoice"), std::string::npos) << r.error().reason;
}

}  // namespace

// Damaged copies of real documents (truncations, byte flips; fixed seed) never crash or throw: each
// gives an error, nullopt, or a mapping. Run under the sanitizer build this also checks memory safety.
TEST(EInvoiceDetect, DamagedDocumentsNeverCrash) {
  const ExtractOptions opts;
  std::uint64_t state = 0x9E3779B97F4A7C15ull;  // splitmix64
  auto next = [&state] {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  int outcomes[3] = {0, 0, 0};  // error, nullopt, mapped
  for (const fs::path& f : {kCorpora / "en16931" / "ubl" / "ubl-tc434-example1.xml",
                            kCorpora / "en16931" / "cii" / "CII_example1.xml",
                            kCorpora / "nav" / "xml" / "Belfoldi termekertekesites.xml"}) {
    const std::string good = read_file(f);
    for (int i = 0; i < 150; ++i) {
      std::string bad = good;
      if (i % 3 == 0) {
        bad.resize(next() % bad.size());
      } else {
        for (int k = 0; k < 1 + i % 5; ++k) bad[next() % bad.size()] = static_cast<char>(next() & 0xFF);
      }
      EXPECT_NO_THROW({
        auto r = map_xml(bad, "damaged.xml", opts);
        ++outcomes[!r ? 0 : !r->has_value() ? 1 : 2];
      });
    }
  }
  EXPECT_GT(outcomes[0], 0);  // most damage is caught by the parser
  EXPECT_GT(outcomes[2], 0);  // a flip inside a description still maps
}

// NAV InvoiceData variants the XSD allows but the ten official samples do not use: a simple address,
// a community VAT number, cash payment, and a simplified (gross-based) invoice.
TEST_F(EInvoice, NavVariantsBeyondTheSamples) {
  const ExtractOptions opts;
  std::string nav = read_file(kCorpora / "nav" / "xml" / "Belfoldi termekertekesites.xml");
  const auto from = nav.find("<supplierAddress>"), to = nav.find("</supplierAddress>");
  ASSERT_NE(from, std::string::npos);
  nav.replace(from, to - from,
              "<supplierAddress><base:simpleAddress><base:countryCode>HU</base:countryCode>"
              "<base:postalCode>9021</base:postalCode><base:city>Győr</base:city>"
              "<base:additionalAddressDetail>Baross Gábor út 5. II/3</base:additionalAddressDetail>"
              "</base:simpleAddress>");
  nav = replace_once(nav, "<supplierName>", "<communityVatNumber>HU99999999</communityVatNumber><supplierName>");
  nav = replace_once(nav, "<paymentDate>", "<paymentMethod>CASH</paymentMethod><paymentDate>");
  auto r = map_xml(nav, "variant.xml", opts);
  ASSERT_TRUE(r && r->has_value()) << (r ? "nullopt" : r.error().reason);
  const json& inv = (*r)->invoice;
  EXPECT_TRUE(validator_->validate(inv).empty()) << violations_text(validator_->validate(inv));
  EXPECT_EQ(inv["seller"]["address"],
            (json{{"street", "Baross Gábor út 5. II/3"}, {"city", "Győr"}, {"postal_code", "9021"}, {"country", "HU"}}));
  EXPECT_EQ(inv["seller"]["vat_id"], "HU99999999");
  EXPECT_EQ(inv["payment"]["means"], "cash");

  // Simplified invoice: gross amounts with a VAT content share, no net amounts and no rates.
  const std::string simplified = R"(<?xml version="1.0" encoding="UTF-8"?>
<InvoiceData xmlns="http://schemas.nav.gov.hu/OSA/3.0/data" xmlns:base="http://schemas.nav.gov.hu/OSA/3.0/base">
 <invoiceNumber>E-2024/17</invoiceNumber><invoiceIssueDate>2024-03-01</invoiceIssueDate>
 <completenessIndicator>false</completenessIndicator>
 <invoiceMain><invoice>
  <invoiceHead>
   <supplierInfo>
    <supplierTaxNumber><base:taxpayerId>12345676</base:taxpayerId><base:vatCode>2</base:vatCode><base:countyCode>13</base:countyCode></supplierTaxNumber>
    <supplierName>Kis Bolt Bt.</supplierName>
    <supplierAddress><base:simpleAddress><base:countryCode>HU</base:countryCode><base:postalCode>2000</base:postalCode><base:city>Szentendre</base:city><base:additionalAddressDetail>Fő tér 1.</base:additionalAddressDetail></base:simpleAddress></supplierAddress>
   </supplierInfo>
   <customerInfo><customerVatStatus>PRIVATE_PERSON</customerVatStatus></customerInfo>
   <invoiceDetail><invoiceCategory>SIMPLIFIED</invoiceCategory><invoiceDeliveryDate>2024-03-01</invoiceDeliveryDate>
    <currencyCode>HUF</currencyCode><exchangeRate>1</exchangeRate><paymentMethod>CARD</paymentMethod><invoiceAppearance>PAPER</invoiceAppearance></invoiceDetail>
  </invoiceHead>
  <invoiceLines><mergedItemIndicator>false</mergedItemIndicator>
   <line><lineNumber>1</lineNumber><lineExpressionIndicator>true</lineExpressionIndicator><lineDescription>Kávé</lineDescription>
    <quantity>2</quantity><unitOfMeasure>PIECE</unitOfMeasure><unitPrice>635</unitPrice>
    <lineAmountsSimplified><lineVatRate><vatContent>0.2126</vatContent></lineVatRate><lineGrossAmountSimplified>1270</lineGrossAmountSimplified></lineAmountsSimplified></line>
   <line><lineNumber>2</lineNumber><lineExpressionIndicator>true</lineExpressionIndicator><lineDescription>Kifli</lineDescription>
    <quantity>4</quantity><unitOfMeasure>PIECE</unitOfMeasure><unitPrice>60</unitPrice>
    <lineAmountsSimplified><lineVatRate><vatContent>0.0476</vatContent></lineVatRate><lineGrossAmountSimplified>240</lineGrossAmountSimplified></lineAmountsSimplified></line>
  </invoiceLines>
  <invoiceSummary>
   <summarySimplified><vatRate><vatContent>0.2126</vatContent></vatRate><vatContentGrossAmount>1270</vatContentGrossAmount></summarySimplified>
   <summarySimplified><vatRate><vatContent>0.0476</vatContent></vatRate><vatContentGrossAmount>240</vatContentGrossAmount></summarySimplified>
  </invoiceSummary>
 </invoice></invoiceMain>
</InvoiceData>)";
  r = map_xml(simplified, "simplified.xml", opts);
  ASSERT_TRUE(r && r->has_value()) << (r ? "nullopt" : r.error().reason);
  const json& s = (*r)->invoice;
  EXPECT_TRUE(validator_->validate(s).empty()) << violations_text(validator_->validate(s));
  EXPECT_EQ(s["totals"], (json{{"net", nullptr}, {"vat", nullptr}, {"gross", 1510.0}, {"amount_due", 1510.0},
                               {"allowance_total", nullptr}, {"charge_total", nullptr}}));
  EXPECT_EQ(s["buyer"]["name"], nullptr);
  EXPECT_EQ(s["seller"]["tax_id"], "12345676-2-13");
  EXPECT_EQ(s["payment"]["means"], "card");
  ASSERT_EQ(s["line_items"].size(), 2u);
  EXPECT_EQ(s["line_items"][1]["description"], "Kifli");
  EXPECT_EQ(s["line_items"][1]["unit"], "PIECE");
  EXPECT_EQ(s["line_items"][1]["vat_rate"], nullptr);
  EXPECT_EQ(s["vat_breakdown"], json::array());
}
