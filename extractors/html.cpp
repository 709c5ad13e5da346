// HTML through libxml2's HTML parser (no network, errors and warnings silenced): the visible text.
//
// Rendering rules, after the CSS display model reduced to what text needs: whitespace collapses to
// one space (NBSP included; zero-width spaces, BOMs and soft hyphens are dropped); block elements
// and <br> end the line; script, style, head, template, noscript and other non-rendered elements are
// skipped. A table row is one line with its cells joined by " | "; when cells hold several lines
// (<br>, nested blocks or tables), line k of the row joins line k of every cell, so that side-by-side
// boxes (seller | buyer) stay side by side as they are drawn. Each table is one block.
#include <libxml/HTMLparser.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <memory>

#include "extractors/formats.hpp"
#include "extractors/xml/markup_scan.hpp"

namespace quarry::detail {
namespace {

std::string_view name_of(const xmlNode* n) {
  return n && n->name ? std::string_view(reinterpret_cast<const char*>(n->name)) : std::string_view{};
}

template <std::size_t N>
bool one_of(std::string_view name, const std::array<std::string_view, N>& set) {
  return std::find(set.begin(), set.end(), name) != set.end();
}

constexpr std::array<std::string_view, 14> kSkipped = {
    "script", "style", "head", "template", "noscript", "iframe", "object", "embed",
    "svg", "select", "datalist", "audio", "video", "canvas"};

constexpr std::array<std::string_view, 38> kBlock = {
    "p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "dl", "dt", "dd", "li",
    "section", "article", "header", "footer", "nav", "aside", "main", "blockquote", "address",
    "figure", "figcaption", "form", "fieldset", "legend", "hr", "center", "details", "summary",
    "caption", "body", "html", "tr", "td", "th"};

// Collects the lines of one flow (the document, or one table cell).
class Flow {
 public:
  struct Out {
    std::string text;
    int block;
  };

  void text(std::string_view s, bool preformatted) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      // Invisible: U+200B..U+200D zero-width (space, non-joiner, joiner) and U+FEFF; U+00AD soft hyphen.
      if (c == 0xE2 && i + 2 < s.size() && s[i + 1] == '\x80' && (s[i + 2] >= '\x8B' && s[i + 2] <= '\x8D')) {
        i += 2;
        continue;
      }
      if (c == 0xEF && i + 2 < s.size() && s[i + 1] == '\xBB' && s[i + 2] == '\xBF') {
        i += 2;
        continue;
      }
      if (c == 0xC2 && i + 1 < s.size() && s[i + 1] == '\xAD') {
        ++i;
        continue;
      }
      const bool nbsp = c == 0xC2 && i + 1 < s.size() && s[i + 1] == '\xA0';
      if (preformatted) {
        if (c == '\n') {
          newline();
        } else if (c != '\r') {
          if (nbsp) {
            ++i;
            cur_ += ' ';
          } else {
            cur_ += static_cast<char>(c);
          }
        }
        continue;
      }
      if (nbsp || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
        if (nbsp) ++i;
        space_ = !cur_.empty();
        continue;
      }
      if (space_) cur_ += ' ';
      space_ = false;
      cur_ += static_cast<char>(c);
    }
  }

  void newline() {
    while (!cur_.empty() && cur_.back() == ' ') cur_.pop_back();
    if (!cur_.empty()) {
      bytes_ += cur_.size() + 1;
      lines_.push_back(Out{std::move(cur_), block_});
    }
    cur_.clear();
    space_ = false;
  }

  /// Ends the line, and starts a new block if the current one has lines.
  void break_block() {
    newline();
    if (!lines_.empty() && lines_.back().block == block_) ++block_;
  }

  void add_line(std::string s) {
    newline();
    bytes_ += s.size() + 1;
    lines_.push_back(Out{std::move(s), block_});
  }

  std::vector<Out>& lines() { return lines_; }
  std::size_t bytes() const { return bytes_ + cur_.size(); }

 private:
  std::vector<Out> lines_;
  std::string cur_;
  bool space_ = false;
  int block_ = 0;
  std::size_t bytes_ = 0;
};

