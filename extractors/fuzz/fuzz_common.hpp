// Shared set-up of the libFuzzer targets: small limits so that one input costs milliseconds, and a
// Document shell as extract.cpp would make it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "extractors/formats.hpp"

namespace quarry::fuzz {

inline ExtractOptions options() {
  ExtractOptions o;
  o.max_file_bytes = 4 << 20;
  o.max_text_bytes = 4 << 20;
  o.max_pages = 50;
  o.max_page_text_bytes = 1 << 20;
  o.max_page_content_bytes = 8 << 20;
  o.max_content_bytes = 16 << 20;
  o.max_attachment_bytes = 4 << 20;
  o.max_attachments_total_bytes = 8 << 20;
  o.max_page_words = 20000;
  o.max_page_layout_work = 2'000'000;
  o.max_layout_work = 20'000'000;
  o.max_xml_nodes = 100000;
  return o;
}

inline Document shell(std::string_view bytes) {
  Document d;
  d.source = "fuzz-input";
  d.size_bytes = bytes.size();
  return d;
}

/// Touches every field of a result so that a bad pointer or length in it is caught by ASan.
inline std::size_t consume(const Expected<Document>& r) {
  if (!r) return r.error().reason.size();
  std::size_t n = r->text().size();
  for (const auto& a : r->attachments) n += a.name.size() + a.bytes.size() + a.media_type.size();
  for (const auto& [k, v] : r->metadata) n += k.size() + v.size();
  return n;
}

}  // namespace quarry::fuzz
