#include "extractors/pdf/attachments.hpp"

#include <qpdf/Pipeline.hh>
#include <qpdf/QPDF.hh>
#include <qpdf/QPDFNameTreeObjectHelper.hh>
#include <qpdf/QPDFObjectHandle.hh>

#include <cctype>
#include <set>
#include <stdexcept>

#include "extractors/extract.hpp"
#include "extractors/formats.hpp"

namespace quarry::detail::pdf {
namespace {

// Keeps what a stream inflates to, and stops the inflating (by throwing, which qpdf turns into a
// failed pipeStreamData) as soon as it would pass `cap` bytes.
class CappedSink final : public Pipeline {
 public:
  CappedSink(std::string& out, std::uint64_t cap) : Pipeline("quarry embedded file", nullptr), out_(out), cap_(cap) {}
  void write(unsigned char const* data, size_t len) override {
    if (out_.size() + len > cap_) {
      over_ = true;
      throw std::length_error("embedded file larger than the limit");
    }
    out_.append(reinterpret_cast<const char*>(data), len);
  }
  void finish() override {}
  bool over() const { return over_; }

 private:
  std::string& out_;
  std::uint64_t cap_;
  bool over_ = false;
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

// A description (/Desc) as poppler reads it: UTF-16 with a BOM (either byte order), else one code
// point per byte (Latin-1); trailing NULs dropped.
std::string description_text(const std::string& raw) {
  std::string out;
  const bool be = raw.size() >= 2 && raw[0] == '\xFE' && raw[1] == '\xFF';
  const bool le = raw.size() >= 2 && raw[0] == '\xFF' && raw[1] == '\xFE';
  if (be || le) {
    auto r = iconv_to_utf8(std::string_view(raw).substr(2, (raw.size() - 2) & ~std::size_t{1}), be ? "UTF-16BE" : "UTF-16LE", "");
    if (r) out = std::move(*r);
  } else {
    auto r = iconv_to_utf8(raw, "ISO-8859-1", "");
    if (r) out = std::move(*r);
  }
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

bool ends_with_ci(const std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) return false;
  return true;
}

class Collector {
 public:
  Collector(const ExtractOptions& opts, Attachments& out) : opts_(opts), out_(out) {}

  // One file specification (a dictionary with /EF), wherever it was found.
  void add(QPDFObjectHandle spec) {
    try {
      add_spec(spec);
    } catch (const std::exception& e) {
      out_.warnings.push_back(std::string("an embedded file could not be read: ") + e.what());
    }
  }

  void add_all(QPDFObjectHandle array) {
    if (!array.isArray()) return;
    for (int i = 0; i < array.getArrayNItems(); ++i) add(array.getArrayItem(i));
  }

