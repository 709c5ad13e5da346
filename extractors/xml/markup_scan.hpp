// One linear pass over XML or HTML text, before libxml2 builds a tree, for what would make libxml2
// slow or large: element nesting, attributes per element (libxml2 2.9 checks each attribute against
// every earlier one of its element, quadratic: 100,000 attributes take minutes), elements and
// attributes in all (its tree costs ~300 bytes for each), and entity declarations (billion laughs).
//
// The scan follows the XML 1.0 lexical structure (W3C REC-xml, §2.5-2.8 and §3.1): comments, CDATA
// sections, processing instructions, the DOCTYPE with its internal subset, start tags with quoted
// attribute values, end tags and empty-element tags. For HTML it follows the WHATWG tokenizer's shape
// instead where it differs (attributes without values or with unquoted values, raw text of script and
// style up to their end tag, case-insensitive names) and does not count nesting (implied end tags make
// that the parser's business). It never fails on malformed input: what it cannot read is left to the
// parser, which reports it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace quarry::xml {

struct ScanLimits {
  int max_depth = 256;             ///< XML only: open elements at once
  int max_attributes = 256;        ///< attributes of one element
  std::uint64_t max_nodes = 1000000;  ///< elements and attributes in the whole text
  bool html = false;
};

struct ScanResult {
  enum Kind { ok, entity_declaration, too_deep, too_many_attributes, too_many_nodes } kind = ok;
  std::size_t line = 0;  ///< 1-based line of the offending markup (0 when ok)

  /// The problem in words, e.g. "XML element at line 3 has more than 256 attributes"; "" when ok.
  std::string message(std::string_view format, const ScanLimits& limits) const;
};

/// Scans `text` (UTF-8, or any encoding in which markup characters are ASCII) and returns the first
/// problem met, or ok. O(text.size()); reads nothing outside `text`.
ScanResult scan_markup(std::string_view text, const ScanLimits& limits);

}  // namespace quarry::xml
