// XML through the hardened parser of xml/xml_safe.hpp: one line per element that has text of its own
// (its text and CDATA children, whitespace collapsed), in document order. Each child element of the
// root starts a new block. The root's local name and namespace go to the metadata (they tell an
// e-invoice syntax apart: Invoice / CrossIndustryInvoice / InvoiceData).
#include <libxml/tree.h>

#include "extractors/formats.hpp"
#include "extractors/xml/xml_safe.hpp"

namespace quarry::detail {
namespace {

// Appends the node's own text (text and CDATA children), collapsing whitespace runs to one space.
void own_text(const xmlNode* n, std::string& out) {
  bool space = false;
  for (const xmlNode* c = n->children; c; c = c->next) {
    if ((c->type != XML_TEXT_NODE && c->type != XML_CDATA_SECTION_NODE) || !c->content) continue;
    for (const char* p = reinterpret_cast<const char*>(c->content); *p; ++p) {
      const char ch = *p;
      if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
        space = !out.empty();
        continue;
      }
      if (space) out += ' ';
      space = false;
      out += ch;
    }
    space = space || (!out.empty() && c->next);
  }
}

}  // namespace

Expected<Document> extract_xml(std::string_view bytes, Document doc, const ExtractOptions& opts) {
  auto parsed = xml::parse(bytes, doc.source, opts);
  if (!parsed) return tl::unexpected(parsed.error());
  const xmlNode* root = xmlDocGetRootElement(parsed->get());
  doc.metadata["root_element"] = std::string(xml::local_name(root));
  if (root->ns && root->ns->href) doc.metadata["namespace"] = reinterpret_cast<const char*>(root->ns->href);

  Page page;
  std::size_t text_bytes = 0;
  int block = 0;
  // Pre-order walk without recursion (depth is already bounded by the parser, but a loop costs nothing).
  const xmlNode* n = root;
  int depth = 0;
  for (;;) {
    if (n->type == XML_ELEMENT_NODE) {
      std::string t;
      own_text(n, t);
      while (!t.empty() && t.back() == ' ') t.pop_back();
      if (!t.empty()) {
        text_bytes += t.size() + 1;
        if (text_bytes > opts.max_text_bytes)
          return tl::unexpected(ExtractError{doc.source, "extracted text larger than the limit of " +
                                                             std::to_string(opts.max_text_bytes) + " bytes"});
        page.lines.push_back(Line{std::move(t), std::nullopt, block});
      }
    }
    const xmlNode* next_child = nullptr;
    if (n->type == XML_ELEMENT_NODE)
      for (const xmlNode* c = n->children; c; c = c->next)
        if (c->type == XML_ELEMENT_NODE) {
          next_child = c;
          break;
        }
    if (next_child) {
      n = next_child;
      ++depth;
      if (depth == 1 && !page.lines.empty() && page.lines.back().block == block) ++block;
      continue;
    }
    // Next element sibling of n or of its nearest ancestor, inside root's subtree.
    const xmlNode* s = nullptr;
    while (n != root) {
      for (s = n->next; s && s->type != XML_ELEMENT_NODE; s = s->next) {
      }
      if (s) break;
      n = n->parent;
      --depth;
    }
    if (n == root) break;
    n = s;
    if (depth == 1 && !page.lines.empty() && page.lines.back().block == block) ++block;
  }
  // Renumber blocks densely from 0.
  int next = -1, prev = -1;
  for (Line& l : page.lines) {
    if (l.block != prev) prev = l.block, ++next;
    l.block = next;
  }
  if (page.lines.empty()) return tl::unexpected(ExtractError{doc.source, "XML has no text content"});
  doc.pages.push_back(std::move(page));
  return doc;
}

}  // namespace quarry::detail
