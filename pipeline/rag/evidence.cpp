// Evidence check of RAG answers (see rag.hpp).
#include "pipeline/rag/rag.hpp"

#include <algorithm>
#include <set>

#include "engine/grammar/grounding.hpp"

namespace quarry::rag {

std::string normalize_whitespace(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool pending_space = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    bool space = c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
    std::size_t len = 1;
    if (!space && static_cast<unsigned char>(c) == 0xC2 && i + 1 < text.size() &&
        static_cast<unsigned char>(text[i + 1]) == 0xA0) {  // U+00A0 no-break space
      space = true;
      len = 2;
    }
    if (space) {
      pending_space = !out.empty();
      i += len - 1;
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

std::vector<schemas::Violation> check_evidence(const nlohmann::json& answer, const Document& doc) {
  std::vector<schemas::Violation> out;
  if (!answer.is_object()) return out;
  try {
    const int n_pages = static_cast<int>(doc.pages.size());
    std::vector<std::string> page_text(doc.pages.size());
    for (std::size_t p = 0; p < doc.pages.size(); ++p) {
      std::string t;
      for (const auto& l : doc.pages[p].lines) t.append(l.text).append("\n");
      page_text[p] = normalize_whitespace(t);
    }
    const std::string whole = normalize_whitespace(doc.text());
    std::vector<std::string> raw_pages;  // for quotes that only the grounded copy rule finds (made on demand)

    // Listed pages, as indices into doc.pages (pages are numbered by Page::number).
    std::vector<std::size_t> listed;
    if (auto it = answer.find("pages"); it != answer.end() && it->is_array()) {
      for (std::size_t i = 0; i < it->size(); ++i) {
        const auto& v = (*it)[i];
        if (!v.is_number_integer()) continue;
        const auto page = v.get<long long>();
        std::size_t found = doc.pages.size();
        for (std::size_t p = 0; p < doc.pages.size(); ++p)
          if (doc.pages[p].number == page) found = p;
        if (found == doc.pages.size())
          out.push_back({"/pages/" + std::to_string(i), "rule:pages",
                         "page " + std::to_string(page) + " is not a page of the document (1.." +
                             std::to_string(n_pages) + ")"});
        else
          listed.push_back(found);
      }
    }

    auto it = answer.find("evidence");
    if (it == answer.end() || !it->is_array()) return out;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const auto& v = (*it)[i];
      if (!v.is_string()) continue;
      const std::string quote = normalize_whitespace(v.get_ref<const std::string&>());
      if (quote.empty()) continue;  // minLength is the schema's
      const std::string pointer = "/evidence/" + std::to_string(i);
      if (whole.find(quote) == std::string::npos) {
        if (raw_pages.empty()) raw_pages = engine::grammar::split_pages(doc.text());
        const auto span = engine::grammar::find_copy_span(raw_pages, v.get_ref<const std::string&>());
        if (!span) {
          out.push_back({pointer, "rule:evidence", "the quote does not occur in the document (white space normalised)"});
          continue;
        }
        // A quote with document white space left out: on the page of its span.
        if (!listed.empty() && std::find(listed.begin(), listed.end(), span->page) == listed.end())
          out.push_back({pointer, "rule:evidence_page", "the quote occurs in the document, but on none of the listed pages"});
        continue;
      }
      if (listed.empty()) continue;
      auto on_page = [&](std::size_t p) { return page_text[p].find(quote) != std::string::npos; };
      // A quote across the break between pages p and p + 1 (in neither page alone) counts for both.
      auto spans = [&](std::size_t p) {
        return p + 1 < page_text.size() && !on_page(p) && !on_page(p + 1) &&
               (page_text[p] + " " + page_text[p + 1]).find(quote) != std::string::npos;
      };
      bool on_listed = false;
      for (std::size_t p : listed) {
        on_listed = on_page(p) || spans(p) || (p > 0 && spans(p - 1));
        if (on_listed) break;
      }
      if (!on_listed)
        out.push_back({pointer, "rule:evidence_page", "the quote occurs in the document, but on none of the listed pages"});
    }
  } catch (const std::exception& e) {  // only allocation failure can reach here
    out.push_back({"", "rule:internal", e.what()});
  }
  return out;
}

std::optional<std::vector<int>> evidence_pages(const nlohmann::json& answer, const std::vector<std::string>& pages) {
  if (!answer.is_object()) return std::nullopt;
  auto it = answer.find("evidence");
  if (it == answer.end() || !it->is_array()) return std::nullopt;
  std::set<int> found;
  try {
    for (const auto& q : *it) {
      if (!q.is_string()) return std::nullopt;
      if (normalize_whitespace(q.get_ref<const std::string&>()).empty()) continue;
      const auto span = engine::grammar::find_copy_span(pages, q.get_ref<const std::string&>());
      if (!span) return std::nullopt;
      found.insert(static_cast<int>(span->page) + 1);
    }
  } catch (const std::exception&) {  // only allocation failure can reach here
    return std::nullopt;
  }
  return std::vector<int>(found.begin(), found.end());
}

}  // namespace quarry::rag