class Renderer {
 public:
  explicit Renderer(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  bool overflow() const { return overflow_; }

  void children(const xmlNode* n, Flow& flow, bool pre) {
    for (const xmlNode* c = n->children; c && !overflow_; c = c->next) node(c, flow, pre);
  }

  void node(const xmlNode* n, Flow& flow, bool pre) {
    if (flow.bytes() > max_bytes_) {
      overflow_ = true;
      return;
    }
    if (n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) {
      if (n->content) flow.text(reinterpret_cast<const char*>(n->content), pre);
      return;
    }
    if (n->type != XML_ELEMENT_NODE) return;
    const std::string_view name = name_of(n);
    if (one_of(name, kSkipped)) return;
    if (name == "br") {
      flow.newline();
      return;
    }
    if (name == "table") {
      table(n, flow);
      return;
    }
    if (name == "pre" || name == "textarea" || name == "listing") {
      flow.break_block();
      children(n, flow, true);
      flow.break_block();
      return;
    }
    if (name == "img") {
      return;
    }
    if (one_of(name, kBlock)) {
      flow.break_block();
      if (name == "li") flow.text("- ", false);
      children(n, flow, pre);
      flow.break_block();
      return;
    }
    // Inline element (span, a, b, td outside a table is covered by kBlock...)
    children(n, flow, pre);
  }

 private:
  void rows(const xmlNode* n, std::vector<const xmlNode*>& out) {
    for (const xmlNode* c = n->children; c; c = c->next) {
      if (c->type != XML_ELEMENT_NODE) continue;
      const std::string_view name = name_of(c);
      if (name == "tr") {
        out.push_back(c);
      } else if (name == "thead" || name == "tbody" || name == "tfoot") {
        rows(c, out);
      }
    }
  }

  void table(const xmlNode* n, Flow& flow) {
    flow.break_block();
    for (const xmlNode* c = n->children; c; c = c->next)
      if (c->type == XML_ELEMENT_NODE && name_of(c) == "caption") {
        Flow cap;
        children(c, cap, false);
        cap.newline();
        for (auto& l : cap.lines()) flow.add_line(std::move(l.text));
      }
    std::vector<const xmlNode*> trs;
    rows(n, trs);
    for (const xmlNode* tr : trs) {
      std::vector<std::vector<std::string>> cells;
      for (const xmlNode* td = tr->children; td && !overflow_; td = td->next) {
        if (td->type != XML_ELEMENT_NODE || (name_of(td) != "td" && name_of(td) != "th")) continue;
        Flow cell;
        children(td, cell, false);
        cell.newline();
        std::vector<std::string> lines;
        for (auto& l : cell.lines()) lines.push_back(std::move(l.text));
        cells.push_back(std::move(lines));
      }
      std::size_t height = 0;
      for (const auto& c : cells) height = std::max(height, c.size());
      for (std::size_t k = 0; k < height; ++k) {
        // Trailing empty cells are dropped; leading and inner ones keep the columns in place.
        std::size_t last = 0;
        for (std::size_t j = 0; j < cells.size(); ++j)
          if (k < cells[j].size() && !cells[j][k].empty()) last = j + 1;
        if (last == 0) continue;
        std::string line;
        for (std::size_t j = 0; j < last; ++j) {
          if (j > 0) line += " | ";
          if (k < cells[j].size()) line += cells[j][k];
        }
        flow.add_line(std::move(line));
      }
    }
    flow.break_block();
  }

  std::size_t max_bytes_;
  bool overflow_ = false;
};

// Element nesting depth of the tree, without recursion; stops counting once past `limit`.
bool deeper_than(const xmlNode* root, int limit) {
  int depth = 0;
  const xmlNode* n = root;
  for (;;) {
    if (n->children) {
      n = n->children;
      if (++depth > limit) return true;
      continue;
    }
    // Climb to the nearest ancestor-or-self with a next sibling, never leaving root's subtree.
    while (n != root && !n->next) {
      n = n->parent;
      --depth;
    }
    if (n == root) return false;
    n = n->next;
  }
}

// A BOM, or "charset" in the first 1024 bytes (<meta charset> or http-equiv Content-Type).
bool declares_charset(std::string_view b) {
  if (b.substr(0, 3) == "\xEF\xBB\xBF" || b.substr(0, 2) == "\xFF\xFE" || b.substr(0, 2) == "\xFE\xFF") return true;
  std::string head(b.substr(0, 1024));
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  return head.find("charset") != std::string::npos;
}

void head_metadata(const xmlNode* root, Document& doc) {
  if (!root) return;
  xmlChar* lang = xmlGetProp(root, reinterpret_cast<const xmlChar*>("lang"));
  if (lang) {
    if (*lang) doc.metadata["language"] = reinterpret_cast<const char*>(lang);
    xmlFree(lang);
  }
  for (const xmlNode* h = root->children; h; h = h->next) {
    if (h->type != XML_ELEMENT_NODE || name_of(h) != "head") continue;
    for (const xmlNode* m = h->children; m; m = m->next) {
      if (m->type != XML_ELEMENT_NODE) continue;
      if (name_of(m) == "title") {
        Flow f;
        for (const xmlNode* t = m->children; t; t = t->next)
          if (t->type == XML_TEXT_NODE && t->content) f.text(reinterpret_cast<const char*>(t->content), false);
        f.newline();
        if (!f.lines().empty()) doc.metadata["title"] = f.lines().front().text;
      } else if (name_of(m) == "meta") {
        xmlChar* key = xmlGetProp(m, reinterpret_cast<const xmlChar*>("name"));
        xmlChar* val = xmlGetProp(m, reinterpret_cast<const xmlChar*>("content"));
        if (key && val) {
          std::string k = reinterpret_cast<const char*>(key);
          std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
          if (k == "author" || k == "description" || k == "keywords" || k == "generator")
            doc.metadata[k] = reinterpret_cast<const char*>(val);
        }
        if (key) xmlFree(key);
        if (val) xmlFree(val);
      }
    }
  }
}

}  // namespace

