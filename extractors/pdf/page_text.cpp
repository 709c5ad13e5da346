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

#include <algorithm>
#include <array>
#include <cmath>
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

// Words that do not continue the previous word (content order) on its baseline: the most text blocks
// the layout analysis can make of these words.
std::uint64_t fragments(TextWordList& words) {
  std::uint64_t f = 0;
  const TextWord* prev = nullptr;
  for (int i = 0; i < words.getLength(); ++i) {
    const TextWord* w = words.get(i);
    bool continues = false;
    if (prev && prev->getRotation() == w->getRotation()) {
      double ax0, ay0, ax1, ay1, bx0, by0, bx1, by1;
      prev->getBBox(&ax0, &ay0, &ax1, &ay1);
      w->getBBox(&bx0, &by0, &bx1, &by1);
      const double fs = std::max(prev->getFontSize(), 1e-3);
      double gap = 0;
      switch (w->getRotation()) {
        case 0: gap = bx0 - ax1; break;
        case 1: gap = by0 - ay1; break;
        case 2: gap = ax0 - bx1; break;
        default: gap = ay0 - by1; break;
      }
      // Farther than poppler's minimum column spacing (0.7 em, TextOutputDev::minColSpacing1_default)
      // may start a new block.
      continues = std::abs(w->getBaseline() - prev->getBaseline()) <= 0.5 * fs && gap >= -0.5 * fs && gap <= 0.7 * fs;
    }
    if (!continues) ++f;
    prev = w;
  }
  return f;
}

}  // namespace

// One interpretation of a page by poppler's TextOutputDev, guarded. Besides the TextOutputDev's own
// TextPage (layout order), the characters also go to a TextPage in raw (content-stream) order, which
// costs no layout analysis: its words are counted to bound memory and to estimate the layout's cost,
// and it gives the page's text when the layout is not run. poppler keeps ~80 bytes per character, so
// the raw TextPage is taken in chunks of kRawChunk characters (each chunk's words counted and its text
// kept, then the chunk freed), and the layout's TextPage is no longer fed once the page cannot be laid
// out (over the layout limit in words, or kLayoutChars characters).
struct Reader::Pass final : TextOutputDev {
  static constexpr std::uint64_t kRawChunk = 1 << 18;
  static constexpr std::uint64_t kLayoutChars = 200000;  // 4x what fits legibly on a large page

  Pass(Reader& reader, Sink* sink, bool layout_text, std::uint64_t text_cap, std::uint64_t content_left)
      : TextOutputDev(sink ? &append : nullptr, sink, layout_text, 0, false, false),
        reader_(reader),
        sink_(sink),
        text_cap_(text_cap),
        content_left_(content_left) {
    const ExtractOptions& o = reader.opts_;
    word_cap_ = static_cast<std::uint64_t>(std::max(o.max_page_words, 1));
    // W*W/16 <= work: more words than this cannot be laid out within the page's layout limit.
    layout_words_ = static_cast<std::uint64_t>(std::sqrt(16.0 * static_cast<double>(o.max_page_layout_work)));
    next_check_ = std::min(word_cap_, layout_words_);
    raw_text_.cap = sink ? sink->cap : 0;
  }

  static bool abort_check(void* self) { return static_cast<Pass*>(self)->stopped_; }

  void startPage(int page_num, GfxState* state, XRef* xref) override {
    TextOutputDev::startPage(page_num, state, xref);
    raw_.reset(new TextPage(true));
    raw_->startPage(state);
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
    if (stopped_ || !raw_) return;
    std::uint64_t bytes = 0;
    for (int i = 0; i < u_len; ++i) bytes += utf8_len(u[i]);
    if (text_bytes_ + bytes > text_cap_) {
      stop(Stop::text);
      return;
    }
    text_bytes_ += bytes;
    if (++chars_ >= next_check_ && !count_words()) return;
    if (layout_fed_ && chars_ > kLayoutChars) layout_fed_ = false;
    if (layout_fed_) TextOutputDev::drawChar(state, x, y, dx, dy, origin_x, origin_y, c, n_bytes, u, u_len);
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
    if (!raw_) return;
    raw_->endPage();
    const std::unique_ptr<TextWordList> list = raw_->makeWordList(false);
    const std::uint64_t w = done_words_ + static_cast<std::uint64_t>(list->getLength());
    const std::uint64_t f = done_fragments_ + fragments(*list);
    words_ = w;
    layout_work_ = w * f + w * w / 16;
    const ExtractOptions& o = reader_.opts_;
    const bool fits = layout_fed_ && layout_work_ <= o.max_page_layout_work &&
                      reader_.layout_used_ + layout_work_ <= o.max_layout_work;
    if (fits) {
      reader_.layout_used_ += layout_work_;
      TextOutputDev::endPage();
      if (!sink_ || !sink_->full) return;
      // The layout pads columns with spaces: text spread thinly over a page can lay out to far more
      // bytes than it has. Then the content-stream order keeps all of it.
      sink_->out.clear();
      sink_->full = false;
      layout_overflow_ = true;
    }
    raw_order_ = true;
    if (sink_) {
      append(sink_, raw_text_.out.data(), static_cast<int>(raw_text_.out.size()));
      raw_->dump(sink_, &append, false, eolUnix, true);
    } else {
      keep_words(*list);
    }
  }

