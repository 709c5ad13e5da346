// Chunking (pipeline/chunk.hpp): the token estimate, limits, cut points, page ranges, overlap,
// over-long lines and UTF-8 safety, on synthetic documents and on real PDFs' text.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tests/common/run_command.hpp"
#include "pipeline/chunk.hpp"

namespace fs = std::filesystem;
using quarry::Chunk;
using quarry::ChunkOptions;
using quarry::Document;
using quarry::EstimateTokenCounter;

namespace {

struct L {
  std::string text;
  int block = 0;
};

Document make_doc(const std::vector<std::vector<L>>& pages) {
  Document d;
  int no = 1;
  for (const auto& p : pages) {
    quarry::Page page;
    page.number = no++;
    for (const auto& l : p) page.lines.push_back({l.text, std::nullopt, l.block});
    d.pages.push_back(std::move(page));
  }
  return d;
}

// A line of exactly `bytes` ASCII bytes (letters and spaces, no digits), tagged with `tag` spelled
// in letters so that lines differ.
std::string ascii_line(std::size_t bytes, int tag) {
  std::string s = "L";
  for (int t = tag; t > 0; t /= 10) s += static_cast<char>('a' + t % 10);
  s += " ";
  while (s.size() < bytes) s += (s.size() % 6 == 5) ? ' ' : static_cast<char>('a' + (s.size() % 26));
  s.resize(bytes);
  if (s.back() == ' ') s.back() = 'z';
  return s;
}

std::vector<std::string> split_lines(const std::string& t) {
  std::vector<std::string> out;
  std::size_t b = 0;
  for (;;) {
    std::size_t e = t.find('\n', b);
    out.push_back(t.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Each chunk must be a contiguous run of whole document lines; returns, per chunk, the index of its
// first and one-past-last line in the flattened document (checked, not assumed).
struct Run {
  std::size_t begin, end;
};
std::vector<Run> locate(const Document& doc, const std::vector<Chunk>& chunks) {
  std::vector<std::string> flat;
  std::vector<int> page_of;
  for (const auto& p : doc.pages)
    for (const auto& l : p.lines) {
      flat.push_back(l.text);
      page_of.push_back(p.number);
    }
  std::vector<Run> runs;
  std::size_t from = 0;
  for (const Chunk& c : chunks) {
    auto ls = split_lines(c.text);
    bool found = false;
    // A chunk starts no later than where the previous one ended, and after the previous start;
    // the latest matching start is taken (overlap is the longest suffix that fits).
    const std::size_t lowest = runs.empty() ? 0 : runs.back().begin + 1;
    for (std::size_t b = from + 1; b-- > lowest && !found;) {
      if (b + ls.size() > flat.size()) continue;
      if (std::equal(ls.begin(), ls.end(), flat.begin() + static_cast<std::ptrdiff_t>(b))) {
        runs.push_back({b, b + ls.size()});
        EXPECT_EQ(c.first_page, page_of[b]) << "chunk " << c.index;
        EXPECT_EQ(c.last_page, page_of[b + ls.size() - 1]) << "chunk " << c.index;
        from = b + ls.size();
        found = true;
      }
    }
    EXPECT_TRUE(found) << "chunk " << c.index << " is not a run of whole lines:\n" << c.text;
    if (!found) break;
  }
  return runs;
}

void expect_well_formed(const Document& doc, const std::vector<Chunk>& chunks, const ChunkOptions& o,
                        const quarry::TokenCounter& counter) {
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].index, i);
    EXPECT_LE(chunks[i].tokens, o.max_tokens) << "chunk " << i;
    EXPECT_EQ(chunks[i].tokens, counter.count(chunks[i].text)) << "chunk " << i;
    EXPECT_LE(chunks[i].first_page, chunks[i].last_page);
  }
  auto runs = locate(doc, chunks);
  std::size_t total = 0;
  for (const auto& p : doc.pages) total += p.lines.size();
  ASSERT_EQ(runs.size(), chunks.size());
  if (total > 0) {
    ASSERT_FALSE(runs.empty());
    EXPECT_EQ(runs.front().begin, 0u);
    EXPECT_EQ(runs.back().end, total) << "the last lines are missing";
    for (std::size_t i = 1; i < runs.size(); ++i) {
      EXPECT_LE(runs[i].begin, runs[i - 1].end) << "lines skipped before chunk " << i;
      EXPECT_GT(runs[i].end, runs[i - 1].end) << "chunk " << i << " adds no new line";
      EXPECT_GT(runs[i].begin, runs[i - 1].begin) << "chunk " << i << " does not progress";
    }
  }
}

}  // namespace

