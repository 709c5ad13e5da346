// `quarry run --prefer model --cross-check` end to end, with the bundled model: two PDFs made here,
// each showing the same invoice (the text of samples/invoices/en-txt-1.txt) and carrying a CII
// e-invoice XML made here too; the XML of one agrees with the visible text, the XML of the other says
// another grand total. The records must list exactly that field (rule:cross_check) and the report
// must count it. The XML holds only the fields the bundled model reads right from this text (the
// header, parties, totals and the IBAN), so that every other difference would be the feature's.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "tests/extractors/pdf_gen.hpp"
#include "tests/run/run_support.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace quarry::test_run;
namespace pg = quarry::test::pdfgen;

const fs::path k_samples = fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices";

/// A CII (D16B) invoice of the sample's header fields, with `gross` as its grand total. The IBAN is
/// written with spaces, as printed invoices do (the comparison ignores white space).
std::string cii_xml(const std::string& gross) {
  return R"(<?xml version="1.0" encoding="UTF-8"?>
<rsm:CrossIndustryInvoice xmlns:rsm="urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"
    xmlns:ram="urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100"
    xmlns:udt="urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100">
 <rsm:ExchangedDocument>
  <ram:ID>INV-07133</ram:ID><ram:TypeCode>380</ram:TypeCode>
  <ram:IssueDateTime><udt:DateTimeString format="102">20200905</udt:DateTimeString></ram:IssueDateTime>
 </rsm:ExchangedDocument>
 <rsm:SupplyChainTradeTransaction>
  <ram:ApplicableHeaderTradeAgreement>
   <ram:SellerTradeParty><ram:Name>Kestrel Print Limited</ram:Name>
    <ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">GB676100840</ram:ID></ram:SpecifiedTaxRegistration>
   </ram:SellerTradeParty>
   <ram:BuyerTradeParty><ram:Name>Harbour Analytics Ltd</ram:Name>
    <ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">GB234852655</ram:ID></ram:SpecifiedTaxRegistration>
   </ram:BuyerTradeParty>
  </ram:ApplicableHeaderTradeAgreement>
  <ram:ApplicableHeaderTradeDelivery/>
  <ram:ApplicableHeaderTradeSettlement>
   <ram:InvoiceCurrencyCode>GBP</ram:InvoiceCurrencyCode>
   <ram:SpecifiedTradeSettlementPaymentMeans>
    <ram:PayeePartyCreditorFinancialAccount><ram:IBANID>GB92 PTUO 2768 8989 4465 10</ram:IBANID></ram:PayeePartyCreditorFinancialAccount>
   </ram:SpecifiedTradeSettlementPaymentMeans>
   <ram:SpecifiedTradeSettlementHeaderMonetarySummation>
    <ram:TaxBasisTotalAmount>98.85</ram:TaxBasisTotalAmount>
    <ram:TaxTotalAmount currencyID="GBP">19.77</ram:TaxTotalAmount>
    <ram:GrandTotalAmount>)" +
         gross + R"(</ram:GrandTotalAmount>
   </ram:SpecifiedTradeSettlementHeaderMonetarySummation>
  </ram:ApplicableHeaderTradeSettlement>
 </rsm:SupplyChainTradeTransaction>
</rsm:CrossIndustryInvoice>
)";
}

/// `s` as the body of a PDF literal string.
std::string pdf_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '(' || c == ')' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

/// A one-page PDF showing `lines` (Helvetica 10 pt, one line each) with `xml` embedded as
/// factur-x.xml (EmbeddedFiles name tree and the catalog's /AF, as Factur-X writers do).
std::string pdf_with_xml(const std::vector<std::string>& lines, const std::string& xml) {
  pg::Doc d;
  std::string content = "BT /F1 10 Tf 12 TL 50 770 Td\n";
  for (const auto& l : lines) content += "(" + pdf_escape(l) + ") Tj T*\n";
  content += "ET\n";
  const int c = d.b.add_stream("/Filter /FlateDecode", pg::deflate(content));
  const int ef = d.b.add_stream("/Type /EmbeddedFile /Subtype /text#2Fxml /Filter /FlateDecode", pg::deflate(xml));
  const int spec = d.b.add("<< /Type /Filespec /F (factur-x.xml) /UF (factur-x.xml) /EF << /F " + pg::Builder::ref(ef) +
                           " >> /AFRelationship /Data >>");
  d.catalog_extra = "/Names << /EmbeddedFiles << /Names [(factur-x.xml) " + pg::Builder::ref(spec) + "] >> >> /AF [" +
                    pg::Builder::ref(spec) + "]";
  d.page(c);
  return d.finish();
}

