// ZUGFeRD / Factur-X / XRechnung PDFs carry the invoice as an embedded CII XML file: it must come out
// as an attachment, be that XML (its root is the CII root), and the invoice number written in it must
// appear in the visible text of the PDF. The "blanko" sample has no embedded file.
#include <gtest/gtest.h>

#include <cctype>

#include "extractors/extract.hpp"
#include "tests/extractors/corpus.hpp"

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

TEST(Zugferd, EmbeddedInvoiceXmlIsFound) {
  std::size_t with_xml = 0;
  for (const auto& pdf : quarry::test::files_in(quarry::test::corpora() / "zugferd")) {
    SCOPED_TRACE(pdf.string());
    auto doc = quarry::extract_file(pdf);
    ASSERT_TRUE(doc) << doc.error().reason;
    EXPECT_EQ(doc->media_type, "application/pdf");
    if (pdf.filename().string().find("blanko") != std::string::npos) {
      EXPECT_TRUE(doc->attachments.empty());
      continue;
    }
    // The standard names; poppler-cpp cannot read UTF-16 names, for which the extractor makes up
    // "attachment-N.xml" and says so in a warning.
    const quarry::Attachment* xml = nullptr;
    for (const auto& a : doc->attachments) {
      const std::string n = lower(a.name);
      if (n == "factur-x.xml" || n == "zugferd-invoice.xml" || n == "xrechnung.xml") xml = &a;
      if (n.rfind("attachment-", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".xml") {
        ASSERT_EQ(doc->warnings.size(), 1u);
        EXPECT_NE(doc->warnings[0].find(a.name), std::string::npos);
        xml = &a;
      }
    }
    ASSERT_NE(xml, nullptr) << "no invoice XML among " << doc->attachments.size() << " attachments";
    EXPECT_TRUE(xml->media_type == "text/xml" || xml->media_type == "application/xml") << xml->media_type;
    auto parsed = quarry::test::read_xml(xml->bytes);
    ASSERT_NE(parsed.root(), nullptr) << "attachment is not well-formed XML";
    const std::string root = quarry::test::local(parsed.root());
    EXPECT_TRUE(root == "CrossIndustryInvoice" || root == "CrossIndustryDocument") << root;
    // The e-invoice hook maps the embedded CII (the mapper is tested in tests/einvoice).
    EXPECT_TRUE(doc->einvoice.has_value());
    EXPECT_EQ(doc->einvoice_format, "cii");
    ++with_xml;
  }
  EXPECT_EQ(with_xml, 11u);
}

TEST(Zugferd, EinvoiceMappingCanBeTurnedOff) {
  quarry::ExtractOptions opts;
  opts.map_einvoices = false;
  auto doc = quarry::extract_file(quarry::test::corpora() / "zugferd" / "EN16931_Einfach.pdf", opts);
  ASSERT_TRUE(doc) << doc.error().reason;
  EXPECT_FALSE(doc->einvoice.has_value());
  EXPECT_EQ(doc->attachments.size(), 1u);
}

TEST(Einvoice, XmlFilesAreMappedByTheirSyntax) {
  const auto c = quarry::test::corpora();
  const std::vector<std::pair<std::filesystem::path, std::string>> cases = {
      {c / "nav" / "xml", "nav"}, {c / "en16931" / "cii", "cii"}, {c / "en16931" / "ubl", "ubl"}};
  for (const auto& [dir, format] : cases) {
    for (const auto& xml : quarry::test::files_in(dir)) {
      SCOPED_TRACE(xml.string());
      auto doc = quarry::extract_file(xml);
      ASSERT_TRUE(doc) << doc.error().reason;
      EXPECT_EQ(doc->media_type, "application/xml");
      EXPECT_TRUE(doc->einvoice.has_value());
      EXPECT_EQ(doc->einvoice_format, format);
    }
  }
}

TEST(Zugferd, InvoiceNumberOfTheXmlIsInTheText) {
  for (const auto& pdf : quarry::test::files_in(quarry::test::corpora() / "zugferd")) {
    SCOPED_TRACE(pdf.string());
    // This sample pairs a PDF printing RE-20200620/508 with the XML of RE-20190610/507 (checked by
    // hand with pdftotext and pdfdetach): the sample itself disagrees, not the extractor.
    if (pdf.filename() == "validXRechnung.pdf") continue;
    auto doc = quarry::extract_file(pdf);
    ASSERT_TRUE(doc) << doc.error().reason;
    for (const auto& a : doc->attachments) {
      auto parsed = quarry::test::read_xml(a.bytes);
      if (!parsed.root()) continue;
      // CII: rsm:ExchangedDocument/ram:ID (ZUGFeRD 1: rsm:HeaderExchangedDocument/ram:ID).
      std::string id;
      for (xmlNode* c = parsed.root()->children; c && id.empty(); c = c->next)
        if (quarry::test::local(c) == "ExchangedDocument" || quarry::test::local(c) == "HeaderExchangedDocument")
          id = quarry::test::first_text(c, "ID");
      ASSERT_FALSE(id.empty());
      EXPECT_NE(doc->text().find(id), std::string::npos) << "invoice number " << id;
    }
  }
}

}  // namespace
