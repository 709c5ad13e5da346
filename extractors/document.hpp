// quarry::Document: what every extractor produces from the bytes of one input file.
//
// A Document is the faithful text of a file, page by page and line by line, with what is needed to
// cite it later (page numbers, PDF bounding boxes), its metadata, its attachments (e.g. the CII XML
// embedded in a ZUGFeRD / Factur-X PDF) and, where a structured e-invoice was recognised, the invoice
// JSON mapped from it (schemas/invoice.schema.json) with no model involved.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <tl/expected.hpp>

namespace quarry {

/// Axis-aligned box in PDF points (1/72 inch), origin at the page's top-left corner, y downwards.
struct BBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

/// One physical line of text in reading order. For PDF, a table row is kept on one line with its
/// cells separated by runs of spaces (as `pdftotext -layout` does); for HTML, the cells of one
/// table row are joined with " | ".
struct Line {
  std::string text;           ///< UTF-8, no trailing newline
  std::optional<BBox> bbox;   ///< PDF only
  int block = 0;              ///< index of the block (paragraph, table) the line belongs to, per page
};

/// One page (1-based `number`). Formats without pages (HTML, XML, text) have a single page 1.
struct Page {
  int number = 1;
  double width = 0, height = 0;  ///< PDF points; 0 where the format has no page geometry
  std::vector<Line> lines;
};

/// A file embedded in the document: for PDF, the EmbeddedFiles name tree, the catalog's and pages'
/// /AF (associated files) and FileAttachment annotations (see extractors/pdf/attachments.hpp).
struct Attachment {
  std::string name;          ///< file name as stored in the document
  std::string media_type;    ///< as declared (Subtype) or detected from the content
  std::string description;
  std::string bytes;         ///< raw content
};

struct Document {
  std::string source;          ///< path as given by the user
  std::string sha256;          ///< lowercase hex digest of the file's bytes
  std::string media_type;      ///< detected from content: application/pdf, text/html, application/xml, text/plain, text/markdown
  std::uint64_t size_bytes = 0;
  std::vector<Page> pages;
  std::map<std::string, std::string> metadata;   ///< title, author, producer, creation_date, ...
  std::vector<Attachment> attachments;
  std::optional<nlohmann::json> einvoice;        ///< invoice JSON mapped from a structured e-invoice
  std::string einvoice_format;                   ///< "ubl", "cii", "nav" when `einvoice` is set
  std::vector<std::string> warnings;             ///< non-fatal problems (e.g. an attachment that failed to map)

  /// The whole text: lines joined with '\n', pages separated by '\f'.
  std::string text() const;
};

/// Why a file could not be read. `file` names the input, `reason` says what is wrong in words a user
/// can act on (e.g. "PDF is encrypted; pass --pdf-password", "XML nesting deeper than 256").
struct ExtractError {
  std::string file;
  std::string reason;
};

template <class T>
using Expected = tl::expected<T, ExtractError>;

/// Limits and options shared by all extractors. Every limit is enforced before memory is committed.
struct ExtractOptions {
  std::uint64_t max_file_bytes = 256ull << 20;   ///< larger inputs are refused
  std::uint64_t max_text_bytes = 64ull << 20;    ///< extracted text cap per document
  /// Extracted text cap per page (UTF-8 bytes). A PDF page is cut there while it is interpreted (the
  /// rest of the page is not read; a warning says so).
  std::uint64_t max_page_text_bytes = 4ull << 20;
  /// Cap on one embedded file's bytes as really inflated (a declared /Size is never trusted): a larger
  /// file is skipped with a warning, and inflating it stops at the cap.
  std::uint64_t max_attachment_bytes = 32ull << 20;
  /// Cap on all embedded files of one document together (bytes, inflated); files past it are skipped.
  std::uint64_t max_attachments_total_bytes = 128ull << 20;
  /// PDF: decoded content a page may have interpreted (bytes): its content streams, annotation
  /// appearance streams and every use of a form XObject. A page over it is skipped with a warning
  /// before anything of it is interpreted (or cut, when the excess comes from repeated form uses).
  std::uint64_t max_page_content_bytes = 64ull << 20;
  /// PDF: the same for the whole document, every page charged for what it interprets, so that pages
  /// sharing one large content stream are not decoded again without bound. Pages past it are skipped.
  std::uint64_t max_content_bytes = 256ull << 20;
  /// PDF: font data poppler reads whole each time it makes a font (Type 1 programs, ToUnicode and
  /// encoding CMaps, CIDToGIDMap), every page charged for the fonts its resources list (a long LaTeX
  /// document reads ~300 KB per page); pages past it are skipped. Each such stream must also fit
  /// max_page_content_bytes.
  std::uint64_t max_font_bytes = 1ull << 30;
  /// PDF: words of poppler's text engine per page (each costs about 1.4 KB of memory); the page's text
  /// is cut there (words are counted every eighth of the limit: up to an eighth more may be kept).
  int max_page_words = 100000;
  /// PDF: estimated cost of poppler's layout analysis (physical layout) for one page and for the whole
  /// document, in the units of extractors/pdf/page_text.hpp (W*F + W*W/16 for W words and F line
  /// fragments; an ordinary page costs about 1e5). A page over either gets its text in content-stream
  /// order instead, with a warning.
  std::uint64_t max_page_layout_work = 25'000'000;
  std::uint64_t max_layout_work = 250'000'000;
  int max_xml_depth = 256;                       ///< XML / HTML element nesting limit
  /// XML / HTML: attributes of one element (libxml2 2.9 compares each with every earlier one).
  int max_xml_attributes = 256;
  /// XML / HTML: elements and attributes in one document (libxml2's tree takes ~300 bytes for each).
  std::uint64_t max_xml_nodes = 1000000;
  int max_pages = 5000;
  std::string pdf_password;                      ///< tried for encrypted PDFs (owner and user)
  bool map_einvoices = true;                     ///< run the e-invoice mappers on XML and PDF attachments
  bool pdf_line_bboxes = true;                   ///< give PDF lines a BBox (a second text pass per page)
};

}  // namespace quarry
