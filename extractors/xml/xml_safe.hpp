// Hardened libxml2 parsing shared by the XML extractor and the e-invoice mappers.
//
// No network (XML_PARSE_NONET), no DTD loading, no entity substitution (XML_PARSE_NOENT is never
// set, so &xxe; stays a reference and external entities are never fetched), no XInclude, a DOCTYPE
// with an internal subset that declares entities is refused outright (billion laughs), and the
// element nesting depth and the input size are limited before the tree is built.
#pragma once

#include <libxml/tree.h>

#include <memory>
#include <string>
#include <string_view>

#include "extractors/document.hpp"

namespace quarry::xml {

struct DocDeleter {
  void operator()(xmlDoc* d) const { xmlFreeDoc(d); }
};
using DocPtr = std::unique_ptr<xmlDoc, DocDeleter>;

/// Parses `bytes` as XML with the hardening above. `source` names the input in error messages.
/// Errors: malformed XML (with line number), entity declarations, nesting deeper than
/// opts.max_xml_depth, input larger than opts.max_file_bytes.
Expected<DocPtr> parse(std::string_view bytes, const std::string& source, const ExtractOptions& opts);

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
