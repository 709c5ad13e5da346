// Helpers shared by the extractor tests: where the real-document corpora are, and a libxml2 reader
// for the ground-truth XML (read independently of the code under test).
#pragma once

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace quarry::test {

inline std::filesystem::path corpora() { return std::filesystem::path(QUARRY_SHARED_DIR) / "corpora"; }

/// Regular files of a folder (not recursive), sorted.
inline std::vector<std::filesystem::path> files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

struct XmlDoc {
  std::unique_ptr<xmlDoc, void (*)(xmlDoc*)> doc{nullptr, xmlFreeDoc};
  xmlNode* root() const { return doc ? xmlDocGetRootElement(doc.get()) : nullptr; }
};

inline XmlDoc read_xml(const std::string& bytes) {
  XmlDoc d;
  d.doc.reset(xmlReadMemory(bytes.data(), static_cast<int>(bytes.size()), "test.xml", nullptr,
                            XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
  return d;
}

inline XmlDoc read_xml_file(const std::filesystem::path& p) {
  XmlDoc d;
  d.doc.reset(xmlReadFile(p.string().c_str(), nullptr, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
  return d;
}

inline std::string local(const xmlNode* n) { return n && n->name ? reinterpret_cast<const char*>(n->name) : ""; }

/// Text of the first element (pre-order) with this local name under `n`, "" if none.
inline std::string first_text(const xmlNode* n, std::string_view name) {
  for (const xmlNode* c = n ? n->children : nullptr; c; c = c->next) {
    if (c->type != XML_ELEMENT_NODE) continue;
    if (local(c) == name) {
      xmlChar* t = xmlNodeGetContent(c);
      std::string s = t ? reinterpret_cast<const char*>(t) : "";
      xmlFree(t);
      return s;
    }
    if (std::string s = first_text(c, name); !s.empty()) return s;
  }
  return {};
}

}  // namespace quarry::test
