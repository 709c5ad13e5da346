// NAV Online Számla sample invoices rendered by NAV's official XSLT to PDF and HTML (hu, en, de):
// the extracted text must carry the invoice number, seller and buyer names and the totals of the
// InvoiceData XML of the same name, which is the ground truth (read here with libxml2 directly).
#include <gtest/gtest.h>

#include "extractors/extract.hpp"
#include "tests/extractors/corpus.hpp"

namespace {

using quarry::test::corpora;

struct Truth {
  std::string number, seller, buyer, net, gross;
};

Truth truth_of(const std::filesystem::path& xml) {
  auto d = quarry::test::read_xml_file(xml);
  EXPECT_NE(d.root(), nullptr) << xml;
  Truth t;
  t.number = quarry::test::first_text(d.root(), "invoiceNumber");
  t.seller = quarry::test::first_text(d.root(), "supplierName");
  t.buyer = quarry::test::first_text(d.root(), "customerName");
  t.net = quarry::test::first_text(d.root(), "invoiceNetAmount");
  t.gross = quarry::test::first_text(d.root(), "invoiceGrossAmount");
  return t;
}

// The ways a renderer may print an XML decimal ("23622.40"): trailing fraction zeros dropped or
// kept, thousands grouped by space, NBSP, narrow NBSP, comma, dot, apostrophe or not at all, and a
// decimal comma or point (never the same character as the grouping).
std::vector<std::string> printed_forms(std::string v) {
  const bool neg = !v.empty() && v[0] == '-';
  if (neg) v.erase(0, 1);
  const auto dot = v.find('.');
  const std::string whole = v.substr(0, dot);
  const std::string frac_kept = dot == std::string::npos ? "" : v.substr(dot + 1);
  std::string frac_trim = frac_kept;
  while (!frac_trim.empty() && frac_trim.back() == '0') frac_trim.pop_back();
  std::vector<std::string> out;
  for (const char* group : {"", " ", "\u00a0", "\u202f", ",", ".", "'"}) {
    std::string grouped;
    for (std::size_t i = 0; i < whole.size(); ++i) {
      if (i > 0 && (whole.size() - i) % 3 == 0) grouped += group;
      grouped += whole[i];
    }
    for (const char* decimal : {",", "."}) {
      if (std::string_view(group) == decimal) continue;
      for (const std::string& frac : {frac_trim, frac_kept}) {
        std::string s = (neg ? "-" : "") + grouped;
        if (!frac.empty()) s += decimal + frac;
        out.push_back(s);
      }
    }
  }
  return out;
}

bool contains_any(std::string_view text, const std::vector<std::string>& forms) {
  for (const auto& f : forms)
    if (text.find(f) != std::string_view::npos) return true;
  return false;
}

void check_rendering(const std::string& format, const std::string& ext) {
  std::size_t checked = 0;
  for (const auto& xml : quarry::test::files_in(corpora() / "nav" / "xml")) {
    const Truth t = truth_of(xml);
    ASSERT_FALSE(t.number.empty() || t.seller.empty() || t.buyer.empty() || t.gross.empty()) << xml;
    for (const char* lang : {"hu", "en", "de"}) {
      const auto file = corpora() / "nav" / format / lang / (xml.stem().string() + ext);
      SCOPED_TRACE(file.string());
      auto doc = quarry::extract_file(file);
      ASSERT_TRUE(doc) << doc.error().reason;
      EXPECT_EQ(doc->media_type, format == "pdf" ? "application/pdf" : "text/html");
      const std::string text = doc->text();
      EXPECT_NE(text.find(t.number), std::string::npos) << "invoice number " << t.number;
      EXPECT_NE(text.find(t.seller), std::string::npos) << "seller " << t.seller;
      EXPECT_NE(text.find(t.buyer), std::string::npos) << "buyer " << t.buyer;
      const auto gross = printed_forms(t.gross);
      EXPECT_TRUE(contains_any(text, gross)) << "gross total " << t.gross << " in no printed form";
      // Table rows stay on one line: the totals row carries the net and the gross amounts together.
      const auto net = printed_forms(t.net);
      bool row = false;
      for (const auto& page : doc->pages)
        for (const auto& line : page.lines) row = row || (contains_any(line.text, net) && contains_any(line.text, gross));
      EXPECT_TRUE(row) << "no line holds both net " << t.net << " and gross " << t.gross;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 30u);
}

TEST(NavCorpus, PdfTextCarriesInvoiceNumberPartiesAndTotals) { check_rendering("pdf", ".pdf"); }

TEST(NavCorpus, HtmlTextCarriesInvoiceNumberPartiesAndTotals) { check_rendering("html", ".html"); }

TEST(NavCorpus, PdfLinesHaveBoxesInsideThePage) {
  auto doc = quarry::extract_file(corpora() / "nav" / "pdf" / "hu" / "Belfoldi termekertekesites.pdf");
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->pages.size(), 2u);
  std::size_t boxed = 0, lines = 0;
  for (const auto& page : doc->pages) {
    EXPECT_GT(page.width, 500);  // A4: 595 x 842 points
    EXPECT_GT(page.height, 800);
    double last_y = -1;
    for (const auto& line : page.lines) {
      ++lines;
      if (!line.bbox) continue;
      ++boxed;
      EXPECT_LE(line.bbox->x0, line.bbox->x1);
      EXPECT_LE(line.bbox->y0, line.bbox->y1);
      EXPECT_GE(line.bbox->x0, 0);
      EXPECT_LE(line.bbox->y1, page.height);
      // Physical layout reads top to bottom.
      EXPECT_GE(line.bbox->y1, last_y) << line.text;
      last_y = line.bbox->y0;
    }
  }
  EXPECT_EQ(boxed, lines);
  EXPECT_EQ(doc->metadata.at("producer").rfind("Apache FOP", 0), 0u);
}

TEST(NavCorpus, XmlTextHasOneLinePerValue) {
  const auto xml = corpora() / "nav" / "xml" / "Belfoldi termekertekesites.xml";
  const Truth t = truth_of(xml);
  auto doc = quarry::extract_file(xml);
  ASSERT_TRUE(doc) << doc.error().reason;
  EXPECT_EQ(doc->media_type, "application/xml");
  EXPECT_EQ(doc->metadata.at("root_element"), "InvoiceData");
  bool number = false, seller = false;
  for (const auto& line : doc->pages.at(0).lines) {
    number = number || line.text == t.number;
    seller = seller || line.text == t.seller;
  }
  EXPECT_TRUE(number);
  EXPECT_TRUE(seller);
}

}  // namespace
