// PDF page text through poppler's core text engine (TextOutputDev, the engine of `pdftotext`), with the
// extractor's limits enforced while a page is interpreted rather than after it.
//
// poppler-cpp's page::text() runs a whole page through TextOutputDev and returns all of it: a page can
// show hundreds of MB of text from a few hundred KB of file (GBs of poppler TextWords), pages can share
// one content stream that inflates to a GiB (decoded again for every page), and the layout analysis
// (TextPage::coalesce) grows with the square of the number of text blocks. Here the same calls are
// made (so the text of an ordinary page is byte for byte poppler-cpp's, i.e. `pdftotext -layout`'s),
// through a TextOutputDev subclass that:
//  - measures the decoded size of the page's content streams, annotation appearance streams and form
//    XObjects before the page is interpreted (each stream decoded once per document, only up to the
//    limit, and all the measuring of a document within max_content_bytes too), and skips a page whose
//    content is larger than ExtractOptions::max_page_content_bytes or than what is left of
//    ExtractOptions::max_content_bytes; a form XObject is charged again at every use;
//  - does the same for the font streams poppler reads whole each time it makes a font (Type 1
//    programs, ToUnicode and encoding CMaps, CIDToGIDMap), against ExtractOptions::max_font_bytes;
//  - counts the text (UTF-8 bytes) and poppler's words as they are drawn (TextPage::addChar's word
//    breaks, reproduced), stops interpreting the page (poppler's abort callback) at
//    ExtractOptions::max_page_text_bytes, and estimates the cost of the layout analysis before running
//    it (cost model below);
//  - gives the page in content-stream order (poppler's raw order, a second interpretation of that page
//    only) when the cost is over ExtractOptions::max_page_layout_work or what is left of
//    max_layout_work, or the page has more than 200,000 characters: poppler keeps ~80 bytes per
//    character, so that pass takes its TextPage in chunks, and cuts the page at max_page_words.
//
// Layout cost model (measured on poppler 22.12's TextPage::coalesce, not taken from a paper): with W
// words and F "fragments" (words, in content order, that do not continue the previous word on its
// baseline within 0.7 em, poppler's minimum column spacing), column assignment compares blocks
// pairwise (at most F blocks) and duplicate removal compares the words of a baseline pairwise, so the
// work is taken as W*F + W*W/16. The densest pages of the corpora (1,100 words) cost 1.4e5, the average
// 3e4; adversarial layouts (staircases, rows and grids of tiny words, repeated text) took at most
// 5e-8 s per unit on one core, so the default page limit (2.5e7) is about 1 s and the document limit
// (2.5e8) about 12 s of layout analysis.
//
// Uses poppler's core headers (Debian libpoppler-private-dev, poppler 22.12): these are not a stable
// API across poppler releases. poppler's process-wide GlobalParams is owned by poppler-cpp (it exists
// while any poppler::document does), so a Reader must only be used while a poppler::document is alive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "extractors/document.hpp"

class PDFDoc;
struct Ref;

namespace quarry::detail::pdf {

/// One word of a page as poppler's text engine sees it: its text (UTF-8) and its box in points,
/// origin top-left (poppler::text_box conventions).
struct Word {
  std::string text;
  BBox box;
};

/// The text of one page.
struct PageText {
  std::string text;                   ///< UTF-8, lines ended by '\n' (poppler's output, '\f' at the end)
  std::vector<Word> words;            ///< filled when asked for (Reader::page `words`)
  std::vector<std::string> warnings;  ///< limits that cut or changed this page's text, in words a user reads
  bool budget_spent = false;          ///< the text was cut at the caller's `text_budget` (below the page limit)
};

/// Reads the text of a PDF's pages under ExtractOptions' limits. Not thread-safe (one per document);
/// `bytes` must outlive it.
class Reader {
 public:
  /// Opens `bytes` with poppler's core (the password is tried as owner and user password).
  Reader(std::string_view bytes, const std::string& password, const ExtractOptions& opts);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  /// False when poppler cannot open the document (damaged, or locked for this password).
  bool ok() const;

  /// Why the page tree must not be handed to poppler, or "": nested deeper than `max_depth` levels
  /// (poppler walks it in time quadratic in its depth: 200,000 levels took 30 s; real trees are a
  /// few levels deep). The walk is iterative, visits each node once and at most `max_nodes` of them.
  std::string page_tree_problem(int max_depth, std::size_t max_nodes);

  /// Object number and generation of each page, in order (for readers of other page entries).
  std::vector<std::pair<int, int>> page_refs();

  /// Whether the document has any of the places embedded files are listed in (the catalog's
  /// EmbeddedFiles name tree or /AF, a page's /AF or FileAttachment annotation): when not, there is no
  /// need to read it again for them.
  bool may_embed_files();

  /// Text of page `index` (0-based) in physical layout, at most `text_budget` bytes of characters
  /// (the caller's share of ExtractOptions::max_text_bytes; the page limit applies too). With `words`,
  /// also the page's words and their boxes (a second interpretation of the page, as poppler-cpp's
  /// page::text_list() does: crop box ignored). Never throws for bad input; limits show as warnings.
  PageText page(int index, std::uint64_t text_budget, bool words);

  /// Decoded bytes of content charged so far (ExtractOptions::max_content_bytes counts these).
  std::uint64_t content_bytes() const { return content_used_; }

 private:
  struct Pass;
  friend struct Pass;

  /// Decoded size of the stream `ref` points to, at most `cap` + 1 (memoised per object; `cap` is
  /// always max_page_content_bytes). cap + 1 too when the document's measuring is spent.
  std::uint64_t stream_size(const Ref& ref, std::uint64_t cap);
  /// Measures the page's streams before it is interpreted: `charged` (content and annotation
  /// appearances) and `fonts` (font streams poppler reads whole); "" or the reason the page is skipped.
  std::string precharge(int index, std::uint64_t* charged, std::uint64_t* fonts);

  const ExtractOptions& opts_;
  std::unique_ptr<PDFDoc> doc_;
  std::unordered_map<std::uint64_t, std::uint64_t> sizes_;  ///< (num << 32 | gen) -> decoded bytes
  std::uint64_t measured_ = 0;      ///< bytes decoded to measure streams (bounded by max_content_bytes)
  bool measure_spent_ = false;      ///< a stream could not be measured within that bound
  std::uint64_t content_used_ = 0;
  std::uint64_t fonts_used_ = 0;
  std::uint64_t layout_used_ = 0;
};

}  // namespace quarry::detail::pdf