Expected<Document> extract_html(std::string_view bytes, Document doc, const ExtractOptions& opts) {
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX))
    return tl::unexpected(ExtractError{doc.source, "HTML larger than 2 GiB"});
  // Attributes per element and elements in all, before libxml2 sees them (see xml/markup_scan.hpp);
  // UTF-16 is scanned as UTF-8.
  {
    const xml::ScanLimits limits{opts.max_xml_depth, opts.max_xml_attributes, opts.max_xml_nodes, true};
    xml::ScanResult scan;
    if (bytes.starts_with("\xFF\xFE") || bytes.starts_with("\xFE\xFF")) {
      auto utf8 = iconv_to_utf8(bytes.substr(2, (bytes.size() - 2) & ~std::size_t{1}), bytes[0] == '\xFF' ? "UTF-16LE" : "UTF-16BE", doc.source);
      if (!utf8) return tl::unexpected(ExtractError{doc.source, "HTML declares UTF-16 by its byte order mark but is not: " + utf8.error().reason});
      scan = xml::scan_markup(*utf8, limits);
    } else {
      scan = xml::scan_markup(bytes, limits);
    }
    if (scan.kind != xml::ScanResult::ok) return tl::unexpected(ExtractError{doc.source, scan.message("HTML", limits)});
  }
  const int options = HTML_PARSE_RECOVER | HTML_PARSE_NONET | HTML_PARSE_NOERROR |
                      HTML_PARSE_NOWARNING | HTML_PARSE_COMPACT;
  std::unique_ptr<htmlParserCtxt, void (*)(htmlParserCtxtPtr)> ctxt(htmlNewParserCtxt(), htmlFreeParserCtxt);
  if (!ctxt) return tl::unexpected(ExtractError{doc.source, "out of memory creating the HTML parser"});
  // Without a BOM or a declared charset libxml2 reads HTML as ISO-8859-1 (HTML 4). Instead, as
  // browsers sniff (WHATWG Encoding), bytes that are valid UTF-8 are read as UTF-8, and others in
  // the most likely legacy code page (the same guess as for text files).
  const char* encoding = nullptr;
  if (!declares_charset(bytes)) encoding = valid_utf8(bytes) ? "UTF-8" : guess_8bit_encoding(bytes);
  std::unique_ptr<xmlDoc, void (*)(xmlDoc*)> html(
      htmlCtxtReadMemory(ctxt.get(), bytes.data(), static_cast<int>(bytes.size()), doc.source.c_str(),
                         encoding, options),
      xmlFreeDoc);
  // libxml2 stops building the tree at its own depth limit (256) and, recovering, returns what it
  // had: the text below would be lost without a word, so that is an error.
  if (const xmlError* err = xmlCtxtGetLastError(ctxt.get());
      err && err->message && std::strstr(err->message, "Excessive depth") != nullptr)
    return tl::unexpected(ExtractError{doc.source, "HTML nesting deeper than the parser's limit of 256 elements"});
  if (!html) return tl::unexpected(ExtractError{doc.source, "HTML could not be parsed"});
  const xmlNode* root = xmlDocGetRootElement(html.get());
  if (!root) return tl::unexpected(ExtractError{doc.source, "HTML has no elements"});
  if (deeper_than(root, opts.max_xml_depth))
    return tl::unexpected(ExtractError{
        doc.source, "HTML nesting deeper than " + std::to_string(opts.max_xml_depth) + " elements"});
  head_metadata(root, doc);

  Flow flow;
  Renderer renderer(opts.max_text_bytes);
  renderer.node(root, flow, false);
  flow.newline();
  if (renderer.overflow() || flow.bytes() > opts.max_text_bytes)
    return tl::unexpected(ExtractError{doc.source, "extracted text larger than the limit of " +
                                                       std::to_string(opts.max_text_bytes) + " bytes"});
  Page page;
  for (auto& l : flow.lines()) page.lines.push_back(Line{std::move(l.text), std::nullopt, l.block});
  // Renumber blocks densely from 0.
  int next = -1, prev = -1;
  for (Line& l : page.lines) {
    if (l.block != prev) prev = l.block, ++next;
    l.block = next;
  }
  if (page.lines.empty()) return tl::unexpected(ExtractError{doc.source, "HTML has no visible text"});
  doc.pages.push_back(std::move(page));
  return doc;
}

}  // namespace quarry::detail