 private:
  void add_spec(QPDFObjectHandle spec) {
    if (!spec.isDictionary()) return;  // a plain file name: nothing is embedded
    if (spec.isIndirect() && !specs_.insert(spec.getObjGen()).second) return;
    QPDFObjectHandle ef = spec.getKey("/EF");
    if (!ef.isDictionary()) return;
    QPDFObjectHandle stream = ef.getKey("/F");
    if (!stream.isStream()) stream = ef.getKey("/UF");
    if (!stream.isStream()) {
      out_.warnings.push_back("an embedded file could not be read");
      return;
    }
    if (stream.isIndirect() && !streams_.insert(stream.getObjGen()).second) return;

    std::string name;
    for (const char* key : {"/UF", "/F", "/DOS", "/Mac", "/Unix"}) {
      QPDFObjectHandle n = spec.getKey(key);
      if (n.isString()) {
        name = pdf_text_string(n.getStringValue());
        break;
      }
    }
    const std::string shown = name.empty() ? std::string("(unnamed)") : name;
    if (total_ >= opts_.max_attachments_total_bytes) {
      out_.warnings.push_back("embedded file " + shown + " skipped: the document's embedded files are larger than the limit of " +
                              std::to_string(opts_.max_attachments_total_bytes) + " bytes");
      return;
    }
    Attachment a;
    const std::uint64_t cap = std::min(opts_.max_attachment_bytes, opts_.max_attachments_total_bytes - total_);
    CappedSink sink(a.bytes, cap);
    bool decoded = false;
    const bool ok = stream.pipeStreamData(&sink, &decoded, 0, qpdf_dl_generalized, true, false);
    if (sink.over()) {
      out_.warnings.push_back("embedded file " + shown + " skipped: it inflates to more than the limit of " +
                              std::to_string(cap) + " bytes");
      return;
    }
    if (!ok || !decoded) {
      out_.warnings.push_back("embedded file " + shown + " skipped: its data cannot be decoded");
      return;
    }
    total_ += a.bytes.size();
    if (name.empty()) {
      const std::string mt = detect_media_type(a.bytes);
      const char* ext = mt == "application/xml" ? ".xml" : mt == "application/pdf" ? ".pdf"
                        : mt == "text/html" ? ".html" : mt == "text/plain" ? ".txt" : ".bin";
      name = "attachment-" + std::to_string(out_.files.size() + 1) + ext;
      out_.warnings.push_back("the name of an embedded file could not be read; called it " + name);
    }
    a.name = name;
    if (QPDFObjectHandle desc = spec.getKey("/Desc"); desc.isString()) a.description = description_text(desc.getStringValue());
    if (QPDFObjectHandle subtype = stream.getDict().getKey("/Subtype"); subtype.isName()) {
      a.media_type = subtype.getName();
      if (!a.media_type.empty() && a.media_type[0] == '/') a.media_type.erase(0, 1);
    }
    if (a.media_type.empty() || a.media_type == "application/octet-stream") {
      const std::string detected = detect_media_type(a.bytes, name);
      if (detected != "application/octet-stream" || a.media_type.empty()) a.media_type = detected;
    }
    // A name written "text#2Fxml" in the file means text/xml.
    if (auto k = a.media_type.find("#2F"); k != std::string::npos) a.media_type.replace(k, 3, "/");
    if (a.media_type.empty() && ends_with_ci(name, ".xml")) a.media_type = "application/xml";
    out_.files.push_back(std::move(a));
  }

  const ExtractOptions& opts_;
  Attachments& out_;
  std::set<QPDFObjGen> specs_, streams_;
  std::uint64_t total_ = 0;
};

}  // namespace

Attachments read_attachments(std::string_view bytes, const std::string& password, const ExtractOptions& opts,
                             const std::vector<std::pair<int, int>>& pages) {
  Attachments out;
  QPDF pdf;
  try {
    pdf.setSuppressWarnings(true);
    pdf.processMemoryFile("document", bytes.data(), bytes.size(), password.c_str());
  } catch (const std::exception& e) {
    out.warnings.push_back(std::string("embedded files could not be read: ") + e.what());
    return out;
  }
  Collector collect(opts, out);
  // Each place is read on its own, so that a damaged one does not hide the others.
  auto guarded = [&out](const char* what, auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      out.warnings.push_back(std::string("embedded files: ") + what + " could not be read: " + e.what());
    }
  };
  QPDFObjectHandle root;
  guarded("the document catalog", [&] { root = pdf.getRoot(); });
  if (!root.isInitialized() || !root.isDictionary()) return out;
  guarded("the EmbeddedFiles name tree", [&] {
    QPDFObjectHandle names = root.getKey("/Names");
    if (!names.isDictionary()) return;
    QPDFObjectHandle tree = names.getKey("/EmbeddedFiles");
    if (!tree.isDictionary()) return;
    QPDFNameTreeObjectHelper helper(tree, pdf);
    for (auto& entry : helper) collect.add(entry.second);
  });
  guarded("the catalog's associated files (/AF)", [&] { collect.add_all(root.getKey("/AF")); });
  guarded("the pages' associated files and file attachment annotations", [&] {
    for (const auto& [num, gen] : pages) {
      QPDFObjectHandle page = pdf.getObject(num, gen);
      if (!page.isDictionary()) continue;
      collect.add_all(page.getKey("/AF"));
      QPDFObjectHandle annots = page.getKey("/Annots");
      if (!annots.isArray()) continue;
      for (int i = 0; i < annots.getArrayNItems(); ++i) {
        QPDFObjectHandle annot = annots.getArrayItem(i);
        if (annot.isDictionary() && annot.getKey("/Subtype").isNameAndEquals("/FileAttachment"))
          collect.add(annot.getKey("/FS"));
      }
    }
  });
  return out;
}

}  // namespace quarry::detail::pdf
