#include "extractors/xml/xml_safe.hpp"

#include <libxml/parser.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "extractors/formats.hpp"
#include "extractors/xml/markup_scan.hpp"

namespace quarry::xml {

using detail::Decoded;

namespace {

std::string trim(std::string s) {
  auto sp = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!s.empty() && sp(s.back())) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && sp(s[i])) ++i;
  return s.substr(i);
}

std::string lower(std::string_view s) {
  std::string r(s);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
  return r;
}

// The encoding="..." of an XML declaration at the very start of ASCII-compatible bytes; "" if none.
std::string declared_encoding(std::string_view b) {
  if (!b.starts_with("<?xml")) return {};
  const std::size_t end = b.find("?>");
  const std::string_view decl = b.substr(0, end == std::string_view::npos ? std::min<std::size_t>(b.size(), 256) : end);
  std::size_t at = decl.find("encoding");
  if (at == std::string_view::npos) return {};
  at = decl.find_first_of("\"'", at);
  if (at == std::string_view::npos) return {};
  const std::size_t close = decl.find(decl[at], at + 1);
  if (close == std::string_view::npos) return {};
  return std::string(decl.substr(at + 1, close - at - 1));
}

}  // namespace

Expected<Decoded> to_utf8(std::string_view b, const std::string& source) {
  auto convert = [&](std::string_view bytes, const char* enc) -> Expected<Decoded> {
    auto r = detail::iconv_to_utf8(bytes, enc, source);
    if (!r) return tl::unexpected(ExtractError{source, "XML in " + std::string(enc) + " cannot be decoded: " + r.error().reason});
    return Decoded{std::move(*r), enc};
  };
  // Byte order marks, then the first characters' byte pattern (W3C REC-xml, Appendix F.1).
  if (b.starts_with(std::string_view("\xFF\xFE\x00\x00", 4))) return convert(b.substr(4), "UTF-32LE");
  if (b.starts_with(std::string_view("\x00\x00\xFE\xFF", 4))) return convert(b.substr(4), "UTF-32BE");
  if (b.starts_with("\xFF\xFE")) return convert(b.substr(2), "UTF-16LE");
  if (b.starts_with("\xFE\xFF")) return convert(b.substr(2), "UTF-16BE");
  if (b.starts_with("\xEF\xBB\xBF")) return Decoded{std::string(b.substr(3)), "UTF-8"};
  if (b.size() >= 4) {
    if (b[0] != 0 && b[1] == 0 && b[2] == 0 && b[3] == 0) return convert(b, "UTF-32LE");
    if (b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] != 0) return convert(b, "UTF-32BE");
    if (b[0] != 0 && b[1] == 0 && b[3] == 0) return convert(b, "UTF-16LE");
    if (b[0] == 0 && b[1] != 0 && b[2] == 0) return convert(b, "UTF-16BE");
  }
  // ASCII-compatible: as declared, UTF-8 when nothing is (an 8-bit document labelled UTF-16 is read
  // as UTF-8 too, as libxml2 does).
  const std::string enc = declared_encoding(b);
  const std::string l = lower(enc);
  if (enc.empty() || l == "utf-8" || l == "utf8" || l == "us-ascii" || l == "ascii" || l.starts_with("utf-16"))
    return Decoded{std::string(b), "UTF-8"};
  auto r = detail::iconv_to_utf8(b, enc.c_str(), source);
  if (!r) return tl::unexpected(ExtractError{source, "XML declares encoding " + enc + ": " + r.error().reason});
  return Decoded{std::move(*r), enc};
}

Expected<DocPtr> parse(std::string_view bytes, const std::string& source, const ExtractOptions& opts) {
  if (bytes.size() > opts.max_file_bytes)
    return tl::unexpected(ExtractError{source, "XML larger than the limit of " +
                                                   std::to_string(opts.max_file_bytes) + " bytes"});
  if (bytes.empty()) return tl::unexpected(ExtractError{source, "empty file"});
  // Decoded first, so that the guards below see characters, whatever the encoding.
  auto text = to_utf8(bytes, source);
  if (!text) return tl::unexpected(text.error());
  const ScanLimits limits{opts.max_xml_depth, opts.max_xml_attributes, opts.max_xml_nodes, false};
  if (const ScanResult scan = scan_markup(text->utf8, limits); scan.kind != ScanResult::ok)
    return tl::unexpected(ExtractError{source, scan.message("XML", limits)});
  if (text->utf8.size() > static_cast<std::size_t>(INT32_MAX))
    return tl::unexpected(ExtractError{source, "XML larger than 2 GiB once decoded"});

  xmlParserCtxtPtr ctxt = xmlNewParserCtxt();
  if (!ctxt) return tl::unexpected(ExtractError{source, "out of memory creating the XML parser"});
  // The text is UTF-8 now: the declaration's encoding is ignored. libxml2's own limits stay on (no
  // XML_PARSE_HUGE: depth, name and text node sizes), no DTD is loaded, entities are not substituted.
  const int options = XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA |
                      XML_PARSE_IGNORE_ENC;
  xmlDoc* doc = xmlCtxtReadMemory(ctxt, text->utf8.data(), static_cast<int>(text->utf8.size()), source.c_str(),
                                  "UTF-8", options);
  std::string reason;
  if (!doc) {
    const xmlError* err = xmlCtxtGetLastError(ctxt);
    reason = "malformed XML";
    if (err) {
      std::string msg = err->message ? trim(err->message) : "";
      reason += " at line " + std::to_string(err->line) + ": " + msg;
    }
  }
  xmlFreeParserCtxt(ctxt);
  if (!doc) return tl::unexpected(ExtractError{source, reason});
  if (!xmlDocGetRootElement(doc)) {
    xmlFreeDoc(doc);
    return tl::unexpected(ExtractError{source, "XML has no root element"});
  }
  return DocPtr(doc);
}

std::string_view local_name(const xmlNode* n) {
  if (!n || !n->name) return {};
  return reinterpret_cast<const char*>(n->name);
}

std::string text(const xmlNode* n) {
  if (!n) return {};
  xmlChar* c = xmlNodeGetContent(n);
  if (!c) return {};
  std::string s(reinterpret_cast<const char*>(c));
  xmlFree(c);
  return trim(std::move(s));
}

xmlNode* child(const xmlNode* n, std::string_view local) {
  if (!n) return nullptr;
  for (xmlNode* c = n->children; c; c = c->next)
    if (c->type == XML_ELEMENT_NODE && local_name(c) == local) return c;
  return nullptr;
}

xmlNode* path(const xmlNode* n, std::string_view p) {
  const xmlNode* cur = n;
  while (cur && !p.empty()) {
    auto slash = p.find('/');
    cur = child(cur, p.substr(0, slash));
    p = slash == std::string_view::npos ? std::string_view{} : p.substr(slash + 1);
  }
  return const_cast<xmlNode*>(cur);
}

std::string attr(const xmlNode* n, std::string_view local) {
  if (!n) return {};
  for (xmlAttr* a = n->properties; a; a = a->next) {
    if (a->name && std::string_view(reinterpret_cast<const char*>(a->name)) == local) {
      xmlChar* v = xmlNodeListGetString(n->doc, a->children, 1);
      std::string s = v ? reinterpret_cast<const char*>(v) : "";
      if (v) xmlFree(v);
      return s;
    }
  }
  return {};
}

}  // namespace quarry::xml