TEST(EstimateTokenCounter, LatinBytesOverThreePointFiveRoundedUp) {
  EstimateTokenCounter c;
  EXPECT_EQ(c.count(""), 0u);
  EXPECT_EQ(c.count("a"), 1u);
  EXPECT_EQ(c.count("abcdefg"), 2u);       // 7 / 3.5 = 2
  EXPECT_EQ(c.count("abcdefgh"), 3u);      // 8 / 3.5 = 2.29 -> 3
  EXPECT_EQ(c.count(std::string(700, 'x')), 200u);
  EXPECT_EQ(c.count("\xC5\x91\xC5\xB1"), 2u);  // "őű": 4 bytes -> ceil(1.14) = 2
  EXPECT_EQ(c.count("\n"), 1u);
}

TEST(EstimateTokenCounter, DigitsCountOneEach) {
  EstimateTokenCounter c;
  EXPECT_EQ(c.count("2021"), 4u);
  EXPECT_EQ(c.count("1 234,56"), 6u + 1u);          // 6 digits + ceil(2 bytes / 3.5)
  EXPECT_EQ(c.count("Total: 99"), 2u + 2u);         // 2 digits + ceil(7 / 3.5)
  EXPECT_EQ(c.count("\xEF\xBC\x91"), 1u);             // fullwidth digit one: an ideographic-range form
}

TEST(EstimateTokenCounter, IdeographsCountOnePerCodePoint) {
  EstimateTokenCounter c;
  EXPECT_EQ(c.count("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"), 3u);   // 日本語
  EXPECT_EQ(c.count("ab\xE6\x97\xA5\xE6\x9C\xAC"), 3u);              // ab + 2 ideographs
  EXPECT_EQ(c.count("\xED\x95\x9C\xEA\xB8\x80"), 2u);               // 한글
  EXPECT_EQ(c.count("\xE3\x81\x82\xE3\x82\xA2"), 2u);               // あア
}

TEST(EstimateTokenCounter, InvalidUtf8CountsAsBytes) {
  EstimateTokenCounter c;
  EXPECT_EQ(c.count("\xFF\xFE\xE6\x97"), 2u);  // 4 bytes that are not UTF-8 -> ceil(4/3.5)
}

TEST(Chunk, EmptyDocuments) {
  EstimateTokenCounter c;
  EXPECT_TRUE(quarry::chunk_document(Document{}, c).empty());
  EXPECT_TRUE(quarry::chunk_document(make_doc({{}, {}}), c).empty());
  EXPECT_TRUE(quarry::chunk_document(make_doc({{{""}, {"   "}}, {{""}}}), c).empty());
}

TEST(Chunk, ZeroLimitIsAProgrammingError) {
  EstimateTokenCounter c;
  EXPECT_THROW(quarry::chunk_document(make_doc({{{"x"}}}), c, {0, 0}), std::invalid_argument);
}

TEST(Chunk, SmallDocumentIsOneChunk) {
  EstimateTokenCounter c;
  auto doc = make_doc({{{"Invoice 1"}, {"Total 10"}}, {{"Page two"}}});
  auto chunks = quarry::chunk_document(doc, c);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].text, "Invoice 1\nTotal 10\nPage two");
  EXPECT_EQ(chunks[0].first_page, 1);
  EXPECT_EQ(chunks[0].last_page, 2);
  EXPECT_EQ(chunks[0].tokens, c.count(chunks[0].text));
}

