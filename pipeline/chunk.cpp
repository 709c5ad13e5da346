// Token-aware chunking of a Document (see chunk.hpp).
//
// EstimateTokenCounter
//   Byte-level BPE vocabularies of ~150K entries (Qwen2/Qwen3, Llama 3) encode English and other
//   Latin-script prose at about 3.5-4.5 bytes per token, but Qwen2/Qwen3 split every number into
//   single digits (their pre-tokenizer matches \p{N} one character at a time), and invoices are
//   full of numbers. So the estimate counts:
//     - each ASCII digit as one token;
//     - each ideograph or syllable (CJK unified ideographs, kana, hangul, CJK symbols, fullwidth
//       forms) as one token, as these vocabularies give them one token or more per character;
//     - every other byte at 3.5 bytes per token, rounded up once for the text:
//     count(text) = digits + ideographs + ceil(other_bytes / 3.5)
//   Measured against the Qwen3 tokenizer (tools/samples/estimate_check.py), estimate / real tokens:
//   0.82-0.92 on the plain-text sample invoices (bytes / 3.5 alone: 0.60-0.65), 0.94-1.32 on the
//   `pdftotext -layout` text of the sample PDFs, 1.41 on the long sample agreement, and 1.35 on the
//   real NAV and ZUGFeRD PDFs of the shared corpora (layout whitespace is cheap in BPE). Keep ~20%
//   headroom in chunk budgets when no tokenizer is given.
//   The estimate is sub-additive: count(a) + count(b) >= count(a + b), which the chunker relies on
//   when it plans with per-line counts (it still re-counts every chunk it emits). Bytes that are not
//   valid UTF-8 count as other bytes.
//
// chunk_document
//   1. Every line gets a cost: count(line) + count("\n") (the separator that joins it to the next).
//   2. Greedy packing from a start line s: the window [s, e_max) is the longest run whose cost fits
//      max_tokens. If the window does not reach the end of the document, the cut is moved back to
//      the latest page boundary, else the latest block boundary, inside the window, provided the
//      chunk up to it still holds at least half of max_tokens (so that a boundary near the start
//      does not produce tiny chunks); otherwise the cut is the end of the window. (The planned
//      costs over-estimate a joined text by up to one token per line, so the window is first
//      extended by galloping and bisecting on exact counts of the joined text.)
//   3. The next chunk starts with the longest suffix of whole lines of the previous chunk whose cost
//      fits overlap_tokens, shortened if needed so that at least one new line fits beside it, and it
//      always starts after the previous chunk's start (progress is guaranteed).
//   4. A line whose own count exceeds max_tokens becomes chunks of its own: it is cut at whitespace
//      (the whitespace at a cut is dropped), and a run without whitespace longer than the limit is
//      cut at UTF-8 code point boundaries (binary search on the largest prefix that fits). No overlap
//      is carried into or out of such a line.
//   5. Each emitted chunk is counted again on its exact text; if a counter that is not sub-additive
//      (a real tokenizer can merge across a join) reports more than max_tokens, the chunk gives up
//      its last line (or its overlap) until it fits.
// The approach follows the "recursive character splitter" family (LangChain / LlamaIndex sentence
// splitters): separators in order of preference, a size limit, overlap; here the separators are the
// document's own structure (page, block, line) and nothing inside a line is cut unless it must be.
#include "pipeline/chunk.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace quarry {
namespace {

// Decodes one UTF-8 code point at s[i]. Returns its length in bytes (1 for an invalid byte, with
// cp set to 0xFFFD) so that callers always make progress.
std::size_t decode_utf8(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](std::size_t k) {
    return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
  };
  auto byte = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  if (b0 >= 0xC2 && b0 < 0xE0 && cont(1)) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | byte(1);
    return 2;
  }
  if (b0 >= 0xE0 && b0 < 0xF0 && cont(1) && cont(2)) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (byte(1) << 6) | byte(2);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return 3;
  } else if (b0 >= 0xF0 && b0 < 0xF5 && cont(1) && cont(2) && cont(3)) {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (byte(1) << 12) | (byte(2) << 6) | byte(3);
    if (cp >= 0x10000 && cp <= 0x10FFFF) return 4;
  }
  cp = 0xFFFD;
  return 1;
}

