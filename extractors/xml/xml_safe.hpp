// Hardened libxml2 parsing shared by the XML extractor and the e-invoice mappers.
//
// The bytes are decoded to UTF-8 first (byte order mark, the first characters' byte pattern, or the
// encoding the XML declaration names; W3C REC-xml Appendix F), so that every guard sees characters
// whatever the encoding: a UTF-16 billion laughs is refused like a UTF-8 one, a UTF-16 invoice parses
// like its UTF-8 copy. Then one linear scan (markup_scan.hpp) refuses entity declarations in the
// internal DTD subset (billion laughs, XXE), nesting deeper than the limit, elements with too many
// attributes (libxml2 2.9 checks attributes pairwise) and documents with too many elements and
// attributes (memory), before libxml2 builds a tree. libxml2 itself runs with no network
// (XML_PARSE_NONET), no DTD loading, no entity substitution (XML_PARSE_NOENT is never set, so &xxe;
// stays a reference), no XInclude, and its own limits on (no XML_PARSE_HUGE).
#pragma once

#include <libxml/tree.h>

#include <memory>
#include <string>
#include <string_view>

#include "extractors/document.hpp"
#include "extractors/formats.hpp"

namespace quarry::xml {

struct DocDeleter {
  void operator()(xmlDoc* d) const { xmlFreeDoc(d); }
};
using DocPtr = std::unique_ptr<xmlDoc, DocDeleter>;

/// Parses `bytes` as XML with the hardening above. `source` names the input in error messages.
/// Errors: malformed XML (with line number), an encoding that is unknown or does not decode, entity
/// declarations, nesting deeper than opts.max_xml_depth, an element with more than
/// opts.max_xml_attributes attributes, more than opts.max_xml_nodes elements and attributes (each
/// with its line), input larger than opts.max_file_bytes.
Expected<DocPtr> parse(std::string_view bytes, const std::string& source, const ExtractOptions& opts);

/// XML bytes decoded to UTF-8 (byte order mark stripped) and the encoding they were in: UTF-8,
/// UTF-16LE/BE, UTF-32LE/BE (by byte order mark or by the bytes of the first character), or the
/// encoding the XML declaration names (converted with iconv). Errors: an encoding iconv does not know,
/// or bytes that are not in it (with the byte offset).
Expected<detail::Decoded> to_utf8(std::string_view bytes, const std::string& source);

/// Local name of an element (namespace prefix stripped), "" for null.
std::string_view local_name(const xmlNode* n);

/// Concatenated text content of a node, whitespace-trimmed.
std::string text(const xmlNode* n);

/// First child element with the given local name (any namespace), or nullptr.
xmlNode* child(const xmlNode* n, std::string_view local);

/// Follows a path of local names ("AccountingSupplierParty/Party/PartyName/Name"), or nullptr.
xmlNode* path(const xmlNode* n, std::string_view slash_separated_locals);

/// Attribute value by local name, "" if absent.
std::string attr(const xmlNode* n, std::string_view local);

}  // namespace quarry::xml
