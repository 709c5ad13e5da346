#include "extractors/pdf/page_text.hpp"

#include <GfxState.h>
#include <Object.h>
#include <PDFDoc.h>
#include <Page.h>
#include <Stream.h>
#include <TextOutputDev.h>
#include <XRef.h>
#include <goo/GooString.h>
#include <poppler-global.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <unordered_set>

namespace quarry::detail::pdf {
namespace {

std::string utf8(const poppler::ustring& s) {
  if (s.empty()) return {};
  const poppler::byte_array b = s.to_utf8();
  std::string r(b.begin(), b.end());
  while (!r.empty() && r.back() == '\0') r.pop_back();
  return r;
}

// poppler's text (UTF-8) as poppler-cpp hands it over: read as a C string, through its UTF-16 ustring.
std::string through_ustring(const char* s) { return utf8(poppler::ustring::from_utf8(s)); }

std::uint64_t key_of(const Ref& r) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(r.num)) << 32) | static_cast<std::uint32_t>(r.gen);
}

std::size_t utf8_len(Unicode u) { return u < 0x80 ? 1 : u < 0x800 ? 2 : u < 0x10000 ? 3 : 4; }

// Where the text output of a page goes: poppler calls `append` piece by piece; what would pass `cap`
// bytes is dropped (physical layout pads columns with spaces, so the output can outgrow the characters).
struct Sink {
  std::string out;
  std::size_t cap = 0;
  bool full = false;
};

void append(void* stream, const char* text, int len) {
  auto* s = static_cast<Sink*>(stream);
  if (s->full || len <= 0) return;
  if (s->out.size() + static_cast<std::size_t>(len) > s->cap) {
    s->full = true;
    return;
  }
  s->out.append(text, static_cast<std::size_t>(len));
}

struct TextPageUnref {
  void operator()(TextPage* p) const { p->decRefCnt(); }
};

// Counts the words poppler's TextPage::addChar makes of the characters drawn, and the fragments among
// them (as fragments() does), without keeping the characters: the same page geometry, the same word
// breaks (whitespace, a baseline moved by more than 0.5, a gap outside [-0.2, 0.1] em, a character
// drawn over the previous one, a font size or writing mode change, text drawn backwards), the same
// discarded characters (outside the page, tiny ones past 50,000). Where it simplifies (writing mode 1,
// Type 3 font sizes, ActualText spans) it counts more words, never fewer: it only bounds work.
class WordCounter {
 public:
  void start(const GfxState* state) {
    *this = WordCounter{};
    page_w_ = state->getPageWidth();
    page_h_ = state->getPageHeight();
  }

  void add(GfxState* state, double x, double y, double dx, double dy, CharCode c, const Unicode* u, int u_len) {
    double sp = state->getCharSpace();
    if (c == static_cast<CharCode>(0x20)) sp += state->getWordSpace();
    double dx2, dy2, w1, h1, x1, y1;
    state->textTransformDelta(sp * state->getHorizScaling(), 0, &dx2, &dy2);
    state->transformDelta(dx - dx2, dy - dy2, &w1, &h1);
    state->transform(x, y, &x1, &y1);
    if (x1 + w1 < 0 || x1 > page_w_ || y1 + h1 < 0 || y1 > page_h_ || std::isnan(x1) || std::isnan(y1) ||
        std::isnan(w1) || std::isnan(h1))
      return;
    if (std::abs(w1) < 3 && std::abs(h1) < 3 && ++tiny_ > 50000) return;
    if (u_len == 1 && whitespace(u[0])) {
      in_word_ = false;
      return;
    }
    if (u_len == 1 && u[0] == 0) return;
    const double fs = state->getTransformedFontSize();
    const bool vertical = state->getFont() && state->getFont()->getWMode();
    if (in_word_) {
      const bool horizontal = rot_ == 0 || rot_ == 2;
      const double base = horizontal ? y1 : x1;
      const double pos = horizontal ? x1 : y1;
      const double gap = rot_ < 2 ? pos - end_ : end_ - pos;
      const double delta = rot_ < 2 ? pos - last_edge_ : last_edge_ - pos;
      const bool overlap = std::abs(delta) < 0.1 * fs_ && std::abs(base - base_) < 0.2 * fs_;
      if (overlap || last_overlap_ || gap < -0.2 * fs_ || gap > 0.1 * fs_ || std::abs(base - base_) > 0.5 || fs != fs_ ||
          vertical || vertical_)
        in_word_ = false;
      last_overlap_ = overlap;
    } else {
      last_overlap_ = false;
    }
    if (u_len == 0) return;
    if (!in_word_) begin(state, x1, y1, fs, vertical);
    if ((rot_ == 0 && w1 < 0) || (rot_ == 1 && h1 < 0) || (rot_ == 2 && w1 > 0) || (rot_ == 3 && h1 > 0)) {
      begin(state, x1, y1, fs, vertical);  // drawn backwards: poppler makes each character a word
      x1 += w1, y1 += h1, w1 = -w1, h1 = -h1;
    }
    const bool horizontal = rot_ == 0 || rot_ == 2;
    const double pos = horizontal ? x1 : y1, advance = horizontal ? w1 : h1;
    last_edge_ = pos + advance * (u_len - 1) / u_len;
    end_ = pos + advance;
  }

