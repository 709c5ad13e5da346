// PDFs built here to attack the PDF extractor's time and memory: content streams shared by pages and
// inflating to a GiB, a page showing hundreds of MB of text through a form, words by the hundred
// thousand, layouts that make poppler's layout analysis quadratic. Each must end in a Document or a
// clear error, within a generous time and memory guard (a child process: wall time and getrusage),
// and the limits must cut exactly where ExtractOptions says.
#include <gtest/gtest.h>

#include "extractors/extract.hpp"
#include "tests/extractors/child.hpp"
#include "tests/extractors/hostile_inputs.hpp"

namespace {

using quarry::test::in_child;
using namespace quarry::test::pdfgen;

constexpr double kMaxSeconds = 60;
constexpr long kMaxRssKb = 2L << 20;  // 2 GiB

// Extracts in a child; returns "ok <pages> <text bytes>\n<warnings, one per line>" or "error <reason>".
std::string summary(const std::string& pdf, const quarry::ExtractOptions& opts) {
  auto r = quarry::extract_bytes(pdf, "hostile.pdf", opts);
  if (!r) return "error " + r.error().reason;
  std::string s = "ok " + std::to_string(r->pages.size()) + " " + std::to_string(r->text().size()) + "\n";
  for (const auto& w : r->warnings) s += w + "\n";
  return s;
}

// As `quarry ingest` and `quarry run` extract: no line boxes (they cost a second pass per page).
quarry::ExtractOptions ingest() {
  quarry::ExtractOptions o;
  o.pdf_line_bboxes = false;
  return o;
}

quarry::test::ChildResult guarded(const std::string& pdf, const quarry::ExtractOptions& opts = ingest()) {
  auto r = in_child([&] { return summary(pdf, opts); });
  EXPECT_TRUE(r.finished) << "killed or timed out after " << r.seconds << " s";
  EXPECT_LT(r.seconds, kMaxSeconds);
  EXPECT_LT(r.max_rss_kb, kMaxRssKb);
  return r;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// 1 GiB of content (some text, then spaces) in about 1 MB of file, used by 10 pages.
TEST(PdfLimits, TenPagesSharingAOneGibContentStream) {
  const std::string pdf = quarry::test::hostile::pdf_shared_content(10, 1024);
  EXPECT_LT(pdf.size(), 2u << 20);
  auto r = guarded(pdf);
  // Every page is over the page limit: nothing is interpreted, and the error says why.
  EXPECT_EQ(r.output.rfind("error ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("limit of 67108864 bytes"), std::string::npos) << r.output;
}

// A smaller shared stream (3 MiB) over 50 pages, with a document limit of 10 MiB: the first pages are
// read, the rest skipped with a warning each.
TEST(PdfLimits, DocumentContentBudgetSkipsTheRest) {
  Doc d;
  const std::string head = "BT /F1 12 Tf 72 720 Td (shared page) Tj ET\n";
  const int content = d.b.add_stream("/Filter /FlateDecode", deflate(head + std::string((3 << 20) - head.size(), ' ')));
  for (int i = 0; i < 50; ++i) d.page(content);
  quarry::ExtractOptions opts = ingest();
  opts.max_content_bytes = 10 << 20;
  auto doc = quarry::extract_bytes(d.finish(), "shared.pdf", opts);
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->pages.size(), 50u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(doc->pages[i].lines.size(), 1u) << i;
    EXPECT_EQ(doc->pages[i].lines[0].text, "shared page");
  }
  for (int i = 3; i < 50; ++i) EXPECT_TRUE(doc->pages[i].lines.empty()) << i;
  ASSERT_EQ(doc->warnings.size(), 47u);
  EXPECT_EQ(doc->warnings[0], "page 4 skipped: the document's content streams decode to more than the limit of 10485760 bytes");
}

// Pages with streams of their own, each 10 MiB: past the document's budget nothing more is decoded,
// not even to be measured.
TEST(PdfLimits, DocumentContentBudgetWithUniqueStreams) {
  Doc d;
  const std::string head = "BT /F1 12 Tf 72 720 Td (own page) Tj ET\n";
  const std::string unit = head + std::string((1 << 20) - head.size(), ' ');
  for (int i = 0; i < 20; ++i) d.page(d.b.add_stream("/Filter /FlateDecode", deflate_repeated(unit, 10)));
  quarry::ExtractOptions opts = ingest();
  opts.max_content_bytes = 64 << 20;
  auto r = in_child([&] { return summary(d.finish(), opts); });
  ASSERT_TRUE(r.finished);
  EXPECT_LT(r.seconds, 60);
  EXPECT_EQ(r.output.rfind("ok 20 ", 0), 0u) << r.output;
  EXPECT_EQ(count(r.output, "skipped: the document's content streams decode to more than the limit of 67108864 bytes"), 14u)
      << r.output;
  EXPECT_NE(r.output.find("\npage 7 skipped"), std::string::npos) << r.output;
}

// A page that shows 400 MB of text: a 38 KB form XObject of text drawn 10,000 times by a small page.
TEST(PdfLimits, PageShowingHundredsOfMegabytesOfText) {
  const std::string pdf = quarry::test::hostile::pdf_text_through_form(10000);
  EXPECT_LT(pdf.size(), 400u << 10);
  auto r = guarded(pdf);
  ASSERT_EQ(r.output.rfind("ok 1 ", 0), 0u) << r.output;
  const std::size_t text_bytes = std::stoul(r.output.substr(5));
  EXPECT_GT(text_bytes, 1u << 20);
  EXPECT_LE(text_bytes, 4u << 20);
  EXPECT_NE(r.output.find("page 1: text cut at the limit of 4194304 bytes"), std::string::npos) << r.output;
}

// The same 400 MB of text written out in one content stream (1.4 MB deflated): over the page's
// content limit, so the page is not interpreted at all.
TEST(PdfLimits, ContentStreamOfHundredsOfMegabytesOfText) {
  auto r = guarded(quarry::test::hostile::pdf_text_in_stream(400));
  EXPECT_EQ(r.output.rfind("error ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("page 1 skipped: its content streams decode to more than the limit"), std::string::npos) << r.output;
}

// Each use of a form is charged: 500 uses of a 50 KB form pass a 4 MiB page limit.
TEST(PdfLimits, FormUsesAreChargedEachTime) {
  Doc d;
  std::string form = "BT /F1 10 Tf 10 10 Td (form) Tj ET\n" + std::string(50 << 10, ' ');
  const int fm = d.b.add_stream("/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 " +
                                    Builder::ref(d.font) + " >> >> /Filter /FlateDecode",
                                deflate(form));
  std::string page = "BT /F1 12 Tf 72 740 Td (title) Tj ET\n";
  for (int i = 0; i < 500; ++i) page += "/Fm Do\n";
  d.page(d.b.add_stream("/Filter /FlateDecode", deflate(page)), "", "/XObject << /Fm " + Builder::ref(fm) + " >>");
  quarry::ExtractOptions opts = ingest();
  opts.max_page_content_bytes = 4 << 20;
  auto doc = quarry::extract_bytes(d.finish(), "forms.pdf", opts);
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->warnings.size(), 1u);
  EXPECT_NE(doc->warnings[0].find("page 1: text cut: its content (form XObjects included, at each use)"), std::string::npos)
      << doc->warnings[0];
  EXPECT_NE(doc->text().find("title"), std::string::npos);
  EXPECT_NE(doc->text().find("form"), std::string::npos);
  // Without the limit every use is read (and the text is the same: the form draws at one place).
  auto whole = quarry::extract_bytes(d.finish(), "forms.pdf", ingest());
  ASSERT_TRUE(whole) << whole.error().reason;
  EXPECT_TRUE(whole->warnings.empty());
}

// One-letter words by the hundred thousand: cut at max_page_words.
TEST(PdfLimits, WordsAreCappedPerPage) {
  Doc d;
  std::string page = "BT /F1 4 Tf 10 780 Td\n";
  for (int row = 0; row < 300; ++row) {
    page += "[";
    for (int i = 0; i < 100; ++i) page += "(a) -900 ";
    page += "] TJ 0 -2.5 Td\n";
  }
  page += "ET\n";
  d.page(d.b.add_stream("/Filter /FlateDecode", deflate(page)));
  quarry::ExtractOptions opts = ingest();
  opts.max_page_words = 5000;
  auto doc = quarry::extract_bytes(d.finish(), "words.pdf", opts);
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->warnings.size(), 1u);
  EXPECT_EQ(doc->warnings[0], "page 1: text cut at the limit of 5000 words");
  const std::string text = doc->text();
  const std::size_t letters = static_cast<std::size_t>(std::count(text.begin(), text.end(), 'a'));
  EXPECT_GE(letters, 4000u);
  EXPECT_LE(letters, 5000u + 5000u / 8 + 1);
  // Within the limit, every word is there.
  auto all = quarry::extract_bytes(d.finish(), "words.pdf", ingest());
  ASSERT_TRUE(all) << all.error().reason;
  const std::string t = all->text();
  EXPECT_EQ(std::count(t.begin(), t.end(), 'a'), 30000);
}

// A staircase of tiny words, each its own text block: poppler's layout analysis is quadratic in
// them. Over the layout limit the page comes in content-stream order, every word kept.
TEST(PdfLimits, IntricateLayoutFallsBackToContentOrder) {
  std::string page = "BT /F1 0.05 Tf\n";
  for (int i = 0; i < 3000; ++i) {
    char step[96];
    std::snprintf(step, sizeof step, "1 0 0 1 %.2f %.2f Tm (w%d) Tj\n", 10 + i * 0.15, 780 - (i % 1500) * 0.51, i);
    page += step;
  }
  page += "ET\n";
  Doc d;
  d.page(d.b.add_stream("/Filter /FlateDecode", deflate(page)));
  const std::string pdf = d.finish();
  // Within the layout limits, laid out: each word on its own line, indented further than the last,
  // which is 13 MB of spaces.
  quarry::ExtractOptions roomy;
  roomy.max_page_text_bytes = 64 << 20;
  roomy.pdf_line_bboxes = false;
  auto laid_out = quarry::extract_bytes(pdf, "stairs.pdf", roomy);
  ASSERT_TRUE(laid_out) << laid_out.error().reason;
  EXPECT_TRUE(laid_out->warnings.empty());
  EXPECT_EQ(count(laid_out->text(), "w"), 3000u);
  EXPECT_GT(laid_out->text().size(), 10u << 20);
  // Under the default 4 MiB per page, that layout does not fit: the page comes in content order, whole.
  auto padded = quarry::extract_bytes(pdf, "stairs.pdf", ingest());
  ASSERT_TRUE(padded) << padded.error().reason;
  ASSERT_EQ(padded->warnings.size(), 1u);
  EXPECT_EQ(padded->warnings[0], "page 1: its physical layout (columns padded with spaces) is larger than the limit of 4194304 bytes; its text is in content-stream order");
  EXPECT_EQ(count(padded->text(), "w"), 3000u);
  // Over the layout limit, the layout is not even tried.
  quarry::ExtractOptions opts = roomy;
  opts.max_page_layout_work = 1'000'000;
  auto doc = quarry::extract_bytes(pdf, "stairs.pdf", opts);
  ASSERT_TRUE(doc) << doc.error().reason;
  ASSERT_EQ(doc->warnings.size(), 1u);
  const std::string& w = doc->warnings[0];
  const std::string head = "page 1: too intricate for the layout analysis within its limits (3000 words, estimated cost ";
  ASSERT_EQ(w.rfind(head, 0), 0u) << w;
  EXPECT_NE(w.find("); its text is in content-stream order"), std::string::npos) << w;
  const std::uint64_t cost = std::stoull(w.substr(head.size()));
  EXPECT_GE(cost, 3000u * 3000u);  // every word is a fragment of its own
  const std::string text = doc->text();
  EXPECT_EQ(count(text, "w"), 3000u);
  EXPECT_EQ(text.find("w0\n"), 0u);  // content order: the first word drawn comes first
  // Line boxes come from the words in content order then.
  opts.pdf_line_bboxes = true;
  auto boxed = quarry::extract_bytes(pdf, "stairs.pdf", opts);
  ASSERT_TRUE(boxed) << boxed.error().reason;
  ASSERT_EQ(boxed->pages[0].lines.size(), 3000u);
  for (const auto& line : boxed->pages[0].lines) {
    ASSERT_TRUE(line.bbox.has_value()) << line.text;
    EXPECT_LT(line.bbox->x0, line.bbox->x1);
  }
  EXPECT_LT(boxed->pages[0].lines[0].bbox->y0, boxed->pages[0].lines[1].bbox->y0);  // w0 above w1

  // The document's budget: of 4 such pages under a budget of 2.5 pages, the last 2 are in content order.
  Doc four;
  const int content = four.b.add_stream("/Filter /FlateDecode", deflate(page));
  for (int i = 0; i < 4; ++i) four.page(content);
  quarry::ExtractOptions doc_opts = roomy;  // (without the word pass, which is charged too)
  doc_opts.max_layout_work = cost * 5 / 2;
  auto many = quarry::extract_bytes(four.finish(), "stairs4.pdf", doc_opts);
  ASSERT_TRUE(many) << many.error().reason;
  ASSERT_EQ(many->warnings.size(), 2u);
  EXPECT_EQ(many->warnings[0].rfind("page 3: too intricate", 0), 0u) << many->warnings[0];
  EXPECT_EQ(many->warnings[1].rfind("page 4: too intricate", 0), 0u) << many->warnings[1];
}

// A Type 1 font whose program inflates to 1 GiB, listed by 5 pages (it took 28 s and 1.1 GB): every
// page is skipped before poppler makes the font. A 1 MiB one under a 3 MiB font budget: 3 pages read.
TEST(PdfLimits, FontProgramsAreMeasuredAndCharged) {
  auto r = guarded(quarry::test::hostile::pdf_font_bomb(5, 1024));
  EXPECT_EQ(r.output, "error PDF has no extractable text within the limits (page 1 skipped: a font in its resources decodes "
                      "to more than the limit of 67108864 bytes)");
  quarry::ExtractOptions opts = ingest();
  opts.max_font_bytes = 3 << 20;
  auto doc = quarry::extract_bytes(quarry::test::hostile::pdf_font_bomb(5, 1), "fonts.pdf", opts);
  ASSERT_TRUE(doc) << doc.error().reason;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(doc->pages[i].lines.size(), 1u) << i;
  ASSERT_EQ(doc->warnings.size(), 2u);
  EXPECT_EQ(doc->warnings[0], "page 4 skipped: the document's fonts (read again for every page that lists them) decode to more than the limit of 3145728 bytes");
}

// A page tree nested 100,000 levels deep (poppler's walk of it is quadratic, and qpdf's recursive
// one overflows the stack): refused before any page is looked up. 200 levels are fine.
std::string chained_page_tree(int depth) {
  Builder b;
  const int font = b.add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>");
  const int content = b.add_stream("", "BT /F1 12 Tf 72 700 Td (deep page) Tj ET");
  const int root = b.reserve();
  int parent = root;
  std::vector<int> nodes;
  for (int i = 0; i < depth; ++i) nodes.push_back(b.reserve());
  const int page = b.reserve();
  for (int i = 0; i < depth; ++i) {
    const int kid = i + 1 < depth ? nodes[i + 1] : page;
    b.set(nodes[i], "<< /Type /Pages /Parent " + Builder::ref(parent) + " /Kids [" + Builder::ref(kid) + "] /Count 1 >>");
    parent = nodes[i];
  }
  b.set(page, "<< /Type /Page /Parent " + Builder::ref(parent) + " /MediaBox [0 0 612 792] /Resources << /Font << /F1 " +
                  Builder::ref(font) + " >> >> /Contents " + Builder::ref(content) + " >>");
  b.set(root, "<< /Type /Pages /Kids [" + Builder::ref(nodes.front()) + "] /Count 1 >>");
  return b.finish(b.add("<< /Type /Catalog /Pages " + Builder::ref(root) + " >>"));
}

TEST(PdfLimits, DeepPageTreeIsRefused) {
  auto shallow = quarry::extract_bytes(chained_page_tree(200), "tree.pdf", ingest());
  ASSERT_TRUE(shallow) << shallow.error().reason;
  EXPECT_EQ(shallow->text(), "deep page");
  auto r = guarded(chained_page_tree(100000));
  EXPECT_EQ(r.output, "error PDF refused: its page tree is nested deeper than 256 levels");
}

// The document's text limit still ends in an error, and is reached without reading further.
TEST(PdfLimits, DocumentTextLimitIsAnError) {
  Doc d;
  std::string page = "BT /F1 4 Tf\n";
  for (int i = 0; i < 100; ++i) page += "1 0 0 1 10 " + std::to_string(20 + 7 * i) + " Tm (" + std::string(120, 'z') + ") Tj\n";
  page += "ET\n";
  const int content = d.b.add_stream("/Filter /FlateDecode", deflate(page));
  for (int i = 0; i < 20; ++i) d.page(content);
  quarry::ExtractOptions opts = ingest();
  opts.max_text_bytes = 100 << 10;
  auto doc = quarry::extract_bytes(d.finish(), "long.pdf", opts);
  ASSERT_FALSE(doc);
  EXPECT_EQ(doc.error().reason, "extracted text larger than the limit of 102400 bytes");
}

}  // namespace
