// Dispatch: size limits, SHA-256, media type, the format's extractor, then the e-invoice mappers on
// the XML itself or on the XML files embedded in a PDF.
#include "extractors/extract.hpp"

#include <libxml/parser.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "extractors/einvoice/einvoice.hpp"
#include "extractors/formats.hpp"

namespace quarry {
namespace {

bool ends_with_xml(const std::string& name) {
  if (name.size() < 4) return false;
  std::string ext = name.substr(name.size() - 4);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".xml";
}

// Runs the e-invoice mappers on one XML. Returns true when it was an e-invoice and was mapped.
bool map_einvoice(Document& doc, std::string_view xml, const std::string& source, const ExtractOptions& opts) {
  try {
    auto r = einvoice::map_xml(xml, source, opts);
    if (!r) {
      doc.warnings.push_back("e-invoice " + source + " could not be mapped: " + r.error().reason);
      return false;
    }
    if (!*r) return false;
    doc.einvoice = std::move((*r)->invoice);
    doc.einvoice_format = std::move((*r)->format);
    return true;
  } catch (const std::exception& e) {
    doc.warnings.push_back("e-invoice " + source + " could not be mapped: " + e.what());
    return false;
  }
}

Expected<Document> run(std::string_view bytes, const std::string& source, const ExtractOptions& opts) {
  // libxml2's one-time set-up is not thread-safe when it happens lazily inside parallel parses.
  static std::once_flag xml_init;
  std::call_once(xml_init, xmlInitParser);
  if (bytes.empty()) return tl::unexpected(ExtractError{source, "empty file"});
  if (bytes.size() > opts.max_file_bytes)
    return tl::unexpected(ExtractError{source, "file is " + std::to_string(bytes.size()) +
                                                   " bytes, larger than the limit of " +
                                                   std::to_string(opts.max_file_bytes)});
  Document doc;
  doc.source = source;
  doc.size_bytes = bytes.size();
  doc.sha256 = sha256_hex(bytes);
  doc.media_type = detect_media_type(bytes, source);
  const std::string mt = doc.media_type;
  Expected<Document> r;
  if (mt == "application/pdf") {
    r = detail::extract_pdf(bytes, std::move(doc), opts);
  } else if (mt == "text/html") {
    r = detail::extract_html(bytes, std::move(doc), opts);
  } else if (mt == "application/xml") {
    r = detail::extract_xml(bytes, std::move(doc), opts);
  } else if (mt == "text/plain" || mt == "text/markdown") {
    r = detail::extract_text(bytes, std::move(doc), opts);
  } else {
    return tl::unexpected(ExtractError{source, "unsupported file type: binary content that is not PDF, HTML, XML or text"});
  }
  if (!r || !opts.map_einvoices) return r;
  if (mt == "application/xml") {
    map_einvoice(*r, bytes, source, opts);
  } else if (mt == "application/pdf") {
    for (const Attachment& a : r->attachments) {
      if (!ends_with_xml(a.name) && a.media_type != "application/xml" && a.media_type != "text/xml") continue;
      if (map_einvoice(*r, a.bytes, source + "#" + a.name, opts)) break;
    }
  }
  return r;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL EVP_Digest(SHA-256) failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

Expected<std::string> read_file_bytes(const std::filesystem::path& path, const ExtractOptions& opts) {
  const std::string name = path.string();
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return tl::unexpected(ExtractError{name, "no such file"});
  if (std::filesystem::is_directory(st)) return tl::unexpected(ExtractError{name, "is a directory"});
  if (!std::filesystem::is_regular_file(st)) return tl::unexpected(ExtractError{name, "not a regular file"});
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return tl::unexpected(ExtractError{name, "cannot get the size: " + ec.message()});
  if (size > opts.max_file_bytes)
    return tl::unexpected(ExtractError{name, "file is " + std::to_string(size) +
                                                 " bytes, larger than the limit of " +
                                                 std::to_string(opts.max_file_bytes)});
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(name.c_str(), "rb"), std::fclose);
  if (!f) return tl::unexpected(ExtractError{name, std::string("cannot open: ") + std::strerror(errno)});
  std::string bytes(size, '\0');
  const std::size_t got = size ? std::fread(bytes.data(), 1, size, f.get()) : 0;
  if (got != size) {
    if (std::ferror(f.get()))
      return tl::unexpected(ExtractError{name, std::string("read error: ") + std::strerror(errno)});
    bytes.resize(got);  // the file shrank while being read
  }
  return bytes;
}

Expected<Document> extract_bytes(std::string_view bytes, const std::string& source, const ExtractOptions& opts) {
  try {
    return run(bytes, source, opts);
  } catch (const std::bad_alloc&) {
    return tl::unexpected(ExtractError{source, "out of memory"});
  } catch (const std::exception& e) {
    return tl::unexpected(ExtractError{source, std::string("internal error: ") + e.what()});
  }
}

Expected<Document> extract_file(const std::filesystem::path& path, const ExtractOptions& opts) {
  auto bytes = read_file_bytes(path, opts);
  if (!bytes) return tl::unexpected(bytes.error());
  return extract_bytes(*bytes, path.string(), opts);
}

}  // namespace quarry