  std::uint64_t words() const { return words_; }
  std::uint64_t fragments() const { return fragments_; }

 private:
  static bool whitespace(Unicode u) {
    return u == 0x20 || (u >= 0x09 && u <= 0x0D) || u == 0x85 || u == 0xA0 || u == 0x1680 || (u >= 0x2000 && u <= 0x200A) ||
           u == 0x2028 || u == 0x2029 || u == 0x202F || u == 0x205F || u == 0x3000;
  }

  // A new word, with poppler's rotation (TextPage::beginWord: from the font matrix).
  void begin(GfxState* state, double x1, double y1, double fs, bool vertical) {
    double m[4];
    state->getFontTransMat(&m[0], &m[1], &m[2], &m[3]);
    const std::shared_ptr<GfxFont> font = state->getFont();
    if (font && font->getType() == fontType3) {
      const double* fm = font->getFontMatrix();
      const double m2[4] = {fm[0] * m[0] + fm[1] * m[2], fm[0] * m[1] + fm[1] * m[3], fm[2] * m[0] + fm[3] * m[2],
                            fm[2] * m[1] + fm[3] * m[3]};
      std::copy(m2, m2 + 4, m);
    }
    int rot = std::abs(m[0] * m[3]) > std::abs(m[1] * m[2]) ? ((m[0] > 0 || m[3] < 0) ? 0 : 2) : (m[2] > 0 ? 1 : 3);
    if (vertical) rot = (rot + 1) & 3;
    const bool horizontal = rot == 0 || rot == 2;
    const double base = horizontal ? y1 : x1, pos = horizontal ? x1 : y1;
    // A fragment unless it continues the previous word on its baseline within 0.7 em (see fragments()).
    bool continues = false;
    if (words_ > 0 && rot == rot_) {
      const double gap = rot < 2 ? pos - end_ : end_ - pos;
      continues = std::abs(base - base_) <= 0.5 * fs_ && gap >= -0.5 * fs_ && gap <= 0.7 * fs_;
    }
    if (!continues) ++fragments_;
    ++words_;
    in_word_ = true;
    rot_ = rot;
    base_ = base;
    fs_ = fs;
    vertical_ = vertical;
    end_ = last_edge_ = pos;
  }

  double page_w_ = 0, page_h_ = 0;
  std::uint64_t tiny_ = 0, words_ = 0, fragments_ = 0;
  bool in_word_ = false, last_overlap_ = false, vertical_ = false;
  int rot_ = 0;
  double base_ = 0, fs_ = 0, end_ = 0, last_edge_ = 0;
};

}  // namespace

// One interpretation of a page by poppler's TextOutputDev, guarded, in one of two modes.
//  - layout: the TextOutputDev's own TextPage, laid out at the end of the page (physical layout for
//    the text, reading order for the word boxes), as poppler-cpp does. Words and fragments are
//    counted on the side (WordCounter) to estimate the layout's cost; as soon as the page cannot be
//    laid out within the limits (too many words, or kLayoutChars characters) it stops, and at the end
//    of the page the layout is run only if its estimated cost fits the page and document limits.
//    Otherwise the page needs the raw mode.
//  - raw: a TextPage in content-stream order (no layout analysis), taken in chunks of kRawChunk
//    characters (poppler keeps ~80 bytes per character: each chunk's words are counted and its text or
//    words kept, then the chunk is freed); the words are counted exactly, against max_page_words.
struct Reader::Pass final : TextOutputDev {
  enum class Mode { layout, raw };
  enum class Stop { none, text, words, content, raw };
  static constexpr std::uint64_t kRawChunk = 1 << 18;
  static constexpr std::uint64_t kLayoutChars = 200000;  // 4x what fits legibly on a large page

