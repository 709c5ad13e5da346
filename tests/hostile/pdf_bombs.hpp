// Generators of hostile PDFs, made at test time (nothing big in git): small files whose Flate
// streams inflate to hundreds of MB or GB (zlib deflate of a repeated pattern: about 1000:1).
//
//   content_stream_bomb: `pages` pages that all draw one content stream of `inflated` bytes of path
//                        operators (parsing it takes minutes: a time bomb; memory stays low)
//   text_bomb:           one page whose content stream shows `inflated` bytes of text (Tj of 8,000
//                        characters per line, all inside the page: a memory bomb for a text
//                        extractor; poppler's TextOutputDev keeps about 100 bytes per character)
//   attachment_bomb:     an ordinary one-page PDF with an embedded file that inflates to `inflated`
//                        bytes while its /Params /Size says 100 (never trust /Size)
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace quarry::test_hostile {

/// zlib stream (RFC 1950) of `prefix`, then `unit` repeated for `repeat_bytes` bytes (the last copy
/// cut short), then `suffix`.
inline std::string deflate_pattern(const std::string& prefix, const std::string& unit, std::uint64_t repeat_bytes,
                                   const std::string& suffix, int level = 9) {
  std::string chunk;
  while (chunk.size() < (1u << 20)) chunk += unit;
  chunk.resize((1u << 20) - (1u << 20) % unit.size());
  z_stream z{};
  if (deflateInit(&z, level) != Z_OK) throw std::runtime_error("deflateInit");
  std::string out;
  std::vector<unsigned char> buf(1 << 16);
  const auto feed = [&](const char* p, std::size_t n, int flush) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(p));
    z.avail_in = static_cast<uInt>(n);
    int rc;
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      rc = deflate(&z, flush);
      out.append(reinterpret_cast<char*>(buf.data()), buf.size() - z.avail_out);
    } while (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
  };
  feed(prefix.data(), prefix.size(), Z_NO_FLUSH);
  for (std::uint64_t left = repeat_bytes; left > 0;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
    feed(chunk.data(), n, Z_NO_FLUSH);
    left -= n;
  }
  feed(suffix.data(), suffix.size(), Z_FINISH);
  deflateEnd(&z);
  return out;
}

/// A PDF writer: objects in order, then the cross-reference table.
class PdfWriter {
 public:
  PdfWriter() { out_ = "%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"; }
  /// Adds object number (objects so far + 1) with `body` (without "N 0 obj" / "endobj"); returns its number.
  int add(const std::string& body) {
    offsets_.push_back(out_.size());
    const int n = static_cast<int>(offsets_.size());
    out_ += std::to_string(n) + " 0 obj\n" + body + "\nendobj\n";
    return n;
  }
  int add_stream(const std::string& dict_entries, const std::string& data) {
    return add("<< " + dict_entries + " /Length " + std::to_string(data.size()) + " >>\nstream\n" + data +
               "\nendstream");
  }
  void write(const std::filesystem::path& path, int root) {
    const std::size_t xref = out_.size();
    out_ += "xref\n0 " + std::to_string(offsets_.size() + 1) + "\n0000000000 65535 f \n";
    char line[32];
    for (auto off : offsets_) {
      std::snprintf(line, sizeof line, "%010zu 00000 n \n", off);
      out_ += line;
    }
    out_ += "trailer\n<< /Size " + std::to_string(offsets_.size() + 1) + " /Root " + std::to_string(root) +
            " 0 R >>\nstartxref\n" + std::to_string(xref) + "\n%%EOF\n";
    std::ofstream(path, std::ios::binary) << out_;
  }

 private:
  std::string out_;
  std::vector<std::size_t> offsets_;
};

namespace detail {
inline const char* k_font = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>";
inline std::string page(int parent, int font, int contents) {
  return "<< /Type /Page /Parent " + std::to_string(parent) +
         " 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 " + std::to_string(font) +
         " 0 R >> >> /Contents " + std::to_string(contents) + " 0 R >>";
}
}  // namespace detail

inline void content_stream_bomb(const std::filesystem::path& path, int pages, std::uint64_t inflated) {
  PdfWriter w;
  // 1 catalog, 2 page tree, 3 font, 4 the shared content stream, 5... the pages
  w.add("<< /Type /Catalog /Pages 2 0 R >>");
  std::string kids;
  for (int i = 0; i < pages; ++i) kids += std::to_string(5 + i) + " 0 R ";
  w.add("<< /Type /Pages /Kids [" + kids + "] /Count " + std::to_string(pages) + " >>");
  w.add(detail::k_font);
  w.add_stream("/Filter /FlateDecode",
               deflate_pattern("BT /F1 12 Tf 72 720 Td (Invoice) Tj ET\n", "0 0 m 1 1 l S\n", inflated, ""));
  for (int i = 0; i < pages; ++i) w.add(detail::page(2, 3, 4));
  w.write(path, 1);
}

inline void text_bomb(const std::filesystem::path& path, std::uint64_t inflated) {
  // Lines of 8,000 'W' at 5 pt (4.7 pt each: above the 3 pt under which poppler drops "tiny" characters
  // after 50,000), on a page tall and wide enough to hold them all (text outside the page is dropped).
  const std::string line = "(" + std::string(8000, 'W') + ") Tj T*\n";
  const std::uint64_t lines = inflated / line.size() + 1;
  const std::string height = std::to_string(lines * 5 + 100);
  PdfWriter w;
  w.add("<< /Type /Catalog /Pages 2 0 R >>");
  w.add("<< /Type /Pages /Kids [5 0 R] /Count 1 >>");
  w.add(detail::k_font);
  w.add_stream("/Filter /FlateDecode",
               deflate_pattern("BT /F1 5 Tf 5 TL 10 " + std::to_string(lines * 5 + 50) + " Td\n", line, inflated, "ET\n"));
  w.add("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 40000 " + height +
        "] /Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>");
  w.write(path, 1);
}

inline void attachment_bomb(const std::filesystem::path& path, std::uint64_t inflated) {
  PdfWriter w;
  // 1 catalog, 2 page tree, 3 font, 4 contents, 5 page, 6 file spec, 7 embedded file
  w.add("<< /Type /Catalog /Pages 2 0 R /Names << /EmbeddedFiles << /Names [(factur-x.xml) 6 0 R] >> >> >>");
  w.add("<< /Type /Pages /Kids [5 0 R] /Count 1 >>");
  w.add(detail::k_font);
  w.add_stream("", "BT /F1 12 Tf 72 720 Td (Invoice 2024-17, total 120.00 EUR) Tj ET");
  w.add(detail::page(2, 3, 4));
  w.add("<< /Type /Filespec /F (factur-x.xml) /UF (factur-x.xml) /EF << /F 7 0 R >> >>");
  w.add_stream("/Type /EmbeddedFile /Subtype /text#2Fxml /Params << /Size 100 >> /Filter /FlateDecode",
               deflate_pattern("<?xml version=\"1.0\"?><a>", "                ", inflated, "</a>"));
  w.write(path, 1);
}

}  // namespace quarry::test_hostile