// Lines of 35 bytes = 10 tokens, + 1 for the joining newline: a chunk of k lines costs 11k - 1.
TEST(Chunk, UniformLinesFillToTheLimitAndOverlapByWholeLines) {
  EstimateTokenCounter c;
  std::vector<L> lines;
  for (int i = 0; i < 40; ++i) lines.push_back({ascii_line(35, i)});
  auto doc = make_doc({lines});
  ChunkOptions o{100, 25};  // 9 lines (98 tokens) per chunk; overlap 2 lines (21 <= 25 < 32)
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);
  auto runs = locate(doc, chunks);
  ASSERT_GE(runs.size(), 3u);
  EXPECT_EQ(runs[0].end - runs[0].begin, 9u);
  EXPECT_EQ(chunks[0].tokens, 93u);  // 9 * 35 + 8 bytes = 323 -> 93; 10 lines: 103
  for (std::size_t i = 1; i + 1 < runs.size(); ++i) {
    EXPECT_EQ(runs[i - 1].end - runs[i].begin, 2u) << "overlap before chunk " << i;
    EXPECT_EQ(runs[i].end - runs[i].begin, 9u);
  }
  // 40 lines, 7 new lines per chunk after the first: 9 + 7*4 = 37, then the rest.
  EXPECT_EQ(chunks.size(), 6u);
}

TEST(Chunk, NoOverlapWhenZero) {
  EstimateTokenCounter c;
  std::vector<L> lines;
  for (int i = 0; i < 30; ++i) lines.push_back({ascii_line(35, i)});
  auto doc = make_doc({lines});
  ChunkOptions o{100, 0};
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);
  auto runs = locate(doc, chunks);
  for (std::size_t i = 1; i < runs.size(); ++i) EXPECT_EQ(runs[i].begin, runs[i - 1].end);
  EXPECT_EQ(chunks.size(), 4u);  // 9 + 9 + 9 + 3
}

TEST(Chunk, OverlapLargerThanLimitStillProgresses) {
  EstimateTokenCounter c;
  std::vector<L> lines;
  for (int i = 0; i < 30; ++i) lines.push_back({ascii_line(35, i)});
  auto doc = make_doc({lines});
  ChunkOptions o{100, 500};
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);
  EXPECT_LT(chunks.size(), 30u);
}

TEST(Chunk, PrefersBlockBoundary) {
  EstimateTokenCounter c;
  // Block 0: 6 lines, block 1: 6 lines. A chunk holds 9 lines; the cut goes after line 6.
  std::vector<L> lines;
  for (int i = 0; i < 12; ++i) lines.push_back({ascii_line(35, i), i < 6 ? 0 : 1});
  auto doc = make_doc({lines});
  ChunkOptions o{100, 0};
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(split_lines(chunks[0].text).size(), 6u);
}

TEST(Chunk, PrefersPageBoundaryOverLaterBlockBoundary) {
  EstimateTokenCounter c;
  // Page 1: lines 0-5 (two blocks); page 2: lines 6-11 with a block boundary after line 8.
  std::vector<L> p1, p2;
  for (int i = 0; i < 6; ++i) p1.push_back({ascii_line(35, i), i < 3 ? 0 : 1});
  for (int i = 6; i < 12; ++i) p2.push_back({ascii_line(35, i), i < 8 ? 0 : 1});
  auto doc = make_doc({p1, p2});
  ChunkOptions o{100, 0};
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].first_page, 1);
  EXPECT_EQ(chunks[0].last_page, 1);
  EXPECT_EQ(chunks[1].first_page, 2);
}

TEST(Chunk, IgnoresBoundaryThatWouldLeaveChunkLessThanHalfFull) {
  EstimateTokenCounter c;
  // Block boundary after line 2 (32 tokens < 50): the chunk is filled to 9 lines instead.
  std::vector<L> lines;
  for (int i = 0; i < 12; ++i) lines.push_back({ascii_line(35, i), i < 3 ? 0 : 1});
  auto doc = make_doc({lines});
  ChunkOptions o{100, 0};
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);
  EXPECT_EQ(split_lines(chunks[0].text).size(), 9u);
}