  Pass(Reader& reader, Mode mode, Sink* sink, bool physical, std::uint64_t text_cap, std::uint64_t content_left)
      : TextOutputDev(sink && mode == Mode::layout ? &append : nullptr, mode == Mode::layout ? sink : nullptr, physical, 0,
                      false, false),
        reader_(reader),
        mode_(mode),
        sink_(sink),
        text_cap_(text_cap),
        content_left_(content_left) {
    const ExtractOptions& o = reader.opts_;
    word_cap_ = static_cast<std::uint64_t>(std::max(o.max_page_words, 1));
    // W*W/16 <= work: more words than this cannot be laid out within the page's layout limit.
    const auto layout_words = static_cast<std::uint64_t>(std::sqrt(16.0 * static_cast<double>(o.max_page_layout_work)));
    layout_words_ = std::min(layout_words, word_cap_);
    next_check_ = word_cap_;
    raw_text_.cap = sink ? sink->cap : 0;
  }

  static bool abort_check(void* self) { return static_cast<Pass*>(self)->stopped_; }

  void startPage(int page_num, GfxState* state, XRef* xref) override {
    TextOutputDev::startPage(page_num, state, xref);
    started_ = true;
    if (mode_ == Mode::layout) {
      counter_.start(state);
    } else {
      raw_.reset(new TextPage(true));
      raw_->startPage(state);
    }
  }

  void updateFont(GfxState* state) override {
    TextOutputDev::updateFont(state);
    if (raw_) raw_->updateFont(state);
  }

  void restoreState(GfxState* state) override {
    TextOutputDev::restoreState(state);
    if (raw_) raw_->updateFont(state);
  }

  void drawChar(GfxState* state, double x, double y, double dx, double dy, double origin_x, double origin_y,
                CharCode c, int n_bytes, const Unicode* u, int u_len) override {
    if (stopped_ || !started_) return;
    std::uint64_t bytes = 0;
    for (int i = 0; i < u_len; ++i) bytes += utf8_len(u[i]);
    if (text_bytes_ + bytes > text_cap_) {
      stop(Stop::text);
      return;
    }
    text_bytes_ += bytes;
    ++chars_;
    if (mode_ == Mode::layout) {
      counter_.add(state, x, y, dx, dy, c, u, u_len);
      if (counter_.words() > layout_words_ || chars_ > kLayoutChars) {
        stop(Stop::raw);  // cannot be laid out within the limits: the raw mode reads this page
        return;
      }
      TextOutputDev::drawChar(state, x, y, dx, dy, origin_x, origin_y, c, n_bytes, u, u_len);
      return;
    }
    if (chars_ >= next_check_ && !count_words()) return;
    if (++chunk_chars_ > kRawChunk) next_chunk(state);
    raw_->addChar(state, x, y, dx, dy, c, n_bytes, u, u_len);
  }

  void incCharCount(int n) override {
    TextOutputDev::incCharCount(n);
    if (raw_) raw_->incCharCount(n);
  }

  // The replacement text of a marked-content span arrives whole, not through drawChar.
  void beginActualText(GfxState* state, const GooString* text) override {
    if (stopped_) return;
    const std::uint64_t bytes = text ? static_cast<std::uint64_t>(text->getLength()) : 0;
    if (text_bytes_ + bytes > text_cap_) {
      stop(Stop::text);
      return;
    }
    text_bytes_ += bytes;
    TextOutputDev::beginActualText(state, text);
    actual_open_ = true;
  }

  void endActualText(GfxState* state) override {
    if (!actual_open_) return;
    actual_open_ = false;
    TextOutputDev::endActualText(state);
  }

  // Every use of a form XObject is decoded and interpreted again by poppler: charge it each time.
  void beginForm(Ref id) override {
    if (stopped_ || id == Ref::INVALID()) return;
    const std::uint64_t size = reader_.stream_size(id, reader_.opts_.max_page_content_bytes);
    if (size > content_left_) {
      stop(Stop::content);
      return;
    }
    content_left_ -= size;
    forms_bytes_ += size;
  }
  // Once stopped, forms are not interpreted at all (Gfx then calls the no-op drawForm instead).
  bool useDrawForm() override { return stopped_; }

  void endPage() override {
    if (!started_) return;
    if (mode_ == Mode::raw) {
      end_raw_page();
      const std::unique_ptr<TextWordList> list = raw_->makeWordList(false);
      words_ = done_words_ + static_cast<std::uint64_t>(list->getLength());
      if (sink_) {
        append(sink_, raw_text_.out.data(), static_cast<int>(raw_text_.out.size()));
        raw_->dump(sink_, &append, false, eolUnix, true);
      } else {
        keep_words(*list);
      }
      return;
    }
    if (stop_ == Stop::raw) return;
    const std::uint64_t w = counter_.words();
    words_ = w;
    layout_work_ = w * counter_.fragments() + w * w / 16;
    const ExtractOptions& o = reader_.opts_;
    if (layout_work_ > o.max_page_layout_work || reader_.layout_used_ + layout_work_ > o.max_layout_work) {
      over_layout_ = true;
      return;
    }
    reader_.layout_used_ += layout_work_;
    TextOutputDev::endPage();
    // The layout pads columns with spaces: text spread thinly over a page can lay out to far more
    // bytes than it has. Then the content-stream order keeps all of it.
    if (sink_ && sink_->full) {
      sink_->out.clear();
      sink_->full = false;
      layout_overflow_ = true;
    }
  }

