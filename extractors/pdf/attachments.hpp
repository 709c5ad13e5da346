// Files embedded in a PDF, read with qpdf (Debian libqpdf-dev): every place a conforming writer puts
// them (ISO 32000-2 §7.11.4 "Embedded file streams", §14.13 "Associated files", §12.5.6.15 "File
// attachment annotations"):
//  1. the EmbeddedFiles name tree of the catalog's /Names (any of its forms: direct or indirect
//     dictionaries, /Names leaves, /Kids; qpdf's QPDFNameTreeObjectHelper reads them all and repairs
//     what it can), in tree order;
//  2. the catalog's /AF array (PDF/A-3 associated files, where ZUGFeRD / Factur-X declare the invoice);
//  3. for each page in order, its /AF array and its FileAttachment annotations (/FS).
// A file met in several places (the same file specification or embedded stream) is listed once, where
// it is first met. A declared /Params /Size is never trusted: the stream is inflated (qpdf's generalized
// filters: Flate, LZW, ASCII85, ASCIIHex, RunLength) and inflating stops at the limit.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "extractors/document.hpp"

namespace quarry::detail::pdf {

struct Attachments {
  std::vector<Attachment> files;      ///< in the order above
  std::vector<std::string> warnings;  ///< files skipped (over a limit, undecodable) or unreadable structure
};

/// The files embedded in the PDF `bytes` (`password`: the document's, for encrypted files).
/// Limits: a file whose inflated bytes pass opts.max_attachment_bytes is skipped with a warning, and so
/// is every file once the document's attachments together pass opts.max_attachments_total_bytes.
/// Names: the file specification's /UF, /F, /DOS, /Mac or /Unix (the order poppler uses) as a PDF text
/// string (UTF-16BE with its BOM, UTF-8 with its BOM, else PDFDocEncoding read as Latin-1).
/// Never throws: a PDF qpdf cannot read gives no files and one warning.
/// `pages`: the object number and generation of each page, in order, as poppler found them (qpdf's own
/// page tree walk recurses once per level, which a deep tree turns into a stack overflow).
Attachments read_attachments(std::string_view bytes, const std::string& password, const ExtractOptions& opts,
                             const std::vector<std::pair<int, int>>& pages);

}  // namespace quarry::detail::pdf
