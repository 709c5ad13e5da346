// Text, Markdown, HTML and XML behaviour on small inputs whose expected output is fixed by the
// format's rules: encodings (bytes produced by glibc iconv, the reference encoder), media type
// sniffing, HTML visibility and table rows, XML leaf lines, SHA-256 against the FIPS 180-2 vector.
#include <gtest/gtest.h>

#include <iconv.h>

#include "extractors/extract.hpp"

namespace {

std::string encode(const std::string& utf8, const char* to) {
  iconv_t cd = iconv_open(to, "UTF-8");
  EXPECT_NE(cd, reinterpret_cast<iconv_t>(-1)) << to;
  std::string out(utf8.size() * 4 + 8, '\0');
  char* in = const_cast<char*>(utf8.data());
  char* o = out.data();
  std::size_t il = utf8.size(), ol = out.size();
  EXPECT_NE(iconv(cd, &in, &il, &o, &ol), static_cast<std::size_t>(-1)) << to;
  iconv_close(cd);
  out.resize(out.size() - ol);
  return out;
}

const std::string kHungarian = "Árvíztűrő tükörfúrógép\nSzámla sorszáma: 2021/000123\nŐRÜLT ŰRHAJÓ, bőség és sűrűség";
const std::string kPolish = "Zażółć gęślą jaźń\nPchnąć w tę łódź jeża lub ośm skrzyń fig";
const std::string kFrench = "Noël à l'école: garçon, façade, élève, où, déjà, crème brûlée\nÇa coûte 12 €";

void expect_decoded(const std::string& utf8, const char* enc, const std::string& expected_label) {
  SCOPED_TRACE(enc);
  auto doc = quarry::extract_bytes(encode(utf8, enc), "t.txt");
  ASSERT_TRUE(doc) << doc.error().reason;
  EXPECT_EQ(doc->text(), utf8);
  EXPECT_EQ(doc->metadata.at("encoding"), expected_label);
}

TEST(Text, Utf8AndUtf16WithBom) {
  expect_decoded(kHungarian, "UTF-8", "UTF-8");
  auto le = quarry::extract_bytes("\xFF\xFE" + encode(kHungarian, "UTF-16LE"), "t.txt");
  ASSERT_TRUE(le) << le.error().reason;
  EXPECT_EQ(le->text(), kHungarian);
  EXPECT_EQ(le->media_type, "text/plain");
  auto be = quarry::extract_bytes("\xFE\xFF" + encode(kHungarian, "UTF-16BE"), "t.txt");
  ASSERT_TRUE(be) << be.error().reason;
  EXPECT_EQ(be->text(), kHungarian);
}

TEST(Text, LegacyCodePagesAreDetected) {
  expect_decoded(kHungarian, "WINDOWS-1250", "WINDOWS-1250");
  expect_decoded(kPolish, "WINDOWS-1250", "WINDOWS-1250");
  expect_decoded(kPolish, "ISO-8859-2", "ISO-8859-2");
  expect_decoded(kFrench, "WINDOWS-1252", "WINDOWS-1252");
  // Hungarian in ISO-8859-2 shares every byte with windows-1250: decoded text is what matters.
  auto doc = quarry::extract_bytes(encode(kHungarian, "ISO-8859-2"), "t.txt");
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->text(), kHungarian);
}

TEST(Text, LinesBlocksAndLineEnds) {
  auto doc = quarry::extract_bytes("first\r\nsecond  \r\n\r\n\r\nthird\rfourth\n", "t.txt");
  ASSERT_TRUE(doc);
  const auto& lines = doc->pages.at(0).lines;
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1].text, "second");
  EXPECT_EQ(lines[0].block, lines[1].block);
  EXPECT_EQ(lines[2].block, lines[1].block + 1);
  EXPECT_EQ(lines[3].text, "fourth");
}