TEST(Chunk, OverlapCrossesPagesAndPageRangesFollow) {
  EstimateTokenCounter c;
  std::vector<std::vector<L>> pages;
  for (int p = 0; p < 10; ++p) {
    std::vector<L> lines;
    for (int i = 0; i < 4; ++i) lines.push_back({ascii_line(35, p * 4 + i)});
    pages.push_back(lines);
  }
  auto doc = make_doc(pages);
  ChunkOptions o{100, 25};
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);  // checks first_page/last_page line by line
  bool crossed = false;
  for (const auto& ch : chunks) crossed |= ch.first_page != ch.last_page;
  EXPECT_TRUE(crossed);
}

TEST(Chunk, TableRowsStayWhole) {
  EstimateTokenCounter c;
  std::vector<L> lines{{"Description                Qty   Unit price      Net    VAT"}};
  for (int i = 0; i < 200; ++i) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "Item %03d consulting hours   %3d   %8d,00   %9d,00   27%%", i, i % 17 + 1,
                  1000 + i * 37, (i % 17 + 1) * (1000 + i * 37));
    lines.push_back({buf, 1});
  }
  auto doc = make_doc({lines});
  ChunkOptions o{64, 16};
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);  // every chunk line is an exact document line
  EXPECT_GT(chunks.size(), 20u);
}

TEST(Chunk, RandomDocumentsRespectLimits) {
  EstimateTokenCounter c;
  std::mt19937 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::vector<L>> pages(1 + rng() % 5);
    int tag = 0;
    for (auto& p : pages) {
      int block = 0;
      const int n = static_cast<int>(rng() % 30);
      for (int i = 0; i < n; ++i) {
        if (rng() % 5 == 0) ++block;
        p.push_back({ascii_line(1 + rng() % 120, tag++), block});
      }
    }
    auto doc = make_doc(pages);
    ChunkOptions o{static_cast<std::size_t>(40 + rng() % 200), static_cast<std::size_t>(rng() % 60)};
    auto chunks = quarry::chunk_document(doc, c, o);
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_well_formed(doc, chunks, o, c);
  }
}

TEST(Chunk, OneHugeLineIsSplitAtWhitespace) {
  EstimateTokenCounter c;
  std::string line;
  for (int i = 0; i < 20000; ++i) line += "word" + std::to_string(i) + " ";
  line.pop_back();
  auto doc = make_doc({{{"Header"}, {line}, {"Footer"}}});
  ChunkOptions o{200, 30};
  auto chunks = quarry::chunk_document(doc, c, o);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front().text, "Header");
  EXPECT_EQ(chunks.back().text, "Footer");
  std::string joined;
  for (std::size_t i = 1; i + 1 < chunks.size(); ++i) {
    EXPECT_LE(chunks[i].tokens, 200u);
    EXPECT_GE(chunks[i].tokens, 150u * (i + 2 < chunks.size()));  // pieces are filled, not tiny
    EXPECT_EQ(chunks[i].text.front() == ' ' || chunks[i].text.back() == ' ', false);
    if (i > 1) joined += ' ';
    joined += chunks[i].text;
  }
  EXPECT_EQ(joined, line);  // no word lost or cut
}

TEST(Chunk, HugeLineWithoutWhitespaceIsCutAtCodePoints) {
  EstimateTokenCounter c;
  // "ő" (2 bytes), "€" (3 bytes), "𝄞" (4 bytes) and CJK, with no whitespace at all.
  std::string unit = "\xC5\x91" "a" "\xE2\x82\xAC" "\xF0\x9D\x84\x9E" "\xE6\x97\xA5" "bc";
  std::string line;
  for (int i = 0; i < 3000; ++i) line += unit;
  auto doc = make_doc({{{line}}});
  ChunkOptions o{50, 10};
  auto chunks = quarry::chunk_document(doc, c, o);
  ASSERT_GT(chunks.size(), 10u);
  std::string joined;
  for (const auto& ch : chunks) {
    EXPECT_TRUE(valid_utf8(ch.text)) << "chunk " << ch.index << " cuts a UTF-8 sequence";
    EXPECT_LE(ch.tokens, 50u);
    EXPECT_GE(ch.tokens + 5, 50u * (ch.index + 1 < chunks.size()));
    joined += ch.text;
  }
  EXPECT_EQ(joined, line);
}