// Ideographic and syllabic scripts counted one token per code point.
bool is_ideographic(char32_t c) {
  return (c >= 0x1100 && c <= 0x11FF) ||    // Hangul Jamo
         (c >= 0x2E80 && c <= 0x2FDF) ||    // CJK radicals, Kangxi radicals
         (c >= 0x3000 && c <= 0x30FF) ||    // CJK symbols and punctuation, Hiragana, Katakana
         (c >= 0x3100 && c <= 0x31FF) ||    // Bopomofo, Hangul compatibility Jamo, Katakana ext.
         (c >= 0x3200 && c <= 0x4DBF) ||    // enclosed CJK, compatibility, CJK ext. A
         (c >= 0x4E00 && c <= 0x9FFF) ||    // CJK unified ideographs
         (c >= 0xA000 && c <= 0xA4CF) ||    // Yi
         (c >= 0xAC00 && c <= 0xD7AF) ||    // Hangul syllables
         (c >= 0xF900 && c <= 0xFAFF) ||    // CJK compatibility ideographs
         (c >= 0xFF00 && c <= 0xFFEF) ||    // halfwidth and fullwidth forms
         (c >= 0x20000 && c <= 0x3FFFF);    // CJK ext. B and beyond
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return is_space(c); });
}

// Largest prefix length of s (at a code point boundary, > 0) whose count fits `limit`; at least one
// code point even if that alone does not fit.
std::size_t fitting_prefix(std::string_view s, const TokenCounter& counter, std::size_t limit) {
  // Candidate ends: code point boundaries. A token is rarely longer than 32 bytes, so the answer
  // lies below limit * 32 bytes; searching only there keeps a huge line linear overall.
  std::vector<std::size_t> ends;
  const std::size_t cap = std::min<std::size_t>(s.size(), std::max<std::size_t>(limit, 1) * 32);
  char32_t cp = 0;
  for (std::size_t i = 0; i < s.size();) {
    i += decode_utf8(s, i, cp);
    ends.push_back(i);
    if (i >= cap) break;
  }
  std::size_t lo = 0, hi = ends.size();  // ends[lo-1] fits (lo = 0: nothing tested yet)
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (counter.count(s.substr(0, ends[mid])) <= limit)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo == 0 ? ends.front() : ends[lo - 1];
}

struct Span {
  std::size_t begin, end;  // byte offsets into the line
};

// Splits an over-long line into pieces whose text counts at most `limit`.
std::vector<Span> split_long_line(std::string_view line, const TokenCounter& counter, std::size_t limit) {
  // Segments: words (maximal non-space runs) with the whitespace before them; words that do not
  // fit alone are cut at code point boundaries.
  struct Segment {
    std::size_t ws_begin, begin, end;  // whitespace [ws_begin, begin), word [begin, end)
    std::size_t cost;                  // count of whitespace + word
  };
  std::vector<Segment> segs;
  std::size_t i = 0;
  while (i < line.size()) {
    const std::size_t ws = i;
    while (i < line.size() && is_space(line[i])) ++i;
    const std::size_t b = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (b == i) break;  // trailing whitespace
    std::size_t pos = b;
    bool first = true;
    while (pos < i) {
      std::string_view rest = line.substr(pos, i - pos);
      std::size_t len = rest.size();
      if (counter.count(rest) > limit) len = fitting_prefix(rest, counter, limit);
      const std::size_t wsb = first ? ws : pos;
      segs.push_back({wsb, pos, pos + len, counter.count(line.substr(wsb, pos + len - wsb))});
      pos += len;
      first = false;
    }
  }
  std::vector<Span> out;
  std::size_t k = 0;
  while (k < segs.size()) {
    // Greedy: first segment without its leading whitespace, then whole segments.
    std::size_t cost = counter.count(line.substr(segs[k].begin, segs[k].end - segs[k].begin));
    std::size_t j = k + 1;
    while (j < segs.size() && cost + segs[j].cost <= limit) cost += segs[j++].cost;
    auto exact = [&](std::size_t end) {
      return counter.count(line.substr(segs[k].begin, segs[end - 1].end - segs[k].begin));
    };
    // Re-count the exact text; a non-sub-additive counter may need fewer segments ...
    while (j > k + 1 && exact(j) > limit) --j;
    // ... and a sub-additive one usually allows more: gallop, then bisect, on exact counts.
    std::size_t step = 1;
    auto fits = [&](std::size_t end) { return end <= segs.size() && exact(end) <= limit; };
    while (fits(j + step)) {
      j += step;
      step *= 2;
    }
    while (step > 1) {
      step /= 2;
      if (fits(j + step)) j += step;
    }
    out.push_back({segs[k].begin, segs[j - 1].end});
    k = j;
  }
  return out;
}

struct FlatLine {
  std::string_view text;
  int page;
  bool starts_page;   // first line of its page
  bool starts_block;  // first line of its block (or page)
  std::size_t cost;   // count(text) + separator
  bool huge;          // count(text) > max_tokens
};

}  // namespace

std::size_t EstimateTokenCounter::count(std::string_view text) const {
  std::size_t other_bytes = 0, singles = 0;  // singles: digits and ideographs, one token each
  char32_t cp = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = decode_utf8(text, i, cp);
    if ((n == 1 && cp >= '0' && cp <= '9') || (n > 1 && is_ideographic(cp)))
      ++singles;
    else
      other_bytes += n;
    i += n;
  }
  // ceil(other_bytes / 3.5) = ceil(2 * other_bytes / 7)
  return (2 * other_bytes + 6) / 7 + singles;
}

