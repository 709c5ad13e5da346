// TEMPORARY minimal chunker so that `quarry ingest --chunks` links before the real chunker is merged
// (the merge replaces this file). Greedy: lines are packed until the next would pass max_tokens;
// the overlap repeats whole trailing lines of the previous chunk up to overlap_tokens.
#include "pipeline/chunk.hpp"

#include <cmath>

namespace quarry {

std::size_t EstimateTokenCounter::count(std::string_view text) const {
  std::size_t latin = 0, ideographic = 0;
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len >= 3 && c >= 0xE3) {
      ++ideographic;
    } else {
      latin += len;
    }
    i += len;
  }
  return ideographic + static_cast<std::size_t>(std::ceil(static_cast<double>(latin) / 3.5));
}

std::vector<Chunk> chunk_document(const Document& doc, const TokenCounter& counter, const ChunkOptions& opts) {
  struct Item {
    std::string_view text;
    int page;
    std::size_t tokens;
  };
  std::vector<Item> items;
  for (const Page& p : doc.pages)
    for (const Line& l : p.lines) items.push_back({l.text, p.number, counter.count(l.text) + 1});
  std::vector<Chunk> out;
  std::size_t i = 0;
  while (i < items.size()) {
    Chunk c;
    c.index = out.size();
    c.first_page = items[i].page;
    std::size_t j = i;
    while (j < items.size() && (j == i || c.tokens + items[j].tokens <= opts.max_tokens)) {
      if (j > i) c.text += '\n';
      c.text += items[j].text;
      c.tokens += items[j].tokens;
      c.last_page = items[j].page;
      ++j;
    }
    c.tokens = counter.count(c.text);
    out.push_back(std::move(c));
    if (j >= items.size()) break;
    std::size_t back = j, overlap = 0;
    while (back > i + 1 && overlap + items[back - 1].tokens <= opts.overlap_tokens) overlap += items[--back].tokens;
    i = back;
  }
  return out;
}

}  // namespace quarry
