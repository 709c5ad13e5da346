// The one wire form of an extracted Document between an extraction worker process and quarry
// (pipeline/extract/extractor.hpp): MessagePack (through nlohmann::json) of a positional array.
// Attachments travel without their bytes (nothing downstream reads them): their sizes come beside.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "extractors/document.hpp"

namespace quarry::extract {

/// A Document as the parent receives it: attachments without bytes, their sizes in `attachment_bytes`.
struct ExtractedDocument {
  Document doc;
  std::vector<std::uint64_t> attachment_bytes;  ///< per attachment, the size of its inflated content
};

/// Encodes `doc` (attachment bytes are left out; their sizes are kept).
std::vector<std::uint8_t> encode_document(const Document& doc);

/// Decodes what encode_document made. Throws std::runtime_error on malformed input.
ExtractedDocument decode_document(const std::uint8_t* data, std::size_t size);

}  // namespace quarry::extract
