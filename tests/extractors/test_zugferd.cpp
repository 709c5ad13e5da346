// ZUGFeRD / Factur-X / XRechnung PDFs carry the invoice as an embedded CII XML file: it must come out
// as an attachment, be that XML (its root is the CII root), and the invoice number written in it must
// appear in the visible text of the PDF. The "blanko" sample has no embedded file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <fstream>

#include "extractors/extract.hpp"
#include "tests/common/run_command.hpp"
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
    // The standard names (UTF-16 ones included) and no warning.
    const quarry::Attachment* xml = nullptr;
    for (const auto& a : doc->attachments) {
      const std::string n = lower(a.name);
      if (n == "factur-x.xml" || n == "zugferd-invoice.xml" || n == "xrechnung.xml") xml = &a;
    }
    EXPECT_TRUE(doc->warnings.empty());
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

namespace {

// What poppler's own pdfdetach lists and saves is the reference: every file it finds in every ZUGFeRD
// PDF of the corpora (both folders) must be among the attachments, with the same bytes, and the
// invoice XML among them must be mapped.
TEST(Zugferd, EveryFilePdfdetachListsIsFound) {
  if (std::system("command -v pdfdetach >/dev/null 2>&1") != 0) GTEST_SKIP() << "pdfdetach (poppler-utils) not installed";
  std::vector<std::filesystem::path> pdfs = quarry::test::files_in(quarry::test::corpora() / "zugferd");
  for (const auto& f : quarry::test::files_in(quarry::test::corpora() / "zugferd-corpus")) pdfs.push_back(f);
  ASSERT_EQ(pdfs.size(), 15u);
  const auto tmp = std::filesystem::temp_directory_path() / ("quarry-detach-" + std::to_string(::getpid()));
  std::size_t files = 0;
  for (const auto& pdf : pdfs) {
    SCOPED_TRACE(pdf.string());
    std::filesystem::remove_all(tmp);
    std::filesystem::create_directories(tmp);
    const auto listed = quarry::test_support::run_command("pdfdetach -list '" + pdf.string() + "' 2>/dev/null");
    ASSERT_EQ(listed.code, 0);
    ASSERT_EQ(quarry::test_support::run_command("pdfdetach -saveall -o '" + tmp.string() + "' '" + pdf.string() + "' 2>/dev/null").code, 0);
    auto doc = quarry::extract_file(pdf);
    ASSERT_TRUE(doc) << doc.error().reason;
    std::size_t n = 0;
    bool xml = false;
    for (const auto& saved : quarry::test::files_in(tmp)) {
      const std::string name = saved.filename().string();
      EXPECT_NE(listed.out.find(name), std::string::npos) << name;
      std::ifstream in(saved, std::ios::binary);
      const std::string bytes{std::istreambuf_iterator<char>(in), {}};
      const quarry::Attachment* found = nullptr;
      for (const auto& a : doc->attachments)
        if (a.name == name) found = &a;
      ASSERT_NE(found, nullptr) << name << " is not among " << doc->attachments.size() << " attachments";
      EXPECT_EQ(found->bytes, bytes) << name;
      xml = xml || lower(name).ends_with(".xml");
      ++n;
    }
    EXPECT_EQ(doc->attachments.size(), n);
    if (xml) {
      EXPECT_TRUE(doc->einvoice.has_value());
      EXPECT_EQ(doc->einvoice_format, "cii");
    }
    files += n;
  }
  std::filesystem::remove_all(tmp);
  EXPECT_EQ(files, 15u);  // 13 PDFs with one file, one with two, the "blanko" sample with none
}

}  // namespace
