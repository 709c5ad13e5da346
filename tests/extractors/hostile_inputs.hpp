// The hostile inputs of the extractor hardening, made at run time (tests/extractors and
// bench/ingest/bench_hostile use the same ones): each is a few MB at most, however much it expands to.
#pragma once

#include <iconv.h>

#include <stdexcept>
#include <string>

#include "tests/extractors/pdf_gen.hpp"

namespace quarry::test::hostile {

using pdfgen::Builder;
using pdfgen::deflate;
using pdfgen::deflate_repeated;
using pdfgen::Doc;

/// `pages` pages sharing one content stream that inflates to `mib` MiB: a line of text, then spaces.
inline std::string pdf_shared_content(int pages = 10, std::uint64_t mib = 1024) {
  Doc d;
  const std::string head = "BT /F1 12 Tf 72 720 Td (shared page) Tj ET\n";
  const std::string unit = head + std::string((1 << 20) - head.size(), ' ');
  const int content = d.b.add_stream("/Filter /FlateDecode", deflate_repeated(unit, mib));
  for (int i = 0; i < pages; ++i) d.page(content);
  return d.finish();
}

/// One page that shows `uses` x 38 KB of text (400 MB by default) by drawing one form XObject again and again.
inline std::string pdf_text_through_form(int uses = 10000) {
  Doc d;
  std::string form = "BT /F1 8 Tf\n";
  for (int i = 0; i < 400; ++i) form += "1 0 0 1 10 " + std::to_string(10 + i) + " Tm (" + std::string(95, 'x') + ") Tj\n";
  form += "ET\n";
  const int fm = d.b.add_stream("/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 " +
                                    Builder::ref(d.font) + " >> >> /Filter /FlateDecode",
                                deflate(form));
  std::string page = "BT /F1 12 Tf 72 740 Td (title) Tj ET\n";
  for (int i = 0; i < uses; ++i) page += "/Fm Do\n";
  d.page(d.b.add_stream("/Filter /FlateDecode", deflate(page)), "", "/XObject << /Fm " + Builder::ref(fm) + " >>");
  return d.finish();
}

/// One page whose single content stream shows `mib` MiB of text (400 by default: 1.4 MB of file) in
/// 1 MiB repeats.
inline std::string pdf_text_in_stream(std::uint64_t mib = 400) {
  Doc d;
  std::string unit = "BT /F1 8 Tf\n";
  while (unit.size() < (1 << 20)) unit += "1 0 0 1 10 20 Tm (" + std::string(100, 'y') + ") Tj\n";
  unit += "ET\n";
  d.page(d.b.add_stream("/Filter /FlateDecode", deflate_repeated(unit, (mib << 20) / unit.size())));
  return d.finish();
}

/// A one-page PDF embedding (EmbeddedFiles name tree) bomb.xml (/Params /Size 100, inflating to `mib`
/// MiB) and ok.xml (5 bytes).
inline std::string pdf_attachment_bomb(std::uint64_t mib = 1024) {
  Doc d;
  const int content = d.text_content("Invoice 42");
  const int big_ef = d.b.add_stream("/Type /EmbeddedFile /Subtype /text#2Fxml /Params << /Size 100 >> /Filter /FlateDecode",
                                    deflate_repeated(std::string(1 << 20, '<'), mib));
  const int big = d.b.add("<< /Type /Filespec /F (bomb.xml) /EF << /F " + Builder::ref(big_ef) + " >> >>");
  const int ok_ef = d.b.add_stream("/Type /EmbeddedFile /Subtype /text#2Fxml /Filter /FlateDecode", deflate("<ok/>"));
  const int ok = d.b.add("<< /Type /Filespec /F (ok.xml) /EF << /F " + Builder::ref(ok_ef) + " >> >>");
  d.catalog_extra = "/Names << /EmbeddedFiles << /Names [(bomb.xml) " + Builder::ref(big) + " (ok.xml) " + Builder::ref(ok) +
                    "] >> >>";
  d.page(content);
  return d.finish();
}

/// `pages` pages whose resources list one embedded Type 1 font whose program inflates to `mib` MiB
/// (poppler reads a Type 1 program whole each time it makes the font: for every page).
inline std::string pdf_font_bomb(int pages = 5, std::uint64_t mib = 1024) {
  Builder b;
  const int program = b.add_stream("/Length1 100 /Length2 0 /Length3 0 /Filter /FlateDecode",
                                   deflate_repeated(std::string(1 << 20, ' '), mib));
  const int descriptor = b.add("<< /Type /FontDescriptor /FontName /Bomb /Flags 32 /FontBBox [0 0 1000 1000] /ItalicAngle 0 "
                               "/Ascent 800 /Descent -200 /CapHeight 700 /StemV 80 /FontFile " + Builder::ref(program) + " >>");
  std::string widths;
  for (int c = 32; c <= 126; ++c) widths += "500 ";
  const int font = b.add("<< /Type /Font /Subtype /Type1 /BaseFont /Bomb /FirstChar 32 /LastChar 126 /Widths [" + widths +
                         "] /FontDescriptor " + Builder::ref(descriptor) + " >>");
  const int content = b.add_stream("", "BT /F1 12 Tf 72 700 Td (font page) Tj ET");
  const int root = b.reserve();
  std::string kids;
  for (int i = 0; i < pages; ++i)
    kids += Builder::ref(b.add("<< /Type /Page /Parent " + Builder::ref(root) + " /MediaBox [0 0 612 792] /Resources << /Font << /F1 " +
                               Builder::ref(font) + " >> >> /Contents " + Builder::ref(content) + " >>")) + " ";
  b.set(root, "<< /Type /Pages /Kids [" + kids + "] /Count " + std::to_string(pages) + " >>");
  return b.finish(b.add("<< /Type /Catalog /Pages " + Builder::ref(root) + " >>"));
}

/// An XML or HTML element with `n` attributes.
inline std::string many_attributes(int n, bool html) {
  std::string x = html ? "<!DOCTYPE html><html><body><div" : "<?xml version=\"1.0\"?>\n<r";
  for (int i = 0; i < n; ++i) x += " a" + std::to_string(i) + "=\"" + std::to_string(i) + "\"";
  return x + (html ? ">text</div></body></html>" : ">text</r>");
}

/// `n` one-word paragraphs (XML or HTML): 8 bytes each, ~40 MB for 5 million.
inline std::string many_elements(int n, bool html) {
  std::string x = html ? "<html><body>" : "<r>";
  x.reserve(static_cast<std::size_t>(n) * 8 + 32);
  for (int i = 0; i < n; ++i) x += "<p>x</p>";
  return x + (html ? "</body></html>" : "</r>");
}

/// The billion laughs (W3C-style nested entities: 10^9 "lol"), declaring `declared` as its encoding.
inline std::string billion_laughs(const std::string& declared = "UTF-8") {
  std::string x = "<?xml version=\"1.0\" encoding=\"" + declared + "\"?>\n<!DOCTYPE lolz [\n<!ENTITY lol \"lol\">\n";
  for (int i = 1; i <= 9; ++i) {
    x += "<!ENTITY lol" + std::to_string(i) + " \"";
    for (int k = 0; k < 10; ++k) x += "&lol" + (i == 1 ? std::string() : std::to_string(i - 1)) + ";";
    x += "\">\n";
  }
  return x + "]>\n<lolz>&lol9;</lolz>\n";
}

/// UTF-8 to another encoding (an iconv name), with glibc's iconv.
inline std::string encode(const std::string& utf8, const char* to) {
  iconv_t cd = iconv_open(to, "UTF-8");
  if (cd == reinterpret_cast<iconv_t>(-1)) throw std::runtime_error(std::string("iconv_open ") + to);
  std::string out(utf8.size() * 4 + 16, '\0');
  char* in = const_cast<char*>(utf8.data());
  std::size_t in_left = utf8.size(), out_left = out.size();
  char* o = out.data();
  const std::size_t r = iconv(cd, &in, &in_left, &o, &out_left);
  iconv_close(cd);
  if (r == static_cast<std::size_t>(-1)) throw std::runtime_error(std::string("cannot encode in ") + to);
  out.resize(out.size() - out_left);
  return out;
}

/// A billion laughs in UTF-16LE with its byte order mark.
inline std::string billion_laughs_utf16() { return "\xFF\xFE" + encode(billion_laughs("UTF-16"), "UTF-16LE"); }

}  // namespace quarry::test::hostile
