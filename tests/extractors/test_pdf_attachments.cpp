// Embedded files in every place a PDF writer puts them, in PDFs built here: the EmbeddedFiles name
// tree (direct, with /Kids), the catalog's and a page's /AF, FileAttachment annotations; names in
// UTF-16; the same file listed twice; a file whose /Size says 100 bytes and that inflates to 1 GiB;
// data that cannot be decoded; the per-document total. And an embedded CII invoice is mapped
// wherever it is found.
#include <gtest/gtest.h>

#include <fstream>

#include "extractors/extract.hpp"
#include "tests/extractors/child.hpp"
#include "tests/extractors/corpus.hpp"
#include "tests/extractors/hostile_inputs.hpp"

namespace {

using namespace quarry::test::pdfgen;

// A one-page document with text, to which embedded files are added.
struct Fixture {
  Doc d;
  int content = d.text_content("Invoice 42");

  int file(std::string_view bytes, const std::string& name_entries, const std::string& stream_extra = "/Subtype /text#2Fxml") {
    const int ef = d.b.add_stream("/Type /EmbeddedFile " + stream_extra + " /Filter /FlateDecode", deflate(bytes));
    return d.b.add("<< /Type /Filespec " + name_entries + " /EF << /F " + Builder::ref(ef) + " >> /AFRelationship /Data >>");
  }
  quarry::Expected<quarry::Document> extract(const std::string& page_extra = "", const quarry::ExtractOptions& opts = {}) {
    d.page(content, page_extra);
    return quarry::extract_bytes(d.finish(), "made.pdf", opts);
  }
};

TEST(PdfAttachments, DirectNameTreeWithoutSize) {
  Fixture f;
  const int spec = f.file("<a>one</a>", "/F (one.xml) /UF (one.xml) /Desc (the first)");
  f.d.catalog_extra = "/Names << /EmbeddedFiles << /Names [(one.xml) " + Builder::ref(spec) + "] >> >>";
  auto doc = f.extract();
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->attachments.size(), 1u);
  const auto& a = doc->attachments[0];
  EXPECT_EQ(a.name, "one.xml");
  EXPECT_EQ(a.bytes, "<a>one</a>");
  EXPECT_EQ(a.media_type, "text/xml");
  EXPECT_EQ(a.description, "the first");
  EXPECT_TRUE(doc->warnings.empty());
}

TEST(PdfAttachments, NameTreeWithKidsInTreeOrder) {
  Fixture f;
  const int s1 = f.file("first", "/F (a.txt)", "/Subtype /text#2Fplain");
  const int s2 = f.file("second", "/F (b.txt)", "/Subtype /text#2Fplain");
  const int leaf1 = f.d.b.add("<< /Limits [(a.txt) (a.txt)] /Names [(a.txt) " + Builder::ref(s1) + "] >>");
  const int leaf2 = f.d.b.add("<< /Limits [(b.txt) (b.txt)] /Names [(b.txt) " + Builder::ref(s2) + "] >>");
  const int tree = f.d.b.add("<< /Kids [" + Builder::ref(leaf1) + " " + Builder::ref(leaf2) + "] >>");
  f.d.catalog_extra = "/Names << /EmbeddedFiles " + Builder::ref(tree) + " >>";
  auto doc = f.extract();
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->attachments.size(), 2u);
  EXPECT_EQ(doc->attachments[0].name, "a.txt");
  EXPECT_EQ(doc->attachments[0].bytes, "first");
  EXPECT_EQ(doc->attachments[1].name, "b.txt");
  EXPECT_EQ(doc->attachments[1].bytes, "second");
  EXPECT_EQ(doc->attachments[1].media_type, "text/plain");
}

TEST(PdfAttachments, AssociatedFilesOfCatalogAndPageAndAnnotations) {
  Fixture f;
  const int cat = f.file("catalog", "/F (catalog.txt)");
  const int page = f.file("page", "/F (page.txt)");
  const int annot_file = f.file("annotation", "/F (annotation.txt)");
  const int annot = f.d.b.add("<< /Type /Annot /Subtype /FileAttachment /Rect [10 10 30 30] /FS " + Builder::ref(annot_file) + " >>");
  // A link annotation is not a file.
  const int link = f.d.b.add("<< /Type /Annot /Subtype /Link /Rect [40 10 60 30] /A << /S /URI /URI (https://example.org) >> >>");
  f.d.catalog_extra = "/AF [" + Builder::ref(cat) + "]";
  auto doc = f.extract("/AF [" + Builder::ref(page) + "] /Annots [" + Builder::ref(link) + " " + Builder::ref(annot) + "]");
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->attachments.size(), 3u);
  EXPECT_EQ(doc->attachments[0].bytes, "catalog");
  EXPECT_EQ(doc->attachments[1].bytes, "page");
  EXPECT_EQ(doc->attachments[2].bytes, "annotation");
  EXPECT_EQ(doc->attachments[2].name, "annotation.txt");
}