  /// Whether this (layout) pass left the page to the raw mode.
  bool needs_raw() const { return mode_ == Mode::layout && (stop_ == Stop::raw || over_layout_ || layout_overflow_); }

  /// The page's words with their boxes, as poppler-cpp's page::text_list() gives them (raw mode:
  /// in content-stream order).
  std::vector<Word> words() {
    if (mode_ == Mode::raw) return std::move(raw_words_);
    std::vector<Word> out;
    std::unique_ptr<TextWordList> list = makeWordList();
    if (list) keep_words(*list, &out);
    return out;
  }

  Reader& reader_;
  const Mode mode_;
  Sink* sink_;
  std::uint64_t text_cap_;
  std::uint64_t content_left_;
  std::uint64_t word_cap_ = 0, layout_words_ = 0;
  WordCounter counter_;
  std::unique_ptr<TextPage, TextPageUnref> raw_;
  Sink raw_text_;                // text of the raw chunks already taken
  std::vector<Word> raw_words_;  // words of the raw chunks (word pass)
  std::uint64_t done_words_ = 0, chunk_chars_ = 0;
  std::uint64_t text_bytes_ = 0, chars_ = 0, next_check_ = 0, words_ = 0;
  std::uint64_t forms_bytes_ = 0, layout_work_ = 0;
  bool started_ = false, stopped_ = false, actual_open_ = false, over_layout_ = false, layout_overflow_ = false;
  Stop stop_ = Stop::none;

 private:
  void stop(Stop why) {
    stopped_ = true;
    stop_ = why;
  }

  void keep_words(TextWordList& list, std::vector<Word>* out = nullptr) {
    if (!out) out = &raw_words_;
    out->reserve(out->size() + static_cast<std::size_t>(list.getLength()));
    for (int i = 0; i < list.getLength(); ++i) {
      const TextWord* w = list.get(i);
      const std::unique_ptr<GooString> text(w->getText());
      double x0, y0, x1, y1;
      w->getBBox(&x0, &y0, &x1, &y1);
      // poppler::rectf keeps (x, y, width, height): right() and bottom() are sums, kept as such.
      const double width = x1 - x0, height = y1 - y0;
      out->push_back(Word{through_ustring(text->c_str()), BBox{x0, y0, x0 + width, y0 + height}});
    }
  }

  // Ends the raw TextPage as TextOutputDev::endPage does. coalesce() does no layout analysis in raw
  // order, but sets the reading direction that dump() uses (left to right), otherwise uninitialised.
  void end_raw_page() {
    raw_->endPage();
    raw_->coalesce(false, 0, false);
  }

  // Takes the raw chunk: counts its words, keeps its text (or words), starts another.
  void next_chunk(GfxState* state) {
    end_raw_page();
    const std::unique_ptr<TextWordList> list = raw_->makeWordList(false);
    done_words_ += static_cast<std::uint64_t>(list->getLength());
    if (sink_) {
      raw_->dump(&raw_text_, &append, false, eolUnix, false);
    } else {
      keep_words(*list);
    }
    raw_.reset(new TextPage(true));
    raw_->startPage(state);
    raw_->updateFont(state);
    chunk_chars_ = 1;
  }

  // Counts the raw page's words (O(words of the chunk)); checks are spaced so that the words between
  // two checks (at most one per character) cannot pass the limit by more than an eighth of it.
  bool count_words() {
    const std::unique_ptr<TextWordList> list = raw_->makeWordList(false);
    const std::uint64_t w = done_words_ + static_cast<std::uint64_t>(list->getLength());
    if (w > word_cap_) {
      stop(Stop::words);
      return false;
    }
    next_check_ = chars_ + std::max<std::uint64_t>(word_cap_ - w, std::max<std::uint64_t>(word_cap_ / 8, 1));
    return true;
  }
};

Reader::Reader(std::string_view bytes, const std::string& password, const ExtractOptions& opts) : opts_(opts) {
  auto* stream = new MemStream(bytes.data(), 0, static_cast<Goffset>(bytes.size()), Object(objNull));
  doc_ = std::make_unique<PDFDoc>(stream, GooString(password.c_str()), GooString(password.c_str()));
}

Reader::~Reader() = default;

bool Reader::ok() const { return doc_ && doc_->isOk(); }