std::vector<Chunk> chunk_document(const Document& doc, const TokenCounter& counter, const ChunkOptions& opts) {
  if (opts.max_tokens == 0) throw std::invalid_argument("chunk_document: max_tokens must be > 0");
  const std::size_t max = opts.max_tokens;
  const std::size_t sep = counter.count("\n");

  std::vector<FlatLine> lines;
  for (const Page& page : doc.pages) {
    for (std::size_t i = 0; i < page.lines.size(); ++i) {
      const Line& l = page.lines[i];
      const std::size_t c = counter.count(l.text);
      lines.push_back({l.text, page.number, i == 0, i == 0 || l.block != page.lines[i - 1].block, c + sep, c > max});
    }
  }
  const std::size_t n = lines.size();
  // prefix[i] = sum of cost of lines [0, i); cost of a chunk [a, b) = prefix[b] - prefix[a] - sep.
  std::vector<std::size_t> prefix(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + lines[i].cost;
  auto cost = [&](std::size_t a, std::size_t b) { return prefix[b] - prefix[a] - sep; };

  // next_huge[i] = index of the first huge line at or after i (n if none).
  std::vector<std::size_t> next_huge(n + 1, n);
  for (std::size_t i = n; i-- > 0;) next_huge[i] = lines[i].huge ? i : next_huge[i + 1];

  std::vector<Chunk> out;
  auto emit = [&](std::string text, int first_page, int last_page, std::size_t tokens) {
    if (is_blank(text)) return;
    Chunk c;
    c.index = out.size();
    c.text = std::move(text);
    c.first_page = first_page;
    c.last_page = last_page;
    c.tokens = tokens;
    out.push_back(std::move(c));
  };
  auto join = [&](std::size_t a, std::size_t b) {
    std::string t;
    for (std::size_t i = a; i < b; ++i) {
      if (i > a) t += '\n';
      t += lines[i].text;
    }
    return t;
  };

  std::size_t s = 0;         // start of the current chunk (may include overlap lines)
  std::size_t fresh = 0;     // first line not yet emitted in any chunk
  while (fresh < n) {
    if (lines[fresh].huge) {
      for (const Span& sp : split_long_line(lines[fresh].text, counter, max)) {
        std::string t(lines[fresh].text.substr(sp.begin, sp.end - sp.begin));
        const std::size_t tok = counter.count(t);
        emit(std::move(t), lines[fresh].page, lines[fresh].page, tok);
      }
      s = ++fresh;
      continue;
    }
    // Window: extend from s while the next line fits by the planned costs and is not huge; then
    // gallop further on exact counts of the joined text (the per-line costs over-estimate by up to
    // one token per line, which would leave chunks of short lines under-filled).
    std::size_t e = std::max(s + 1, fresh + 1);
    while (e < n && !lines[e].huge && cost(s, e + 1) <= max) ++e;
    {
      const std::size_t hi = next_huge[e];
      auto fits = [&](std::size_t b) { return b <= hi && counter.count(join(s, b)) <= max; };
      std::size_t step = 1;
      while (fits(e + step)) {
        e += step;
        step *= 2;
      }
      while (step > 1) {
        step /= 2;
        if (fits(e + step)) e += step;
      }
    }
    if (e < n) {
      // Prefer a page boundary, then a block boundary, that keeps the chunk at least half full and
      // still moves past the lines already emitted.
      auto latest = [&](bool page_only) -> std::size_t {
        for (std::size_t b = e; b > fresh; --b) {
          if (2 * cost(s, b) < max) break;
          if (page_only ? lines[b].starts_page : lines[b].starts_block) return b;
        }
        return 0;
      };
      if (std::size_t b = latest(true)) e = b;
      else if (std::size_t b2 = latest(false)) e = b2;
    }
    // Exact count; give up lines (then the overlap) while a non-sub-additive counter says too much.
    std::string text = join(s, e);
    std::size_t tok = counter.count(text);
    while (tok > max) {
      if (e > fresh + 1) --e;
      else if (s < fresh) s = fresh;
      else break;  // one line that alone counts <= max but not in context: cannot happen for s == fresh
      text = join(s, e);
      tok = counter.count(text);
    }
    if (tok > max) {  // treat as huge
      lines[fresh].huge = true;
      continue;
    }
    emit(std::move(text), lines[s].page, lines[e - 1].page, tok);
    fresh = e;
    if (fresh >= n) break;
    // Overlap: the longest suffix of [s, e) within overlap_tokens, leaving room for the next line,
    // starting after s.
    std::size_t o = e;
    if (!lines[e].huge) {
      while (o > s + 1 && cost(o - 1, e) <= opts.overlap_tokens && cost(o - 1, e + 1) <= max) --o;
    }
    s = o;
  }
  return out;
}

}  // namespace quarry
