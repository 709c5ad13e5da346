// Entry points of the extractors: detect the media type from content, then run the format's extractor.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "extractors/document.hpp"

namespace quarry {

/// Media type from the content's magic bytes (and structure for text formats), falling back to the
/// file extension only when the content is ambiguous. Returns one of: application/pdf, text/html,
/// application/xml, text/markdown, text/plain, or application/octet-stream (unsupported).
std::string detect_media_type(std::string_view bytes, const std::filesystem::path& name_hint = {});

/// Reads and extracts one file. Never throws for bad input: every problem becomes an ExtractError
/// naming the file and the reason. Memory and time are bounded by `opts`.
Expected<Document> extract_file(const std::filesystem::path& path, const ExtractOptions& opts = {});

/// Extracts a document from bytes already in memory; `source` names it in the Document and errors.
Expected<Document> extract_bytes(std::string_view bytes, const std::string& source,
                                 const ExtractOptions& opts = {});

}  // namespace quarry