std::string Reader::page_tree_problem(int max_depth, std::size_t max_nodes) {
  XRef* xref = doc_->getXRef();
  const Object catalog = xref->getCatalog();
  if (!catalog.isDict()) return {};
  const Object& root = catalog.dictLookupNF("Pages");
  std::unordered_set<std::uint64_t> seen;
  std::vector<std::pair<Object, int>> stack;
  if (root.isRef()) seen.insert(key_of(root.getRef()));
  stack.emplace_back(root.fetch(xref), 0);
  std::size_t nodes = 0;
  while (!stack.empty()) {
    auto [node, depth] = std::move(stack.back());
    stack.pop_back();
    if (depth > max_depth) return "its page tree is nested deeper than " + std::to_string(max_depth) + " levels";
    if (!node.isDict()) continue;
    const Object kids = node.dictLookup("Kids");
    if (!kids.isArray()) continue;
    for (int i = 0; i < kids.arrayGetLength(); ++i) {
      if (++nodes > max_nodes) return {};  // poppler's own page count limit takes over
      const Object& kid = kids.arrayGetNF(i);
      if (!kid.isRef() || !seen.insert(key_of(kid.getRef())).second) continue;
      Object child = kid.fetch(xref);
      if (child.isDict() && child.dictLookup("Kids").isArray()) stack.emplace_back(std::move(child), depth + 1);
    }
  }
  return {};
}

bool Reader::may_embed_files() {
  if (!ok()) return false;
  XRef* xref = doc_->getXRef();
  const Object catalog = xref->getCatalog();
  if (!catalog.isDict()) return true;  // let the attachment reader say what it finds
  if (!catalog.dictLookupNF("AF").isNull()) return true;
  const Object names = catalog.dictLookup("Names");
  if (names.isDict() && !names.dictLookupNF("EmbeddedFiles").isNull()) return true;
  for (int i = 1; i <= doc_->getNumPages(); ++i) {
    ::Page* page = doc_->getPage(i);
    if (!page) continue;
    const Object dict = xref->fetch(page->getRef());
    if (dict.isDict() && !dict.dictLookupNF("AF").isNull()) return true;
    const Object annots = page->getAnnotsObject();
    if (!annots.isArray()) continue;
    for (int k = 0; k < annots.arrayGetLength(); ++k) {
      const Object annot = annots.arrayGet(k);
      if (annot.isDict() && annot.dictLookup("Subtype").isName("FileAttachment")) return true;
    }
  }
  return false;
}

std::vector<std::pair<int, int>> Reader::page_refs() {
  std::vector<std::pair<int, int>> out;
  if (!ok()) return out;
  for (int i = 1; i <= doc_->getNumPages(); ++i) {
    ::Page* page = doc_->getPage(i);
    if (!page) continue;
    const Ref r = page->getRef();
    out.emplace_back(r.num, r.gen);
  }
  return out;
}

namespace {

// Bytes that zlib inflates `raw` (a FlateDecode stream's data) to, counting only, stopping past `cap`;
// nullopt when zlib fails (poppler's decoder, which recovers from some damage, measures it then).
// zlib is several times faster than poppler's own inflate, and most content streams are plain Flate.
std::optional<std::uint64_t> inflated_size(Stream* raw, std::uint64_t cap) {
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return std::nullopt;
  std::array<unsigned char, 1 << 16> in, out;
  std::uint64_t total = 0;
  int rc = Z_OK;
  raw->reset();
  while (rc != Z_STREAM_END && total <= cap) {
    const int n = raw->doGetChars(static_cast<int>(in.size()), in.data());
    if (n <= 0) break;
    z.next_in = in.data();
    z.avail_in = static_cast<uInt>(n);
    while (z.avail_in > 0 && total <= cap) {
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      rc = inflate(&z, Z_NO_FLUSH);
      total += out.size() - z.avail_out;
      if (rc == Z_STREAM_END) break;
      if (rc != Z_OK) {
        inflateEnd(&z);
        raw->close();
        return std::nullopt;
      }
    }
  }
  inflateEnd(&z);
  raw->close();
  return total;
}

}  // namespace

