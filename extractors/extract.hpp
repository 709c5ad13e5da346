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

/// Reads a whole regular file, refusing (before reading) one larger than opts.max_file_bytes.
/// Errors name the file: missing, a directory, not a regular file, too large, unreadable (errno text).
Expected<std::string> read_file_bytes(const std::filesystem::path& path, const ExtractOptions& opts = {});

/// SHA-256 of `bytes` (FIPS 180-4, computed by OpenSSL's libcrypto) as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace quarry
