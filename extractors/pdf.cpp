// PDF through poppler-cpp: page text in physical layout (the layout `pdftotext -layout` prints, from
// poppler's TextOutputDev, so a table row stays on one line), a bounding box per line from the word
// boxes of page::text_list(), document metadata, and embedded files (EmbeddedFiles name tree) as
// attachments, which is where ZUGFeRD / Factur-X / XRechnung PDFs carry their invoice XML.
#include <poppler-document.h>
#include <poppler-embedded-file.h>
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
  explicit LineBoxer(const poppler::page& page) {
    for (const poppler::text_box& tb : page.text_list()) {
      const poppler::rectf r = tb.bbox();
      words_.push_back(Word{BBox{r.left(), r.top(), r.right(), r.bottom()}});
      index_[utf8(tb.text())].push_back(words_.size() - 1);
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

// A PDF text string (file names in file specifications) to UTF-8: UTF-16BE with a BOM, UTF-8 with a
// BOM (PDF 2.0), else PDFDocEncoding, read as Latin-1 (they agree on the printable characters).
std::string pdf_text_string(const std::string& raw) {
  if (raw.size() >= 2 && raw[0] == '\xFE' && raw[1] == '\xFF') {
    auto r = iconv_to_utf8(std::string_view(raw).substr(2, (raw.size() - 2) & ~std::size_t{1}), "UTF-16BE", "");
    return r ? *r : std::string{};
  }
  if (raw.compare(0, 3, "\xEF\xBB\xBF") == 0) return valid_utf8(raw.substr(3)) ? raw.substr(3) : std::string{};
  if (valid_utf8(raw)) return raw;
  auto r = iconv_to_utf8(raw, "ISO-8859-1", "");
  return r ? *r : std::string{};
}

bool ends_with_ci(const std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) return false;
  return true;
}

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
    const std::string text = utf8(p->text(poppler::rectf(), poppler::page::physical_layout));
    int block = 0;
    text_bytes += append_lines(page, text, &block);
    if (text_bytes > opts.max_text_bytes)
      return tl::unexpected(ExtractError{doc.source, "extracted text larger than the limit of " +
                                                         std::to_string(opts.max_text_bytes) + " bytes"});
    if (opts.pdf_line_bboxes && !page.lines.empty()) {
      LineBoxer boxer(*p);
      for (Line& line : page.lines) line.bbox = boxer.box(line.text);
    }
    any_text = any_text || !page.lines.empty();
    doc.pages.push_back(std::move(page));
  }
  // A PDF without a single character of text cannot be used downstream: either its pages are images
  // (OCR is not done here) or it is damaged beyond what poppler can reconstruct.
  if (!any_text)
    return tl::unexpected(ExtractError{
        doc.source, "PDF has no extractable text (pages are images, or the file is damaged)"});

  if (pdf->has_embedded_files()) {
    for (poppler::embedded_file* ef : pdf->embedded_files()) {
      if (!ef || !ef->is_valid()) {
        doc.warnings.push_back("an embedded file could not be read");
        continue;
      }
      std::string name = pdf_text_string(ef->name());
      if (ef->size() < 0 || static_cast<std::uint64_t>(ef->size()) > opts.max_file_bytes) {
        doc.warnings.push_back("embedded file " + name + " larger than the limit; skipped");
        continue;
      }
      const poppler::byte_array data = ef->data();
      Attachment a;
      a.bytes.assign(data.begin(), data.end());
      if (name.empty()) {
        // poppler-cpp 22.12 returns the name through a C string, so a UTF-16 name (every ASCII
        // character has a 0 high byte) arrives as its BOM alone. Name it by position and content.
        const std::string mt = detect_media_type(a.bytes);
        const char* ext = mt == "application/xml" ? ".xml" : mt == "application/pdf" ? ".pdf"
                          : mt == "text/html" ? ".html" : mt == "text/plain" ? ".txt" : ".bin";
        name = "attachment-" + std::to_string(doc.attachments.size() + 1) + ext;
        doc.warnings.push_back("the name of an embedded file could not be read; called it " + name);
      }
      a.name = name;
      a.description = utf8(ef->description());
      a.media_type = ef->mime_type();
      if (a.media_type.empty() || a.media_type == "application/octet-stream") {
        const std::string detected = detect_media_type(a.bytes, name);
        if (detected != "application/octet-stream" || a.media_type.empty()) a.media_type = detected;
      }
      // PDF names encode '/' as "#2F" in Subtype; poppler returns e.g. "text#2Fxml".
      if (auto k = a.media_type.find("#2F"); k != std::string::npos) a.media_type.replace(k, 3, "/");
      if (a.media_type.empty() && ends_with_ci(name, ".xml")) a.media_type = "application/xml";
      doc.attachments.push_back(std::move(a));
    }
  }
  return doc;
}

}  // namespace quarry::detail