std::uint64_t Reader::stream_size(const Ref& ref, std::uint64_t cap) {
  const std::uint64_t key = key_of(ref);
  if (auto it = sizes_.find(key); it != sizes_.end()) return it->second;
  // Measuring is work too: all of it together stays within max_content_bytes. Past that, a stream
  // not measured yet counts as over every limit.
  if (measured_ >= opts_.max_content_bytes) {
    measure_spent_ = true;
    return cap + 1;
  }
  const std::uint64_t room = opts_.max_content_bytes - measured_;
  const bool short_of_room = room < cap;
  cap = std::min(cap, room);
  std::uint64_t total = 0;
  Object obj = doc_->getXRef()->fetch(ref);
  std::optional<std::uint64_t> fast;
  if (obj.isStream() && !doc_->getXRef()->isEncrypted()) {
    // Predictors (DecodeParms) only make the data smaller: the inflated size bounds it.
    const Object filter = obj.streamGetDict()->lookup("Filter");
    if (filter.isName("FlateDecode") || (filter.isArray() && filter.arrayGetLength() == 1 && filter.arrayGet(0).isName("FlateDecode")))
      fast = inflated_size(obj.getStream()->getUndecodedStream(), cap);
  }
  if (fast) {
    total = *fast;
  } else if (obj.isStream()) {
    Stream* s = obj.getStream();
    s->reset();
    std::array<unsigned char, 1 << 16> buf;
    while (total <= cap) {
      const int n = s->doGetChars(static_cast<int>(buf.size()), buf.data());
      if (n <= 0) break;
      total += static_cast<std::uint64_t>(n);
    }
    s->close();
  }
  total = std::min(total, cap + 1);
  measured_ += total;
  if (total > cap && short_of_room) {
    measure_spent_ = true;
    return opts_.max_page_content_bytes + 1;  // not known, and not remembered
  }
  sizes_.emplace(key, total);
  return total;
}