TEST(PdfAttachments, SameFileInSeveralPlacesIsListedOnce) {
  Fixture f;
  const int spec = f.file("<x/>", "/F (x.xml)");
  f.d.catalog_extra = "/Names << /EmbeddedFiles << /Names [(x.xml) " + Builder::ref(spec) + "] >> >> /AF [" + Builder::ref(spec) + "]";
  auto doc = f.extract("/AF [" + Builder::ref(spec) + "]");
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->attachments.size(), 1u);
}

TEST(PdfAttachments, Utf16NamesAndDescriptions) {
  Fixture f;
  // "fäktúra.xml" in UTF-16BE with its byte order mark; the description in PDFDocEncoding.
  const int spec = f.file("<f/>", "/F (faktura.xml) /UF <FEFF006600E4006B007400FA00720061002E0078006D006C> /Desc (Rechnung \xFC)");
  f.d.catalog_extra = "/AF [" + Builder::ref(spec) + "]";
  auto doc = f.extract();
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->attachments.size(), 1u);
  EXPECT_EQ(doc->attachments[0].name, "f\xC3\xA4kt\xC3\xBAra.xml");
  EXPECT_EQ(doc->attachments[0].description, "Rechnung \xC3\xBC");
  EXPECT_TRUE(doc->warnings.empty());
}

// /Size says 100 bytes; the stream inflates to 1 GiB. Inflating stops at the limit; the other file stays.
TEST(PdfAttachments, FileInflatingToAGibibyteIsSkipped) {
  const std::string pdf = quarry::test::hostile::pdf_attachment_bomb(1024);
  EXPECT_LT(pdf.size(), 2u << 20);
  auto r = quarry::test::in_child([&] {
    auto doc = quarry::extract_bytes(pdf, "bomb.pdf");
    if (!doc) return "error " + doc.error().reason;
    std::string s = "ok";
    for (const auto& a : doc->attachments) s += " [" + a.name + " " + std::to_string(a.bytes.size()) + "]";
    for (const auto& w : doc->warnings) s += "\n" + w;
    return s;
  });
  EXPECT_TRUE(r.finished);
  EXPECT_LT(r.seconds, 60);
  EXPECT_LT(r.max_rss_kb, 2L << 20);
  EXPECT_EQ(r.output, "ok [ok.xml 5]\nembedded file bomb.xml skipped: it inflates to more than the limit of 33554432 bytes");
}

TEST(PdfAttachments, UndecodableDataAndTotalLimit) {
  Fixture f;
  const int bad_ef = f.d.b.add_stream("/Type /EmbeddedFile /Filter /FlateDecode", "this is not zlib data at all");
  const int bad = f.d.b.add("<< /Type /Filespec /F (bad.bin) /EF << /F " + Builder::ref(bad_ef) + " >> >>");
  const int a = f.file(std::string(600, 'a'), "/F (a.txt)");
  const int b = f.file(std::string(600, 'b'), "/F (b.txt)");
  f.d.catalog_extra = "/AF [" + Builder::ref(bad) + " " + Builder::ref(a) + " " + Builder::ref(b) + "]";
  quarry::ExtractOptions opts;
  opts.max_attachments_total_bytes = 1000;
  auto doc = f.extract("", opts);
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->attachments.size(), 1u);
  EXPECT_EQ(doc->attachments[0].name, "a.txt");
  ASSERT_EQ(doc->warnings.size(), 2u);
  EXPECT_EQ(doc->warnings[0], "embedded file bad.bin skipped: its data cannot be decoded");
  EXPECT_EQ(doc->warnings[1], "embedded file b.txt skipped: it inflates to more than the limit of 400 bytes");
}

// A CII invoice attached only through a page's FileAttachment annotation is still mapped.
TEST(PdfAttachments, InvoiceInAnAnnotationIsMapped) {
  const auto cii = quarry::test::files_in(quarry::test::corpora() / "en16931" / "cii");
  ASSERT_FALSE(cii.empty());
  std::ifstream in(cii.front(), std::ios::binary);
  const std::string xml{std::istreambuf_iterator<char>(in), {}};
  Fixture f;
  const int spec = f.file(xml, "/F (factur-x.xml)");
  const int annot = f.d.b.add("<< /Type /Annot /Subtype /FileAttachment /Rect [10 10 30 30] /FS " + Builder::ref(spec) + " >>");
  auto doc = f.extract("/Annots [" + Builder::ref(annot) + "]");
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->attachments.size(), 1u);
  EXPECT_EQ(doc->attachments[0].bytes, xml);
  ASSERT_TRUE(doc->einvoice.has_value());
  EXPECT_EQ(doc->einvoice_format, "cii");
  auto direct = quarry::extract_file(cii.front());
  ASSERT_TRUE(direct && direct->einvoice);
  EXPECT_EQ(*doc->einvoice, *direct->einvoice);
}

}  // namespace