std::vector<std::string> sample_lines() {
  std::ifstream in(k_samples / "en-txt-1.txt");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::vector<std::string> run_args(const fs::path& in, const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> a = {"run", in.string(), "-o", out.string(), "--progress", "none", "--threads", "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::map<std::string, json> records_by_name(const fs::path& out) {
  std::map<std::string, json> m;
  for (auto& r : read_records(out / "results.jsonl")) m[fs::path(r["source"].get<std::string>()).filename().string()] = r;
  return m;
}

TEST(RunCrossCheck, ListsExactlyTheDisagreeingFieldAndTheReportCountsIt) {
  Scratch s("crosscheck");
  const auto lines = sample_lines();
  ASSERT_GT(lines.size(), 20u);
  fs::create_directories(s.dir / "in");
  std::ofstream(s.dir / "in" / "agrees.pdf", std::ios::binary) << pdf_with_xml(lines, cii_xml("118.62"));
  std::ofstream(s.dir / "in" / "disagrees.pdf", std::ios::binary) << pdf_with_xml(lines, cii_xml("181.62"));

  // Without --prefer model the XML alone is read: both are mapped, so the XML is found in both.
  const auto mapped_out = s.dir / "mapped";
  // (the second is invalid: its grand total is not net + VAT, rule:gross)
  const int rc0 = run_quarry_args(run_args(s.dir / "in", mapped_out, {}), s.dir / "log0");
  EXPECT_TRUE(rc0 == 0 || rc0 == 2) << read_file(s.dir / "log0");
  for (const auto& [name, r] : records_by_name(mapped_out)) {
    EXPECT_EQ(r["method"], "einvoice-cii") << name;
    EXPECT_FALSE(r.contains("cross_check")) << name;
  }

  const auto out = s.dir / "out";
  const int rc = run_quarry_args(run_args(s.dir / "in", out, {"--prefer", "model", "--cross-check", "--retries", "0"}),
                                 s.dir / "log");
  ASSERT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  const auto recs = records_by_name(out);
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& [name, r] : recs) {
    EXPECT_EQ(r["method"], "model") << name;
    ASSERT_TRUE(r.contains("cross_check")) << r.dump();
    const auto& c = r["cross_check"];
    EXPECT_EQ(c["against"], "einvoice-cii") << name;
    EXPECT_FALSE(c.contains("skipped")) << c.dump();
    // What the XML states: document type, invoice number, issue date, currency, two names, two VAT
    // ids, net, VAT, gross, IBAN.
    EXPECT_EQ(c["fields_compared"].get<int>(), 12) << c.dump();
    EXPECT_EQ(c["fields_compared"].get<int>(), c["fields_agreeing"].get<int>() + c["fields_disagreeing"].get<int>());
    EXPECT_EQ(c["xml"]["invoice_number"], "INV-07133");
    EXPECT_EQ(c["xml"]["payment"]["iban"], "GB92PTUO27688989446510");
    // The model's value stays in data.
    EXPECT_EQ(r["data"]["totals"]["gross"], 118.62) << name << ": " << r["data"].dump();
    // Warnings are not errors: the status is the validators'.
    for (const auto& w : r["warnings"]) EXPECT_EQ(w["rule"], "rule:cross_check");
  }
  const auto& agrees = recs.at("agrees.pdf");
  EXPECT_TRUE(agrees["warnings"].empty()) << agrees["warnings"].dump(1);
  EXPECT_EQ(agrees["cross_check"]["fields_disagreeing"], 0);

  const auto& disagrees = recs.at("disagrees.pdf");
  ASSERT_EQ(disagrees["warnings"].size(), 1u) << disagrees["warnings"].dump(1);
  const auto& w = disagrees["warnings"][0];
  EXPECT_EQ(w["pointer"], "/totals/gross");
  EXPECT_EQ(w["model"], 118.62);
  EXPECT_EQ(w["xml"], 181.62);
  EXPECT_NE(w["message"].get<std::string>().find("181.62"), std::string::npos) << w.dump();
  EXPECT_NE(w["message"].get<std::string>().find("118.62"), std::string::npos) << w.dump();
  EXPECT_EQ(disagrees["cross_check"]["fields_disagreeing"], 1);
  EXPECT_EQ(disagrees["cross_check"]["xml"]["totals"]["gross"], 181.62);
  EXPECT_EQ(disagrees["cross_check"]["by_field"]["/totals/gross"]["disagree"], 1);
  // Both read the same page, so the model agrees with itself on everything else.
  EXPECT_EQ(disagrees["cross_check"]["fields_agreeing"].get<int>() + 1,
            agrees["cross_check"]["fields_agreeing"].get<int>());

  const auto report = json::parse(read_file(out / "report.json"));
  ASSERT_TRUE(report.contains("cross_check")) << report.dump(1);
  const auto& rc_ = report["cross_check"];
  EXPECT_EQ(rc_["documents"], 2);
  EXPECT_EQ(rc_["documents_compared"], 2);
  EXPECT_EQ(rc_["documents_disagreeing"], 1);
  EXPECT_EQ(rc_["fields_disagreeing"], 1);
  EXPECT_EQ(rc_["fields_compared"], agrees["cross_check"]["fields_compared"].get<int>() +
                                        disagrees["cross_check"]["fields_compared"].get<int>());
  EXPECT_EQ(rc_["by_field"]["/totals/gross"]["compared"], 2);
  EXPECT_EQ(rc_["by_field"]["/totals/gross"]["disagree"], 1);
  EXPECT_EQ(rc_["by_field"]["/invoice_number"]["agree"], 2);
  EXPECT_EQ(report["job"]["cross_check"], true);
  const auto md = read_file(out / "report.md");
  EXPECT_NE(md.find("Cross-check"), std::string::npos);
  EXPECT_NE(md.find("| `/totals/gross` | 2 | 1 | 1 |"), std::string::npos) << md;

  // A user's own schema: the e-invoice mapping (invoice schema) is not comparable, nothing is compared.
  std::ofstream(s.dir / "own.schema.json")
      << R"({"type": "object", "properties": {"invoice_number": {"type": "string"}}, "required": ["invoice_number"]})";
  const auto own = s.dir / "own";
  const int rc2 = run_quarry_args(run_args(s.dir / "in", own, {"--prefer", "model", "--cross-check", "--retries", "0",
                                                               "--schema", (s.dir / "own.schema.json").string()}),
                                  s.dir / "log2");
  ASSERT_TRUE(rc2 == 0 || rc2 == 2) << read_file(s.dir / "log2");
  for (const auto& [name, r] : records_by_name(own)) {
    EXPECT_EQ(r["method"], "model") << name;
    EXPECT_FALSE(r.contains("cross_check")) << r.dump();
  }
  EXPECT_FALSE(json::parse(read_file(own / "report.json")).contains("cross_check"));
}

TEST(RunCrossCheck, NeedsPreferModelAndTaskKie) {
  Scratch s("crosscheck_opts");
  const auto in = k_samples / "en-xml-1.xml";
  EXPECT_EQ(run_quarry_args(run_args(in, s.dir / "o1", {"--cross-check"}), s.dir / "log1"), 1);
  EXPECT_NE(read_file(s.dir / "log1").find("--prefer model"), std::string::npos) << read_file(s.dir / "log1");
  std::ofstream(s.dir / "q.txt") << "What is the total?\n";
  EXPECT_EQ(run_quarry_args(run_args(in, s.dir / "o2", {"--cross-check", "--prefer", "model", "--task", "rag",
                                                        "--questions", (s.dir / "q.txt").string()}),
                            s.dir / "log2"),
            1);
  EXPECT_NE(read_file(s.dir / "log2").find("task kie"), std::string::npos) << read_file(s.dir / "log2");
  EXPECT_FALSE(fs::exists(s.dir / "o1" / "results.jsonl"));
}

}  // namespace
