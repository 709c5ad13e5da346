// BM25 retrieval over a document's chunks (see rag.hpp for the formula and its source).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "engine/tokenizer/unicode.hpp"
#include "pipeline/rag/rag.hpp"

namespace quarry::rag {
namespace {

// Decodes the code point at s[i]; returns its byte length (1 with cp = U+FFFD for an invalid byte).
std::size_t decode(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](std::size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF && cont(1)) {
    cp = (char32_t(c & 0x1F) << 6) | (b(1) & 0x3F);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF && cont(1) && cont(2)) {
    cp = (char32_t(c & 0x0F) << 12) | (char32_t(b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    if (cp >= 0x800) return 3;
  } else if (c >= 0xF0 && c <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    cp = (char32_t(c & 0x07) << 18) | (char32_t(b(1) & 0x3F) << 12) | (char32_t(b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    if (cp >= 0x10000 && cp <= 0x10FFFF) return 4;
  }
  cp = 0xFFFD;
  return 1;
}

bool is_word(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (cp <= 0xBF) return false;                    // Latin-1 punctuation and symbols, NBSP
  if (cp == 0xD7 || cp == 0xF7) return false;      // multiplication and division signs
  if (cp >= 0x2000 && cp <= 0x206F) return false;  // general punctuation (dashes, quotes, spaces)
  if (cp >= 0x3000 && cp <= 0x303F) return false;  // CJK symbols and punctuation
  if (cp == 0xFFFD) return false;
  return true;
}

// Lower case for ASCII, Latin-1 Supplement and Latin Extended-A (Unicode simple case mapping).
char32_t lower(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp >= 0x100 && cp <= 0x137) return cp | 1;                      // Āā ... Ķķ: even upper
  if (cp >= 0x139 && cp <= 0x148) return (cp % 2 == 1) ? cp + 1 : cp;  // Ĺĺ ... Ňň: odd upper
  if (cp >= 0x14A && cp <= 0x177) return cp | 1;                      // Ŋŋ ... Ŷŷ (Őő, Űű): even upper
  if (cp == 0x178) return 0xFF;                                       // Ÿ
  if (cp >= 0x179 && cp <= 0x17E) return (cp % 2 == 1) ? cp + 1 : cp;  // Źź Żż Žž: odd upper
  return cp;
}

}  // namespace

std::vector<std::string> bm25_terms(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  std::size_t cur_cps = 0;
  bool cur_digit = false;
  auto flush = [&] {
    if (!cur.empty() && (cur_cps > 1 || cur_digit)) out.push_back(cur);
    cur.clear();
    cur_cps = 0;
  };
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    i += decode(text, i, cp);
    if (is_word(cp)) {
      if (cur.empty()) cur_digit = cp >= '0' && cp <= '9';
      quarry::engine::unicode::append_utf8(cur, lower(cp));
      ++cur_cps;
    } else {
      flush();
    }
  }
  flush();
  return out;
}

Bm25Index::Bm25Index(const std::vector<std::string>& passages, Bm25Params params) : params_(params) {
  doc_len_.reserve(passages.size());
  std::size_t total = 0;
  for (std::size_t d = 0; d < passages.size(); ++d) {
    auto terms = bm25_terms(passages[d]);
    doc_len_.push_back(terms.size());
    total += terms.size();
    std::sort(terms.begin(), terms.end());
    for (std::size_t i = 0; i < terms.size();) {
      std::size_t j = i;
      while (j < terms.size() && terms[j] == terms[i]) ++j;
      postings_[terms[i]].push_back({static_cast<std::uint32_t>(d), static_cast<std::uint32_t>(j - i)});
      i = j;
    }
  }
  avgdl_ = passages.empty() ? 0.0 : static_cast<double>(total) / static_cast<double>(passages.size());
}

std::vector<double> Bm25Index::scores(std::string_view query) const {
  std::vector<double> s(doc_len_.size(), 0.0);
  if (doc_len_.empty()) return s;
  const double n_docs = static_cast<double>(doc_len_.size());
  const double k1 = params_.k1, b = params_.b;
  std::unordered_set<std::string> seen;
  for (const auto& term : bm25_terms(query)) {
    if (!seen.insert(term).second) continue;
    auto it = postings_.find(term);
    if (it == postings_.end()) continue;
    const double n = static_cast<double>(it->second.size());
    const double idf = std::log(1.0 + (n_docs - n + 0.5) / (n + 0.5));
    for (const auto& p : it->second) {
      const double tf = p.tf;
      const double norm = avgdl_ > 0 ? static_cast<double>(doc_len_[p.passage]) / avgdl_ : 1.0;
      s[p.passage] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * norm));
    }
  }
  return s;
}

std::vector<std::size_t> ranked(const Bm25Index& index, std::string_view query) {
  auto s = index.scores(query);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] > 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s[a] > s[b]; });
  return order;
}

std::vector<std::size_t> retrieve(const Bm25Index& index, std::string_view query, const std::vector<std::size_t>& tokens,
                                  std::size_t token_budget, std::size_t max_passages) {
  std::vector<std::size_t> chosen;
  std::size_t used = 0;
  for (std::size_t i : ranked(index, query)) {
    if (max_passages && chosen.size() >= max_passages) break;
    const std::size_t t = i < tokens.size() ? tokens[i] : 0;
    if (used + t > token_budget) continue;
    used += t;
    chosen.push_back(i);
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

std::vector<Chunk> page_chunks(const Document& doc, const TokenCounter& counter, const ChunkOptions& opts) {
  std::vector<Chunk> out;
  for (const auto& page : doc.pages) {
    Document one;
    one.source = doc.source;
    one.pages.push_back(page);
    for (auto& c : chunk_document(one, counter, opts)) {
      c.index = out.size();
      c.first_page = c.last_page = page.number;
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace quarry::rag
