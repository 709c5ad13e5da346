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
///
/// Per format (see the format's .cpp for the rules): PDF text is poppler's physical layout, the
/// text `pdftotext -layout` prints, one Line per printed line with its BBox; HTML is the visible
/// text with table rows joined by " | "; XML is one line per element with text; text/Markdown is
/// decoded to UTF-8. Blank lines are not stored: they end a block (Line::block).
/// Errors (besides unreadable files and limits): empty file, unsupported binary content, malformed
/// XML, an XML encoding that is unknown or does not decode, entity declarations, nesting deeper than
/// opts.max_xml_depth, an XML or HTML element with more than opts.max_xml_attributes attributes or a
/// document with more than opts.max_xml_nodes elements and attributes, an unreadable or encrypted PDF
/// without the right opts.pdf_password, and a document with no text at all (image-only PDF, HTML
/// with nothing visible, a PDF whose every page is over its content limit), which nothing downstream
/// could use.
/// Limits that cut a document rather than refuse it are warnings (Document::warnings): a PDF page
/// skipped or cut (content, text or word limits), given in content-stream order (layout limits), an
/// embedded file skipped (opts.max_attachment_bytes, opts.max_attachments_total_bytes). Every limit
/// is enforced while the input is read, so time and memory stay bounded by `opts` whatever the input.
/// When opts.map_einvoices, an XML file, or an XML file embedded in a PDF, that is a structured
/// e-invoice is mapped into Document::einvoice; a mapping failure is a warning, not an error.
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
