// XML and HTML built here to attack the parser: a billion laughs and invoices in UTF-16 (with and
// without a byte order mark) and in a declared 8-bit encoding, an element with 100,000 attributes,
// documents of a million elements. The guards must see characters whatever the encoding, and the
// attacks end in a clear error within a generous time and memory guard (a child process).
#include <gtest/gtest.h>

#include <fstream>

#include "extractors/extract.hpp"
#include "tests/extractors/child.hpp"
#include "tests/extractors/corpus.hpp"
#include "tests/extractors/hostile_inputs.hpp"

namespace {

using quarry::test::hostile::billion_laughs;
using quarry::test::hostile::encode;
using quarry::test::hostile::many_attributes;

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(XmlHostile, BillionLaughsInUtf16IsRefused) {
  const std::string utf16 = billion_laughs("UTF-16");
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"le-bom", "\xFF\xFE" + encode(utf16, "UTF-16LE")},
           {"be-bom", "\xFE\xFF" + encode(utf16, "UTF-16BE")},
           {"le", encode(utf16, "UTF-16LE")},
           {"be", encode(utf16, "UTF-16BE")},
           {"utf-32", encode(billion_laughs("UTF-32"), "UTF-32")}}) {
    SCOPED_TRACE(name);
    auto r = quarry::test::in_child([&] {
      auto doc = quarry::extract_bytes(bytes, "laughs.xml");
      return doc ? std::string("ok") : doc.error().reason;
    });
    EXPECT_TRUE(r.finished);
    EXPECT_LT(r.seconds, 60);
    EXPECT_LT(r.max_rss_kb, 2L << 20);
    EXPECT_EQ(r.output, "XML declares entities in a DTD; refused (entity expansion / external entities are not allowed) (line 3)");
  }
}

// Every NAV sample re-encoded: UTF-16 with and without a byte order mark, and ISO-8859-2 as
// declared, maps to exactly the invoice its UTF-8 original maps to, and gives the same text.
TEST(XmlHostile, NavInvoiceInOtherEncodingsMapsLikeUtf8) {
  const auto files = quarry::test::files_in(quarry::test::corpora() / "nav" / "xml");
  ASSERT_EQ(files.size(), 10u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    const std::string utf8 = read_all(f);
    ASSERT_EQ(utf8.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", 0), 0u);
    auto original = quarry::extract_bytes(utf8, "nav.xml");
    ASSERT_TRUE(original && original->einvoice) << (original ? "not mapped" : original.error().reason);
    ASSERT_FALSE((*original->einvoice)["invoice_number"].get<std::string>().empty());
    auto relabel = [&](const std::string& enc) {
      return "<?xml version=\"1.0\" encoding=\"" + enc + "\"?>" + utf8.substr(std::string("<?xml version=\"1.0\" encoding=\"UTF-8\"?>").size());
    };
    const std::vector<std::pair<std::string, std::string>> copies = {
        {"UTF-16LE with BOM", "\xFF\xFE" + encode(relabel("UTF-16"), "UTF-16LE")},
        {"UTF-16BE with BOM", "\xFE\xFF" + encode(relabel("UTF-16"), "UTF-16BE")},
        {"UTF-16LE", encode(relabel("UTF-16"), "UTF-16LE")},
        {"ISO-8859-2", encode(relabel("ISO-8859-2"), "ISO-8859-2")}};
    for (const auto& [name, bytes] : copies) {
      SCOPED_TRACE(name);
      auto doc = quarry::extract_bytes(bytes, "nav.xml");
      ASSERT_TRUE(doc) << doc.error().reason;
      EXPECT_EQ(doc->media_type, "application/xml");
      ASSERT_TRUE(doc->einvoice.has_value()) << (doc->warnings.empty() ? "" : doc->warnings[0]);
      EXPECT_EQ(doc->einvoice_format, "nav");
      EXPECT_EQ((*doc->einvoice)["invoice_number"], (*original->einvoice)["invoice_number"]);
      EXPECT_EQ(*doc->einvoice, *original->einvoice);
      EXPECT_EQ(doc->text(), original->text());
    }
  }
}

TEST(XmlHostile, UnknownOrWrongEncodingIsAClearError) {
  auto unknown = quarry::extract_bytes("<?xml version=\"1.0\" encoding=\"x-no-such\"?><r>a</r>", "enc.xml");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().reason.find("XML declares encoding x-no-such"), std::string::npos) << unknown.error().reason;
  // A lone UTF-16 surrogate behind a UTF-16 byte order mark: refused, not read as something else.
  auto odd = quarry::extract_bytes(std::string("\xFF\xFE<\0r\0>\0\x00\xD8<\0/\0r\0>\0", 18), "odd.xml");
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.error().file, "odd.xml");
}