TEST(Text, BinaryIsRefused) {
  std::string bin("\x7F" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0", 16);
  EXPECT_EQ(quarry::detect_media_type(bin), "application/octet-stream");
  EXPECT_FALSE(quarry::extract_bytes(bin, "a.out"));
  EXPECT_FALSE(quarry::extract_bytes(std::string("abc\0def\0ghi", 11), "t.txt"));
}

TEST(MediaType, ByContentFirst) {
  EXPECT_EQ(quarry::detect_media_type("%PDF-1.7\n...", "x.txt"), "application/pdf");
  EXPECT_EQ(quarry::detect_media_type("<?xml version=\"1.0\"?><Invoice/>", "x.html"), "application/xml");
  EXPECT_EQ(quarry::detect_media_type("<?xml version=\"1.0\"?>\n<!-- c -->\n<html xmlns=\"http://www.w3.org/1999/xhtml\"/>"), "text/html");
  EXPECT_EQ(quarry::detect_media_type("\xEF\xBB\xBF  <!DOCTYPE HTML PUBLIC \"-//W3C//DTD HTML 4.01//EN\"><p>x"), "text/html");
  EXPECT_EQ(quarry::detect_media_type("<div>hi</div>"), "text/html");
  EXPECT_EQ(quarry::detect_media_type("<InvoiceData><a>1</a></InvoiceData>"), "application/xml");
  EXPECT_EQ(quarry::detect_media_type("# Title\n\n- item\n- [link](http://x)\n"), "text/markdown");
  EXPECT_EQ(quarry::detect_media_type("just words\nand more words\n"), "text/plain");
  // The extension breaks ties only.
  EXPECT_EQ(quarry::detect_media_type("just words\n", "notes.md"), "text/markdown");
  EXPECT_EQ(quarry::detect_media_type("<unknown>x</unknown>", "page.html"), "text/html");
  EXPECT_EQ(quarry::detect_media_type("\x89PNG\r\n\x1a\n....", "x.txt"), "application/octet-stream");
}

TEST(Html, VisibleTextBlocksAndTableRows) {
  const std::string html =
      "<html><head><title>T&amp;C</title><style>p{color:red}</style><script>var x='hidden';</script>"
      "<meta name=\"author\" content=\"Ann\"></head><body>"
      "<h1>Invoice   INV-1</h1><p>Seller:&nbsp;<b>Acme</b> Kft<br>Budapest</p>"
      "<table><tr><th>Item</th><th>Qty</th><th>Total</th></tr>"
      "<tr><td>Bolt</td><td>2</td><td>1&#160;000 Ft</td></tr>"
      "<tr><td>Seller<br>Acme</td><td></td><td>Buyer<br>Beta</td></tr></table>"
      "<noscript>enable js</noscript><p>Th\xE2\x80\x8B" "ank you</p></body></html>";
  auto doc = quarry::extract_bytes(html, "t.html");
  ASSERT_TRUE(doc) << doc.error().reason;
  EXPECT_EQ(doc->media_type, "text/html");
  EXPECT_EQ(doc->text(),
            "Invoice INV-1\nSeller: Acme Kft\nBudapest\nItem | Qty | Total\nBolt | 2 | 1 000 Ft\n"
            "Seller |  | Buyer\nAcme |  | Beta\nThank you");
  EXPECT_EQ(doc->metadata.at("title"), "T&C");
  EXPECT_EQ(doc->metadata.at("author"), "Ann");
  const auto& lines = doc->pages.at(0).lines;
  EXPECT_EQ(lines[3].block, lines[6].block);  // one table, one block
  EXPECT_NE(lines[0].block, lines[1].block);
  EXPECT_NE(lines[6].block, lines[7].block);
}

TEST(Html, EncodingWithoutCharsetIsSniffed) {
  const std::string body = "<html><body><p>" + kHungarian.substr(0, kHungarian.find('\n')) + "</p></body></html>";
  for (const char* enc : {"UTF-8", "WINDOWS-1250"}) {
    auto doc = quarry::extract_bytes(encode(body, enc), "t.html");
    ASSERT_TRUE(doc) << doc.error().reason;
    EXPECT_EQ(doc->text(), "Árvíztűrő tükörfúrógép") << enc;
  }
  // A declared charset wins.
  const std::string declared = "<html><head><meta charset=\"iso-8859-2\"></head><body><p>" +
                               encode("Zażółć gęślą jaźń", "ISO-8859-2") + "</p></body></html>";
  auto doc = quarry::extract_bytes(declared, "t.html");
  ASSERT_TRUE(doc) << doc.error().reason;
  EXPECT_EQ(doc->text(), "Zażółć gęślą jaźń");
}

TEST(Xml, OneLinePerElementWithText) {
  auto doc = quarry::extract_bytes(
      "<?xml version=\"1.0\"?><inv xmlns=\"urn:x\"><id>  A-1 </id><party><name>Acme\n  Kft</name>"
      "<addr/></party><note><![CDATA[a < b]]></note></inv>",
      "t.xml");
  ASSERT_TRUE(doc) << doc.error().reason;
  EXPECT_EQ(doc->text(), "A-1\nAcme Kft\na < b");
  EXPECT_EQ(doc->metadata.at("root_element"), "inv");
  EXPECT_EQ(doc->metadata.at("namespace"), "urn:x");
  auto bad = quarry::extract_bytes("<?xml version=\"1.0\"?><a><b></a>", "bad.xml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().reason.find("line"), std::string::npos) << bad.error().reason;
}

TEST(Sha256, MatchesFips180Vector) {
  EXPECT_EQ(quarry::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto doc = quarry::extract_bytes("abc", "abc.txt");
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->sha256, quarry::sha256_hex("abc"));
  EXPECT_EQ(doc->size_bytes, 3u);
}

}  // namespace
