// PDF: document metadata and page geometry through poppler-cpp; page text through poppler's core text
// engine with the limits enforced while each page is interpreted (pdf/page_text.hpp), in physical
// layout (the layout `pdftotext -layout` prints, from poppler's TextOutputDev, so a table row stays on
// one line) with a bounding box per line from the page's words; embedded files through qpdf
// (pdf/attachments.hpp: the EmbeddedFiles name tree, /AF associated files and file attachment
// annotations), which is where ZUGFeRD / Factur-X / XRechnung PDFs carry their invoice XML.
#include <poppler-document.h>
#include <poppler-global.h>
#include <poppler-page.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <ctime>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "extractors/extract.hpp"
#include "extractors/formats.hpp"
#include "extractors/pdf/attachments.hpp"
#include "extractors/pdf/page_text.hpp"

namespace quarry::detail {
namespace {

void ignore_poppler_message(const std::string&, void*) {}

// poppler writes syntax warnings for damaged files to stderr; they are noise in a batch (the
// outcome is reported per document). The hook is process-wide in poppler, so it is set once.
void silence_poppler() {
  static std::once_flag once;
  std::call_once(once, [] { poppler::set_debug_error_function(ignore_poppler_message, nullptr); });
}

std::string utf8(const poppler::ustring& s) {
  if (s.empty()) return {};
  const poppler::byte_array b = s.to_utf8();
  std::string r(b.begin(), b.end());
  while (!r.empty() && r.back() == '\0') r.pop_back();
  return r;
}

std::string iso8601(std::time_t t) {
  if (t == static_cast<std::time_t>(-1) || t == 0) return {};
  std::tm tm{};
  if (!gmtime_r(&t, &tm)) return {};
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

struct Word {
  BBox box;
  bool used = false;
};

// Gives each layout line the union of the boxes of its words. The layout text and the word list come
// from two runs of poppler's text engine, so words are matched by their text: each whitespace-
// separated token of the line takes the unused word box with the same text nearest to the line's
// vertical position (first the position of the line above, then that of the line's first match).
class LineBoxer {
 public:
  explicit LineBoxer(std::vector<pdf::Word> words) {
    for (pdf::Word& w : words) {
      words_.push_back(Word{w.box});
      index_[std::move(w.text)].push_back(words_.size() - 1);
    }
  }

  std::optional<BBox> box(std::string_view line) {
    std::optional<BBox> out;
    std::optional<double> anchor;
    std::size_t pos = 0;
    while (pos < line.size()) {
      while (pos < line.size() && line[pos] == ' ') ++pos;
      std::size_t end = line.find(' ', pos);
      if (end == std::string_view::npos) end = line.size();
      if (end > pos) {
        if (auto w = take(std::string(line.substr(pos, end - pos)), anchor)) {
          const BBox& b = words_[*w].box;
          if (!anchor) anchor = (b.y0 + b.y1) / 2;
          if (!out) {
            out = b;
          } else {
            out->x0 = std::min(out->x0, b.x0), out->y0 = std::min(out->y0, b.y0);
            out->x1 = std::max(out->x1, b.x1), out->y1 = std::max(out->y1, b.y1);
          }
        }
      }
      pos = end;
    }
    if (out) last_y_ = (out->y0 + out->y1) / 2;
    return out;
  }

 private:
  std::optional<std::size_t> take(const std::string& token, std::optional<double> anchor) {
    auto it = index_.find(token);
    if (it == index_.end()) return std::nullopt;
    std::optional<std::size_t> best;
    double best_cost = 0;
    for (std::size_t i : it->second) {
      if (words_[i].used) continue;
      const double cy = (words_[i].box.y0 + words_[i].box.y1) / 2;
      double cost;
      if (anchor) {
        cost = std::abs(cy - *anchor);
      } else {
        // Lines come top to bottom: prefer the nearest word at or below the previous line.
        cost = cy >= last_y_ - 1.0 ? cy - last_y_ : 1e6 + (last_y_ - cy);
      }
      if (!best || cost < best_cost) best = i, best_cost = cost;
    }
    if (best) words_[*best].used = true;
    return best;
  }

  std::vector<Word> words_;
  std::unordered_map<std::string, std::vector<std::size_t>> index_;
  double last_y_ = -1e9;
};

// Page trees are a few levels deep (a balanced tree of 5,000 pages with 2 kids per node has 13);
// poppler's walk is quadratic in the depth.
constexpr int kMaxPageTreeDepth = 256;

}  // namespace

Expected<Document> extract_pdf(std::string_view bytes, Document doc, const ExtractOptions& opts) {
  silence_poppler();
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    return tl::unexpected(ExtractError{doc.source, "PDF larger than 2 GiB"});
  // poppler reads the bytes in place (no copy); they outlive `pdf`.
  std::unique_ptr<poppler::document> pdf(poppler::document::load_from_raw_data(
      bytes.data(), static_cast<int>(bytes.size()), opts.pdf_password, opts.pdf_password));
  if (!pdf)
    return tl::unexpected(ExtractError{doc.source, "not a readable PDF (damaged, truncated or not a PDF)"});
  if (pdf->is_locked()) {
    if (opts.pdf_password.empty())
      return tl::unexpected(ExtractError{doc.source, "PDF is encrypted; pass --pdf-password"});
    return tl::unexpected(ExtractError{doc.source, "PDF is encrypted and the password given does not open it"});
  }

  const int n_pages = pdf->pages();
  if (n_pages <= 0) return tl::unexpected(ExtractError{doc.source, "PDF has no pages"});
  if (n_pages > opts.max_pages)
    return tl::unexpected(ExtractError{doc.source, "PDF has " + std::to_string(n_pages) +
                                                       " pages, more than the limit of " +
                                                       std::to_string(opts.max_pages)});

  auto put = [&doc](const char* key, std::string value) {
    if (!value.empty()) doc.metadata[key] = std::move(value);
  };
  put("title", utf8(pdf->get_title()));
  put("author", utf8(pdf->get_author()));
  put("subject", utf8(pdf->get_subject()));
  put("keywords", utf8(pdf->get_keywords()));
  put("creator", utf8(pdf->get_creator()));
  put("producer", utf8(pdf->get_producer()));
  put("creation_date", iso8601(pdf->get_creation_date_t()));
  put("modification_date", iso8601(pdf->get_modification_date_t()));
  int major = 0, minor = 0;
  pdf->get_pdf_version(&major, &minor);
  put("pdf_version", std::to_string(major) + "." + std::to_string(minor));
  if (pdf->is_encrypted()) put("encrypted", "true");

  // poppler's core objects below need poppler's global state, which lives as long as `pdf` does.
  pdf::Reader reader(bytes, opts.pdf_password, opts);
  if (!reader.ok())
    return tl::unexpected(ExtractError{doc.source, "not a readable PDF (damaged, truncated or not a PDF)"});
  // Before any page is looked up (poppler-cpp's pages included).
  if (std::string why = reader.page_tree_problem(kMaxPageTreeDepth, 4 * static_cast<std::size_t>(opts.max_pages) + 1024);
      !why.empty())
    return tl::unexpected(ExtractError{doc.source, "PDF refused: " + why});
  std::size_t text_bytes = 0;
  bool any_text = false;
  for (int i = 0; i < n_pages; ++i) {
    Page page;
    page.number = i + 1;
    std::unique_ptr<poppler::page> p(pdf->create_page(i));
    if (!p) {
      doc.warnings.push_back("page " + std::to_string(i + 1) + " could not be read");
      doc.pages.push_back(std::move(page));
      continue;
    }
    const poppler::rectf r = p->page_rect();
    const bool sideways = p->orientation() == poppler::page::landscape ||
                          p->orientation() == poppler::page::seascape;
    page.width = sideways ? r.height() : r.width();
    page.height = sideways ? r.width() : r.height();
    // Characters beyond the document's limit stop the page early; the limit is then an error below.
    const std::uint64_t budget = opts.max_text_bytes - std::min<std::uint64_t>(text_bytes, opts.max_text_bytes) + 1;
    pdf::PageText text = reader.page(i, budget, opts.pdf_line_bboxes);
    for (std::string& w : text.warnings) doc.warnings.push_back(std::move(w));
    int block = 0;
    text_bytes += append_lines(page, text.text, &block);
    if (text_bytes > opts.max_text_bytes || text.budget_spent)
      return tl::unexpected(ExtractError{doc.source, "extracted text larger than the limit of " +
                                                         std::to_string(opts.max_text_bytes) + " bytes"});
    if (opts.pdf_line_bboxes && !page.lines.empty()) {
      LineBoxer boxer(std::move(text.words));
      for (Line& line : page.lines) line.bbox = boxer.box(line.text);
    }
    any_text = any_text || !page.lines.empty();
    doc.pages.push_back(std::move(page));
  }
  // A PDF without a single character of text cannot be used downstream: either its pages are images
  // (OCR is not done here) or it is damaged beyond what poppler can reconstruct, or its pages were
  // all over the limits (then the first warning says which).
  if (!any_text) {
    for (const std::string& w : doc.warnings)
      if (w.find(" skipped: ") != std::string::npos || w.find(" cut") != std::string::npos)
        return tl::unexpected(ExtractError{doc.source, "PDF has no extractable text within the limits (" + w + ")"});
    return tl::unexpected(ExtractError{
        doc.source, "PDF has no extractable text (pages are images, or the file is damaged)"});
  }

  if (reader.may_embed_files()) {
    pdf::Attachments files = pdf::read_attachments(bytes, opts.pdf_password, opts, reader.page_refs());
    for (std::string& w : files.warnings) doc.warnings.push_back(std::move(w));
    doc.attachments = std::move(files.files);
  }
  return doc;
}

}  // namespace quarry::detail