  /// The page's words with their boxes, as poppler-cpp's page::text_list() gives them.
  std::vector<Word> words() {
    if (raw_order_) return std::move(raw_words_);
    std::vector<Word> out;
    std::unique_ptr<TextWordList> list = makeWordList();
    if (!list) return out;
    keep_words(*list, &out);
    return out;
  }

  enum class Stop { none, text, words, content };

  Reader& reader_;
  Sink* sink_;
  std::uint64_t text_cap_;
  std::uint64_t content_left_;
  std::uint64_t word_cap_ = 0, layout_words_ = 0;
  std::unique_ptr<TextPage, TextPageUnref> raw_;
  Sink raw_text_;                // text of the raw chunks already taken
  std::vector<Word> raw_words_;  // words of the raw chunks (word pass, content order)
  std::uint64_t done_words_ = 0, done_fragments_ = 0, chunk_chars_ = 0;
  std::uint64_t text_bytes_ = 0, chars_ = 0, next_check_ = 0, words_ = 0;
  std::uint64_t forms_bytes_ = 0, layout_work_ = 0;
  bool stopped_ = false, layout_fed_ = true, actual_open_ = false, raw_order_ = false, layout_overflow_ = false;
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

  // Takes the raw chunk: counts its words and fragments, keeps its text (or words), starts another.
  void next_chunk(GfxState* state) {
    raw_->endPage();
    const std::unique_ptr<TextWordList> list = raw_->makeWordList(false);
    done_words_ += static_cast<std::uint64_t>(list->getLength());
    done_fragments_ += fragments(*list);
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
  // two checks (at most one per character) cannot pass a limit by more than an eighth of it.
  bool count_words() {
    const std::unique_ptr<TextWordList> list = raw_->makeWordList(false);
    const std::uint64_t w = done_words_ + static_cast<std::uint64_t>(list->getLength());
    if (w > word_cap_) {
      stop(Stop::words);
      return false;
    }
    if (layout_fed_ && w > layout_words_) layout_fed_ = false;  // too many words to be laid out: stop feeding it
    const std::uint64_t limit = layout_fed_ ? std::min(word_cap_, layout_words_) : word_cap_;
    next_check_ = chars_ + std::max<std::uint64_t>(limit > w ? limit - w : 0, std::max<std::uint64_t>(limit / 8, 1));
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

std::uint64_t Reader::stream_size(const Ref& ref, std::uint64_t cap) {
  const std::uint64_t key = key_of(ref);
  if (auto it = sizes_.find(key); it != sizes_.end()) return it->second;
  std::uint64_t total = 0;
  Object obj = doc_->getXRef()->fetch(ref);
  if (obj.isStream()) {
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
  sizes_.emplace(key, total);
  return total;
}

std::string Reader::precharge(int index, std::uint64_t* charged) {
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
  // used, but one that is too large must not be decoded even once).
  std::string why;
  auto walk_resources = [&](Dict* resources) {
    std::vector<Object> stack;
    if (resources) stack.emplace_back(resources->lookup("XObject"));
    while (!stack.empty() && why.empty()) {
      Object xobjects = std::move(stack.back());
      stack.pop_back();
      if (!xobjects.isDict()) continue;
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
        if (res.isDict()) stack.emplace_back(res.dictLookup("XObject"));
      }
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
  std::uint64_t charged = 0;
  std::string why = precharge(index, &charged);
  if (why.empty() && content_used_ + charged > opts_.max_content_bytes)
    why = "the document's content streams decode to more than the limit of " +
          std::to_string(opts_.max_content_bytes) + " bytes";
  if (!why.empty()) {
    out.warnings.push_back(label + " skipped: " + why);
    return out;
  }
  content_used_ += charged;
  const std::uint64_t content_left = std::min(opts_.max_page_content_bytes - charged, opts_.max_content_bytes - content_used_);
  const std::uint64_t text_cap = std::min<std::uint64_t>(opts_.max_page_text_bytes, text_budget);

  Sink sink;
  sink.cap = static_cast<std::size_t>(std::min<std::uint64_t>(opts_.max_page_text_bytes, text_budget));
  Pass text(*this, &sink, true, text_cap, content_left);
  doc_->displayPage(&text, index + 1, 72, 72, 0, false, true, false, &Pass::abort_check, &text);
  content_used_ += text.forms_bytes_;
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
      if (sink.full)
        out.warnings.push_back(label + ": text cut at the limit of " + std::to_string(sink.cap) + " bytes");
      break;
  }
  if (text.layout_overflow_)
    out.warnings.push_back(label + ": its physical layout (columns padded with spaces) is larger than the limit of " +
                           std::to_string(sink.cap) + " bytes; its text is in content-stream order");
  else if (text.raw_order_ && text.stop_ != Pass::Stop::words)
    out.warnings.push_back(label + ": too intricate for the layout analysis within its limits (" +
                           std::to_string(text.words_) + " words, estimated cost " + std::to_string(text.layout_work_) +
                           "); its text is in content-stream order");
  if (want_words && !out.text.empty()) {
    Pass boxes(*this, nullptr, false, text_cap, content_left);
    doc_->displayPageSlice(&boxes, index + 1, 72, 72, 0, false, false, false, -1, -1, -1, -1, &Pass::abort_check,
                           &boxes, nullptr, nullptr, true);
    out.words = boxes.words();
  }
  return out;
}

}  // namespace quarry::detail::pdf
