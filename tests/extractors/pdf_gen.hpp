// PDFs written at test time, byte by byte (PDF 1.7 syntax, ISO 32000-1 §7.5: objects, a classic
// cross-reference table and a trailer), with zlib for FlateDecode streams. Hostile inputs (a GiB of
// content in 1 MB, a file that inflates to a GiB) are built without ever holding the inflated bytes:
// one deflate block that is flushed (so it refers to nothing before it) is repeated, and the Adler-32
// of the whole is combined from the block's (zlib's adler32_combine).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

namespace quarry::test::pdfgen {

/// zlib (RFC 1950) stream of `data`, for /FlateDecode.
inline std::string deflate(std::string_view data) {
  uLongf n = compressBound(static_cast<uLong>(data.size()));
  std::string out(n, '\0');
  if (compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(data.data()),
                static_cast<uLong>(data.size()), 9) != Z_OK)
    throw std::runtime_error("compress2 failed");
  out.resize(n);
  return out;
}

/// zlib stream that inflates to `unit` repeated `times` times (e.g. 1 MiB x 1024 = 1 GiB), whose size
/// is about `times` x (the deflated size of `unit`).
inline std::string deflate_repeated(std::string_view unit, std::uint64_t times) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  std::string block(deflateBound(&z, static_cast<uLong>(unit.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(unit.data()));
  z.avail_in = static_cast<uInt>(unit.size());
  z.next_out = reinterpret_cast<Bytef*>(block.data());
  z.avail_out = static_cast<uInt>(block.size());
  if (deflate(&z, Z_FULL_FLUSH) != Z_OK || z.avail_in != 0) throw std::runtime_error("deflate");
  block.resize(block.size() - z.avail_out);
  deflateEnd(&z);
  // Adler-32 of the repetition, by doubling.
  const uLong unit_adler = adler32(adler32(0, nullptr, 0), reinterpret_cast<const Bytef*>(unit.data()), static_cast<uInt>(unit.size()));
  uLong total = adler32(0, nullptr, 0), power = unit_adler;
  z_off_t power_len = static_cast<z_off_t>(unit.size());
  bool first = true;
  for (std::uint64_t t = times; t; t >>= 1) {
    if (t & 1) {
      total = first ? power : adler32_combine(total, power, power_len);
      first = false;
    }
    power = adler32_combine(power, power, power_len);
    power_len *= 2;
  }
  std::string out = "\x78\x9c";
  out.reserve(2 + block.size() * times + 6);
  for (std::uint64_t i = 0; i < times; ++i) out += block;
  out += std::string("\x03\x00", 2);  // an empty final block with fixed codes
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((total >> s) & 0xFF);
  return out;
}

/// Objects by number; finish() writes the file.
class Builder {
 public:
  /// Adds an object whose body (between "N 0 obj" and "endobj") is `body`; returns its number.
  int add(std::string body) {
    objects_[next_] = std::move(body);
    return next_++;
  }
  /// Sets the body of object `num` (reserved earlier with reserve()).
  void set(int num, std::string body) { objects_[num] = std::move(body); }
  int reserve() { return add("null"); }
  /// A stream object: `dict` holds the entries besides /Length (e.g. "/Filter /FlateDecode").
  int add_stream(const std::string& dict, std::string_view data) {
    return add("<< " + dict + " /Length " + std::to_string(data.size()) + " >>\nstream\n" + std::string(data) + "\nendstream");
  }
  static std::string ref(int num) { return std::to_string(num) + " 0 R"; }

  std::string finish(int root) const {
    std::string out = "%PDF-1.7\n%\xE2\xE3\xCF\xD3\n";
    std::map<int, std::size_t> offsets;
    for (const auto& [num, body] : objects_) {
      offsets[num] = out.size();
      out += std::to_string(num) + " 0 obj\n" + body + "\nendobj\n";
    }
    const std::size_t xref = out.size();
    out += "xref\n0 " + std::to_string(next_) + "\n0000000000 65535 f \n";
    for (int i = 1; i < next_; ++i) {
      char line[24];
      std::snprintf(line, sizeof line, "%010zu 00000 n \n", offsets.at(i));
      out += line;
    }
    out += "trailer\n<< /Size " + std::to_string(next_) + " /Root " + ref(root) + " >>\nstartxref\n" +
           std::to_string(xref) + "\n%%EOF\n";
    return out;
  }

 private:
  std::map<int, std::string> objects_;
  int next_ = 1;
};

/// A document whose pages are given by their content stream object numbers (the same stream may be
/// used by several pages) and extra page dictionary entries; Helvetica is /F1 in every page's resources.
struct Doc {
  Builder b;
  int pages = b.reserve();
  int font = b.add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>");
  std::string kids;
  int count = 0;
  std::string catalog_extra;

  int page(int content, const std::string& extra = "", const std::string& resources_extra = "") {
    const int p = b.add("<< /Type /Page /Parent " + Builder::ref(pages) + " /MediaBox [0 0 612 792] /Resources << /Font << /F1 " +
                        Builder::ref(font) + " >> " + resources_extra + " >> /Contents " + Builder::ref(content) + " " + extra + " >>");
    kids += Builder::ref(p) + " ";
    ++count;
    return p;
  }
  /// A content stream showing `text` (PDF string syntax, escaped by the caller) at the top of the page.
  int text_content(const std::string& text) {
    return b.add_stream("/Filter /FlateDecode", deflate("BT /F1 12 Tf 72 720 Td (" + text + ") Tj ET\n"));
  }
  std::string finish() {
    b.set(pages, "<< /Type /Pages /Kids [" + kids + "] /Count " + std::to_string(count) + " >>");
    const int root = b.add("<< /Type /Catalog /Pages " + Builder::ref(pages) + " " + catalog_extra + " >>");
    return b.finish(root);
  }
};

}  // namespace quarry::test::pdfgen