std::string Reader::precharge(int index, std::uint64_t* charged, std::uint64_t* fonts) {
  const std::uint64_t cap = opts_.max_page_content_bytes;
  const std::string limit = std::to_string(cap);
  ::Page* page = doc_->getPage(index + 1);
  XRef* xref = doc_->getXRef();
  std::uint64_t sum = 0;
  std::size_t nodes = 0;
  constexpr std::size_t kMaxNodes = 100000;  // objects visited per page: a bound on the walk itself
  std::unordered_set<std::uint64_t> seen;
  auto size_of = [&](const Object& nf) -> std::uint64_t {
    if (!nf.isRef()) return 0;  // streams are always indirect objects
    return stream_size(nf.getRef(), cap);
  };

  // Content streams: a page's /Contents is a stream or an array of them (the same one may repeat).
  const Object page_obj = xref->fetch(page->getRef());
  const Object* contents_nf = page_obj.isDict() ? &page_obj.dictLookupNF("Contents") : nullptr;
  if (contents_nf) {
    Object resolved = contents_nf->isRef() ? contents_nf->fetch(xref) : contents_nf->copy();
    if (resolved.isStream()) {
      sum += size_of(*contents_nf);
    } else if (resolved.isArray()) {
      for (int i = 0; i < resolved.arrayGetLength() && sum <= cap; ++i) {
        if (++nodes > kMaxNodes) return "its content is an array of more than " + std::to_string(kMaxNodes) + " streams";
        sum += size_of(resolved.arrayGetNF(i));
      }
    }
  }
  if (sum > cap) return "its content streams decode to more than the limit of " + limit + " bytes";

  // Form XObjects reachable from a resource dictionary: each must fit the limit (they are charged when
  // used, but one that is too large must not be decoded even once). Fonts: poppler reads some of a
  // font's streams whole whenever it makes the font, i.e. for every page (and form) whose resources
  // list it: Type 1 programs (FontFile, FontFile3 of Type1C), ToUnicode and embedded encoding CMaps,
  // CIDToGIDMap. Each must fit the limit too, and the page is charged for them (max_font_bytes).
  std::string why;
  std::vector<Object> stack;  // resource dictionaries still to visit
  auto font_stream = [&](const Object& nf) {
    if (!why.empty() || !nf.isRef() || !seen.insert(key_of(nf.getRef())).second) return;
    if (++nodes > kMaxNodes) {
      why = "its resources hold more than " + std::to_string(kMaxNodes) + " objects";
      return;
    }
    const std::uint64_t size = stream_size(nf.getRef(), cap);
    if (size > cap) why = "a font in its resources decodes to more than the limit of " + limit + " bytes";
    *fonts += size;
  };
  auto visit_font = [&](const Object& font) {
    if (!font.isDict()) return;
    font_stream(font.dictLookupNF("ToUnicode"));
    font_stream(font.dictLookupNF("Encoding"));
    const Object subtype = font.dictLookup("Subtype");
    if (subtype.isName("Type1") || subtype.isName("MMType1")) {
      const Object descriptor = font.dictLookup("FontDescriptor");
      if (descriptor.isDict()) {
        font_stream(descriptor.dictLookupNF("FontFile"));
        font_stream(descriptor.dictLookupNF("FontFile3"));
      }
    } else if (subtype.isName("Type0")) {
      const Object descendants = font.dictLookup("DescendantFonts");
      if (descendants.isArray() && descendants.arrayGetLength() > 0) {
        const Object cid = descendants.arrayGet(0);
        if (cid.isDict()) font_stream(cid.dictLookupNF("CIDToGIDMap"));
      }
    } else if (subtype.isName("Type3")) {
      Object res = font.dictLookup("Resources");
      if (res.isDict()) stack.push_back(std::move(res));
    }
  };
  auto visit = [&](Dict* resources) {
    const Object xobjects = resources->lookup("XObject");
    if (xobjects.isDict()) {
      for (int i = 0; i < xobjects.dictGetLength() && why.empty(); ++i) {
        const Object& nf = xobjects.dictGetValNF(i);
        if (!nf.isRef() || !seen.insert(key_of(nf.getRef())).second) continue;
        if (++nodes > kMaxNodes) {
          why = "its resources hold more than " + std::to_string(kMaxNodes) + " objects";
          break;
        }
        Object x = nf.fetch(xref);
        if (!x.isStream() || !x.streamGetDict()->lookup("Subtype").isName("Form")) continue;
        if (stream_size(nf.getRef(), cap) > cap)
          why = "a form XObject in its resources decodes to more than the limit of " + limit + " bytes";
        Object res = x.streamGetDict()->lookup("Resources");
        if (res.isDict()) stack.push_back(std::move(res));
      }
    }
    const Object font_dict = resources->lookup("Font");
    if (font_dict.isDict()) {
      for (int i = 0; i < font_dict.dictGetLength() && why.empty(); ++i) {
        const Object& nf = font_dict.dictGetValNF(i);
        if (nf.isRef() && !seen.insert(key_of(nf.getRef())).second) continue;
        if (++nodes > kMaxNodes) {
          why = "its resources hold more than " + std::to_string(kMaxNodes) + " objects";
          break;
        }
        visit_font(nf.fetch(xref));
      }
    }
  };
  auto walk_resources = [&](Dict* resources) {
    if (resources) visit(resources);
    while (!stack.empty() && why.empty()) {
      Object res = std::move(stack.back());
      stack.pop_back();
      if (res.isDict()) visit(res.getDict());
    }
  };
  walk_resources(page->getResourceDict());
  if (!why.empty()) return why;

  // Annotation appearance streams (drawn once each, after the content) and their forms.
  Object annots = page->getAnnotsObject();
  if (annots.isArray()) {
    for (int i = 0; i < annots.arrayGetLength() && why.empty(); ++i) {
      if (++nodes > kMaxNodes) return "it has more than " + std::to_string(kMaxNodes) + " annotations";
      Object annot = annots.arrayGet(i);
      if (!annot.isDict()) continue;
      Object ap = annot.dictLookup("AP");
      if (!ap.isDict()) continue;
      const Object& normal = ap.dictLookupNF("N");
      std::vector<const Object*> appearances;
      Object states;
      if (normal.isRef()) {
        appearances.push_back(&normal);
        states = normal.fetch(xref);
        if (!states.isDict()) states.setToNull();  // a stream, not a dictionary of states
      } else if (normal.isDict()) {
        states = normal.copy();
      }
      if (states.isDict())
        for (int k = 0; k < states.dictGetLength(); ++k) appearances.push_back(&states.dictGetValNF(k));
      for (const Object* a : appearances) {
        if (!a->isRef() || !seen.insert(key_of(a->getRef())).second) continue;
        if (++nodes > kMaxNodes) return "its annotations hold more than " + std::to_string(kMaxNodes) + " objects";
        Object stream = a->fetch(xref);
        if (!stream.isStream()) continue;
        sum += stream_size(a->getRef(), cap);
        if (sum > cap) return "its content and annotation appearances decode to more than the limit of " + limit + " bytes";
        Object res = stream.streamGetDict()->lookup("Resources");
        if (res.isDict()) walk_resources(res.getDict());
        if (!why.empty()) return why;
      }
    }
  }
  *charged = sum;
  return {};
}