TEST(XmlHostile, HundredThousandAttributes) {
  for (bool html : {false, true}) {
    SCOPED_TRACE(html ? "html" : "xml");
    const std::string bytes = many_attributes(100000, html);
    auto r = quarry::test::in_child([&] {
      auto doc = quarry::extract_bytes(bytes, html ? "attrs.html" : "attrs.xml");
      return doc ? std::string("ok") : doc.error().reason;
    });
    EXPECT_TRUE(r.finished);
    EXPECT_LT(r.seconds, 60);
    EXPECT_LT(r.max_rss_kb, 2L << 20);
    EXPECT_EQ(r.output, std::string(html ? "HTML" : "XML") + " element with more than 256 attributes (line " + (html ? "1" : "2") + ")");
  }
}

TEST(XmlHostile, AttributeLimitIsExact) {
  for (bool html : {false, true}) {
    SCOPED_TRACE(html ? "html" : "xml");
    auto at = quarry::extract_bytes(many_attributes(256, html), html ? "a.html" : "a.xml");
    ASSERT_TRUE(at) << at.error().reason;
    EXPECT_EQ(at->text(), "text");
    EXPECT_FALSE(quarry::extract_bytes(many_attributes(257, html), html ? "a.html" : "a.xml"));
  }
  // '>' and '=' inside quoted values, and markup inside script, are not attributes.
  std::string quoted = "<?xml version=\"1.0\"?><r";
  for (int i = 0; i < 200; ++i) quoted += " a" + std::to_string(i) + "='x=1 > y=2 /> b c=\"d\"'";
  quoted += ">ok</r>";
  auto q = quarry::extract_bytes(quoted, "q.xml");
  ASSERT_TRUE(q) << q.error().reason;
  EXPECT_EQ(q->text(), "ok");
  std::string script = "<html><head><script>if (a<b";
  for (int i = 0; i < 1000; ++i) script += " x" + std::to_string(i) + "=1";
  script += ") {}</script></head><body><p>visible</p></body></html>";
  auto s = quarry::extract_bytes(script, "s.html");
  ASSERT_TRUE(s) << s.error().reason;
  EXPECT_EQ(s->text(), "visible");
}

TEST(XmlHostile, MillionsOfElementsAreRefusedBeforeParsing) {
  for (bool html : {false, true}) {
    SCOPED_TRACE(html ? "html" : "xml");
    const std::string x = quarry::test::hostile::many_elements(5000000, html);
    auto r = quarry::test::in_child([&] {
      auto doc = quarry::extract_bytes(x, html ? "big.html" : "big.xml");
      return doc ? std::string("ok") : doc.error().reason;
    });
    EXPECT_TRUE(r.finished);
    EXPECT_LT(r.seconds, 60);
    EXPECT_LT(r.max_rss_kb, 2L << 20);
    EXPECT_EQ(r.output, std::string(html ? "HTML" : "XML") +
                            " has more than 1000000 elements and attributes (the parsed tree would take too much memory) (line 1)");
  }
  // The limit is an option.
  quarry::ExtractOptions opts;
  opts.max_xml_nodes = 10;
  EXPECT_TRUE(quarry::extract_bytes("<r><a x=\"1\">1</a><b>2</b></r>", "small.xml", opts));
  auto over = quarry::extract_bytes("<r><a x=\"1\" y=\"2\">1</a><b>2</b><c>3</c><d>4</d><e>5</e><f>6</f><g/><h/></r>", "small.xml", opts);
  ASSERT_FALSE(over);
  EXPECT_NE(over.error().reason.find("more than 10 elements and attributes"), std::string::npos);
}

TEST(XmlHostile, EntityDeclarationsOnlyCountInTheDtd) {
  // Text that mentions the markup is not a declaration.
  auto text = quarry::extract_bytes("<?xml version=\"1.0\"?><r><!-- <!ENTITY x \"y\"> --><![CDATA[<!ENTITY a \"b\">]]></r>", "t.xml");
  ASSERT_TRUE(text) << text.error().reason;
  EXPECT_EQ(text->text(), "<!ENTITY a \"b\">");
  // A declaration after a comment and a quoted ']' in the subset is one.
  auto hidden = quarry::extract_bytes("<?xml version=\"1.0\"?><!DOCTYPE r [<!-- ] --><!ATTLIST r a CDATA \"]\"><!ENTITY e \"x\">]><r>&e;</r>", "h.xml");
  ASSERT_FALSE(hidden);
  EXPECT_NE(hidden.error().reason.find("declares entities"), std::string::npos);
}

TEST(XmlHostile, DeepNestingInUtf16IsRefused) {
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-16\"?>";
  for (int i = 0; i < 10000; ++i) x += "<n>";
  x += "deep";
  for (int i = 0; i < 10000; ++i) x += "</n>";
  auto r = quarry::extract_bytes("\xFF\xFE" + encode(x, "UTF-16LE"), "deep16.xml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "XML nesting deeper than 256 elements (line 1)");
}

}  // namespace
