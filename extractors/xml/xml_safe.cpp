#include "extractors/xml/xml_safe.hpp"

#include <libxml/parser.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace quarry::xml {
namespace {

// Depth of element nesting from the raw bytes, stopping early once `limit` is exceeded. Run before
// libxml2 builds a tree so that a 10,000-deep input costs a linear scan and nothing more.
bool nesting_exceeds(std::string_view b, int limit) {
  int depth = 0;
  for (std::size_t i = 0; i + 1 < b.size(); ++i) {
    if (b[i] != '<') continue;
    char c = b[i + 1];
    if (c == '/') {
      if (depth > 0) --depth;
    } else if (c == '!' || c == '?') {
      continue;
    } else {
      // self-closing element: find the end of the tag
      std::size_t end = b.find('>', i + 1);
      if (end == std::string_view::npos) return false;  // truncated: let the parser report it
      if (b[end - 1] != '/') {
        if (++depth > limit) return true;
      }
      i = end;
    }
  }
  return false;
}

bool declares_entities(std::string_view b) {
  // An internal DTD subset that declares entities: refused (entity expansion attacks, XXE).
  return b.find("<!ENTITY") != std::string_view::npos;
}

std::string trim(std::string s) {
  auto sp = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!s.empty() && sp(s.back())) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && sp(s[i])) ++i;
  return s.substr(i);
}

}  // namespace

Expected<DocPtr> parse(std::string_view bytes, const std::string& source, const ExtractOptions& opts) {
  if (bytes.size() > opts.max_file_bytes)
    return tl::unexpected(ExtractError{source, "XML larger than the limit of " +
                                                   std::to_string(opts.max_file_bytes) + " bytes"});
  if (bytes.empty()) return tl::unexpected(ExtractError{source, "empty file"});
  if (declares_entities(bytes))
    return tl::unexpected(ExtractError{source, "XML declares entities in a DTD; refused (entity expansion / external entities are not allowed)"});
  if (nesting_exceeds(bytes, opts.max_xml_depth))
    return tl::unexpected(ExtractError{
        source, "XML nesting deeper than " + std::to_string(opts.max_xml_depth) + " elements"});

  xmlParserCtxtPtr ctxt = xmlNewParserCtxt();
  if (!ctxt) return tl::unexpected(ExtractError{source, "out of memory creating the XML parser"});
  const int options = XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA;
  xmlDoc* doc = xmlCtxtReadMemory(ctxt, bytes.data(), static_cast<int>(bytes.size()), source.c_str(),
                                  nullptr, options);
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