TEST(Chunk, UnicodeLinesKeepWholeCodePoints) {
  EstimateTokenCounter c;
  std::vector<L> lines;
  const char* words[] = {"árvíztűrő", "tükörfúrógép", "Öffentlichkeit", "Straße", "日本語テキスト", "façade"};
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) s += std::string(words[rng() % 6]) + (k + 1 < n ? " " : "");
    lines.push_back({s, i / 10});
  }
  lines.push_back({[] {
    std::string s;
    for (int i = 0; i < 2000; ++i) s += "őű日";
    return s;
  }()});
  auto doc = make_doc({lines});
  ChunkOptions o{80, 20};
  auto chunks = quarry::chunk_document(doc, c, o);
  for (const auto& ch : chunks) {
    EXPECT_TRUE(valid_utf8(ch.text)) << "chunk " << ch.index;
    EXPECT_LE(ch.tokens, 80u);
  }
}

// A counter that is not sub-additive (a joined text costs more than its parts): the chunker must
// still respect the limit, because it re-counts what it emits.
TEST(Chunk, NonSubadditiveCounterStillRespectsLimit) {
  struct Penalised final : quarry::TokenCounter {
    std::size_t count(std::string_view t) const override {
      std::size_t nl = static_cast<std::size_t>(std::count(t.begin(), t.end(), '\n'));
      return (t.size() + 3) / 4 + 3 * nl;
    }
  } c;
  std::vector<L> lines;
  for (int i = 0; i < 100; ++i) lines.push_back({ascii_line(10 + (i * 7) % 60, i)});
  auto doc = make_doc({lines});
  ChunkOptions o{60, 15};
  auto chunks = quarry::chunk_document(doc, c, o);
  expect_well_formed(doc, chunks, o, c);
}

// Real documents: the text of the public PDFs in the shared corpora, as `pdftotext -layout` lays it
// out (one page per form feed), chunked with the estimate; every chunk is well formed.
TEST(Chunk, RealPdfTextFromCorpora) {
  const fs::path dir = fs::path(QUARRY_SHARED_DIR) / "corpora" / "nav" / "pdf" / "hu";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " not present";
  if (std::system("pdftotext -v > /dev/null 2>&1") != 0) GTEST_SKIP() << "pdftotext not installed";
  EstimateTokenCounter c;
  int docs = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".pdf") continue;
    const auto pdf = quarry::test_support::pdftotext_layout(e.path());
    ASSERT_EQ(pdf.code, 0) << e.path();
    const std::string& text = pdf.out;
    Document doc;
    quarry::Page page;
    std::size_t b = 0;
    int block = 0;
    for (std::size_t i = 0; i <= text.size(); ++i) {
      if (i == text.size() || text[i] == '\n' || text[i] == '\f') {
        std::string line = text.substr(b, i - b);
        if (line.empty()) ++block;
        page.lines.push_back({line, std::nullopt, block});
        if (i < text.size() && text[i] == '\f') {
          doc.pages.push_back(std::move(page));
          page = quarry::Page{};
          page.number = static_cast<int>(doc.pages.size()) + 1;
          block = 0;
        }
        b = i + 1;
      }
    }
    if (!page.lines.empty()) doc.pages.push_back(std::move(page));
    ChunkOptions o{256, 32};
    auto chunks = quarry::chunk_document(doc, c, o);
    SCOPED_TRACE(e.path().string());
    EXPECT_FALSE(chunks.empty());
    expect_well_formed(doc, chunks, o, c);
    ++docs;
  }
  EXPECT_GT(docs, 0);
}