PageText Reader::page(int index, std::uint64_t text_budget, bool want_words) {
  PageText out;
  const std::string label = "page " + std::to_string(index + 1);
  ::Page* page = ok() ? doc_->getPage(index + 1) : nullptr;
  if (!page) {
    out.warnings.push_back(label + " could not be read");
    return out;
  }
  std::uint64_t charged = 0, fonts = 0;
  const std::string over_document = "the document's content streams decode to more than the limit of " +
                                    std::to_string(opts_.max_content_bytes) + " bytes";
  std::string why;
  if (content_used_ >= opts_.max_content_bytes) {
    why = over_document;
  } else {
    measure_spent_ = false;
    why = precharge(index, &charged, &fonts);
    if (measure_spent_ || (why.empty() && content_used_ + charged > opts_.max_content_bytes)) why = over_document;
    if (why.empty() && fonts_used_ + fonts > opts_.max_font_bytes)
      why = "the document's fonts (read again for every page that lists them) decode to more than the limit of " +
            std::to_string(opts_.max_font_bytes) + " bytes";
  }
  if (!why.empty()) {
    out.warnings.push_back(label + " skipped: " + why);
    return out;
  }
  content_used_ += charged;
  fonts_used_ += fonts;
  const std::uint64_t content_left = std::min(opts_.max_page_content_bytes - charged, opts_.max_content_bytes - content_used_);
  const std::uint64_t text_cap = std::min<std::uint64_t>(opts_.max_page_text_bytes, text_budget);

  Sink sink;
  sink.cap = static_cast<std::size_t>(std::min<std::uint64_t>(opts_.max_page_text_bytes, text_budget));
  // Every pass is charged for the forms it draws (work done, even by a pass whose result is not used).
  std::uint64_t forms = 0;
  auto run = [&](Pass& pass, bool words) {
    if (words) {
      // As poppler-cpp's page::text_list(): crop box ignored, a copy of the xref.
      doc_->displayPageSlice(&pass, index + 1, 72, 72, 0, false, false, false, -1, -1, -1, -1, &Pass::abort_check, &pass,
                             nullptr, nullptr, true);
    } else {
      doc_->displayPage(&pass, index + 1, 72, 72, 0, false, true, false, &Pass::abort_check, &pass);
    }
    forms += pass.forms_bytes_;
    content_used_ += pass.forms_bytes_;
  };
  auto left = [&] {
    return std::min(content_left - std::min(content_left, forms),
                    opts_.max_content_bytes - std::min(opts_.max_content_bytes, content_used_));
  };
  Pass layout(*this, Pass::Mode::layout, &sink, true, text_cap, content_left);
  run(layout, false);
  std::unique_ptr<Pass> raw;
  if (layout.needs_raw()) {
    sink.out.clear();
    sink.full = false;
    raw = std::make_unique<Pass>(*this, Pass::Mode::raw, &sink, false, text_cap, left());
    run(*raw, false);
  }
  const Pass& text = raw ? *raw : layout;
  out.text = through_ustring(sink.out.c_str());
  const bool cut = text.stop_ != Pass::Stop::none || sink.full;
  out.budget_spent = (text.stop_ == Pass::Stop::text || sink.full) && text_budget < opts_.max_page_text_bytes;
  if (out.budget_spent) return out;  // the document is over its limit: the caller reports that
  if (cut) {
    // Keep whole lines only (a character may have been cut in two).
    const std::size_t nl = out.text.rfind('\n');
    out.text.resize(nl == std::string::npos ? 0 : nl + 1);
  }
  switch (text.stop_) {
    case Pass::Stop::text:
      out.warnings.push_back(label + ": text cut at the limit of " + std::to_string(text_cap) + " bytes");
      break;
    case Pass::Stop::words:
      out.warnings.push_back(label + ": text cut at the limit of " + std::to_string(opts_.max_page_words) + " words");
      break;
    case Pass::Stop::content:
      out.warnings.push_back(label + ": text cut: its content (form XObjects included, at each use) decodes to more than the limit of " +
                             std::to_string(opts_.max_page_content_bytes) + " bytes per page or " +
                             std::to_string(opts_.max_content_bytes) + " per document");
      break;
    case Pass::Stop::none:
    case Pass::Stop::raw:
      if (sink.full) out.warnings.push_back(label + ": text cut at the limit of " + std::to_string(sink.cap) + " bytes");
      break;
  }
  if (raw && layout.layout_overflow_) {
    out.warnings.push_back(label + ": its physical layout (columns padded with spaces) is larger than the limit of " +
                           std::to_string(sink.cap) + " bytes; its text is in content-stream order");
  } else if (raw && text.stop_ != Pass::Stop::words) {
    const std::string why = layout.over_layout_ ? std::to_string(layout.words_) + " words, estimated cost " + std::to_string(layout.layout_work_)
                                                : "more than " + std::to_string(layout.chars_ > Pass::kLayoutChars ? Pass::kLayoutChars : layout.layout_words_) +
                                                      (layout.chars_ > Pass::kLayoutChars ? " characters" : " words");
    out.warnings.push_back(label + ": too intricate for the layout analysis within its limits (" + why +
                           "); its text is in content-stream order");
  }
  if (want_words && !out.text.empty()) {
    std::unique_ptr<Pass> boxes;
    if (!raw) {
      boxes = std::make_unique<Pass>(*this, Pass::Mode::layout, nullptr, false, text_cap, left());
      run(*boxes, true);
    }
    if (raw || boxes->needs_raw()) {
      boxes = std::make_unique<Pass>(*this, Pass::Mode::raw, nullptr, false, text_cap, left());
      run(*boxes, true);
    }
    out.words = boxes->words();
  }
  return out;
}

}  // namespace quarry::detail::pdf
