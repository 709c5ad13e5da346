// Internal interface between extract.cpp (dispatch) and the per-format extractors.
//
// Each extractor receives a Document whose source, sha256, media_type and size_bytes are already set,
// fills pages (and metadata, attachments, warnings) and returns it, or an ExtractError naming
// doc.source and the reason. None of them throws for bad input.
#pragma once

#include <string>
#include <string_view>

#include "extractors/document.hpp"

namespace quarry::detail {

Expected<Document> extract_pdf(std::string_view bytes, Document doc, const ExtractOptions& opts);
Expected<Document> extract_html(std::string_view bytes, Document doc, const ExtractOptions& opts);
Expected<Document> extract_xml(std::string_view bytes, Document doc, const ExtractOptions& opts);
/// Plain text and Markdown (UTF-8, UTF-16 with BOM, or a legacy 8-bit Central/Western European code page).
Expected<Document> extract_text(std::string_view bytes, Document doc, const ExtractOptions& opts);

/// Text decoded to UTF-8, and the name of the encoding it was found in ("UTF-8", "UTF-16LE",
/// "windows-1250", ...).
struct Decoded {
  std::string utf8;
  std::string encoding;
};

/// Decodes text bytes to UTF-8: UTF-8 (BOM stripped), UTF-16 LE/BE with a BOM, or, when the bytes
/// are not valid UTF-8, the most likely of windows-1250, ISO-8859-2 and windows-1252 (see text.cpp
/// for the decision rule). Errors: bytes that are none of these (e.g. binary data).
Expected<Decoded> decode_text(std::string_view bytes, const std::string& source);

/// For bytes that are not UTF-8: the most likely of "WINDOWS-1250", "ISO-8859-2", "WINDOWS-1252"
/// (iconv names; the decision rule is documented in text.cpp).
const char* guess_8bit_encoding(std::string_view bytes);

/// True when `s` is well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
/// On false, *bad_offset (if given) is the byte offset of the first invalid sequence.
bool valid_utf8(std::string_view s, std::size_t* bad_offset = nullptr);

/// Converts `bytes` from `from_encoding` (an iconv name) to UTF-8 with glibc iconv(3).
/// Errors: the encoding is unknown to iconv, or an invalid or incomplete sequence (byte offset given).
Expected<std::string> iconv_to_utf8(std::string_view bytes, const char* from_encoding,
                                    const std::string& source);

/// Splits `text` at '\n' into lines of `page` (trailing whitespace and '\r'/'\f' removed). Blank
/// lines are not stored: each run of them starts a new block (`*block` is incremented).
/// Returns the number of text bytes added.
std::size_t append_lines(Page& page, std::string_view text, int* block);

}  // namespace quarry::detail
