// Grounded decoding: values that can only be what a document says.
//
// A schema location annotated `"x-quarry-source": "copy" | "number" | "date"` compiles to grammar
// nodes tagged with that kind (json_schema.hpp; `"free"` or no annotation: untagged). Given the text of
// a document, a per-request GroundingIndex holds
//  - copy:   a suffix automaton (Blumer et al. 1985; the online construction of Crochemore & Hancart,
//            "Automata for matching patterns", 1997) over the document's normalised text: each page with
//            every run of whitespace made one space, pages separated by a byte no value can hold (0xFF),
//            and a marker byte no value can hold at every word start (0xFE) and word end (0xFD);
//  - number: a trie of the JSON spellings of every number printed in the document (find_numbers);
//  - date:   a trie of the ISO 8601 dates (YYYY-MM-DD) of every date printed in it (find_dates);
// and a GroundState (small, copyable: the matcher keeps one per accepted token, so it rolls back with
// the parser state) follows the bytes of a grounded value:
//  - copy: the string body is decoded (JSON escapes \" \\ \/ \b \f \n \r \t \uXXXX; UTF-8 characters
//    are completed before they are matched); a whitespace character of the value must meet a
//    whitespace run of the document, and a whitespace run of the document may also be skipped
//    (an IBAN printed `HU42 1177 3016` may be written `HU4211773016`), except between two letters
//    (`Nettó forintban` is not `Nettóforintban`: a word the document does not print); runs of value
//    whitespace count as one and are at most GroundState::kMaxSpaceRun characters; the value does
//    not start with whitespace (a span is the characters, not the blank before them). Whole words: a value starting with a letter or digit starts where a word of the
//    document starts, and one ending with a letter or digit ends where a word ends (never `kony` out
//    of `Számlakonyv`, nor `Seria` out of `Serial`). Words (word_class): runs of letters (with their
//    combining marks), runs of digits (so `12345` may be taken out of `INV12345`), and each single
//    character of the scripts written without spaces between words (Han, kana, Thai, Lao, Khmer,
//    Myanmar, Tibetan). In the middle of a value the markers are stepped over (the document puts
//    them where the same two characters meet, so any path through them is a real span).
//    The state is the set of automaton states the value reaches (at most
//    kMaxStates; a set cut there only makes the mask stricter, never looser). The value ends at its
//    closing quote.
//  - number / date: the written text must follow the candidate trie; a number ends at the first byte
//    that cannot continue a JSON number (it must then be a complete candidate), a date string at its
//    closing quote. A number region whose first byte cannot start a number (`null`) ends at once.
// The mask at a grounded position is the grammar's mask AND the tokens whose bytes the GroundState
// accepts (GroundingIndex::inside_mask, a walk of the vocabulary trie that leaves at the first
// byte the state rejects). See GrammarMatcher::set_grounding for the parts that need the parser
// (tokens that enter or leave a grounded value in their middle).
//
// Offsets of TextSpan are bytes of the page's UTF-8 text, [start, end).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace quarry::engine::grammar {

class TokenizerInfo;
using TokenId = std::int32_t;

/// The value of `x-quarry-source` (GNode::source holds it for the nodes of a grounded value).
enum class SourceKind : std::uint8_t { kFree = 0, kCopy = 1, kNumber = 2, kDate = 3 };
/// "free", "copy", "number", "date"; nullopt for anything else.
std::optional<SourceKind> parse_source_kind(std::string_view s);
const char* source_kind_name(SourceKind k);

// ---- Reading a document (also used by the validators' evidence) ---------------------------------

/// Where a value was found: page index (0-based) and byte offsets [start, end) in that page's text.
struct TextSpan {
  std::size_t page = 0, start = 0, end = 0;
};

/// Whitespace for grounding: ASCII \t \n \v \f \r and space, U+0085, U+00A0, U+1680, U+2000-U+200A,
/// U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_ground_space(char32_t cp);

/// The word class of a character for the whole-word rule of copied values: 0 neither (whitespace,
/// punctuation, symbols, controls), 1 letter (Unicode L or M), 2 digit (Unicode N), 3 a letter of a
/// script written without spaces between words (a word on its own). A word boundary lies between two
/// characters of different classes, before and after every class-3 character, and at either side of
/// whitespace.
std::uint8_t word_class(char32_t cp);

/// Splits a document text into pages at form feeds ('\f', as extractors write page breaks).
std::vector<std::string> split_pages(std::string_view text);

/// The first place where `value` is a span of the pages whitespace-insensitively (as the copy
/// automaton matches: a value whitespace run must meet a document whitespace run, a document run may be
/// skipped; leading / trailing value whitespace must meet document whitespace). The span covers the
/// matched characters without surrounding whitespace. nullopt if none, or the value is only whitespace
/// or empty. Linear scan per candidate start: O(page bytes x value bytes) worst case.
std::optional<TextSpan> find_copy_span(const std::vector<std::string>& pages, std::string_view value);

/// A number printed in the document, in one reading (`1,234` is read both as 1234 and 1.234).
struct NumberOccurrence {
  std::string decimal;  ///< canonical decimal: optional '-', integer digits without leading zeros, '.' and
                        ///< fraction digits without trailing zeros when there are any ("1234.5", "-3", "0.27")
  TextSpan span;        ///< the printed number (sign included)
  std::uint8_t printed_frac = 0;  ///< fraction digits as printed ("1 234,50": 2)
};
/// Every number of the pages, in every plausible reading: digit groups separated by ' ', U+00A0,
/// U+202F, U+2009, '.', ',' or '\'' (groups of three after the first), a decimal point or comma;
/// a leading '-' / U+2212 or enclosing parentheses make it negative; each space-separated piece
/// of a spaced run is read on its own too. Limit: 100,000 occurrences per document.
std::vector<NumberOccurrence> find_numbers(const std::vector<std::string>& pages);
/// The canonical decimal of a JSON number text (see NumberOccurrence::decimal); exponents are
/// applied. nullopt if `json_number` is not a JSON number.
std::optional<std::string> canonical_decimal(std::string_view json_number);

/// A date printed in the document, as ISO 8601 YYYY-MM-DD.
struct DateOccurrence {
  std::string iso;
  TextSpan span;
};
/// Every date of the pages: numeric Y-M-D (`2024-03-15`, `2024.03.15.`, `2024. 03. 15.`, `2024/03/15`),
/// D-M-Y and M/D/Y (`15.03.2024`, `15/03/2024`, `03/15/2024`, two-digit years as 20YY), and with
/// month names or their abbreviations in hu, de, en, fr, it, es, nl, pl (`March 15, 2024`,
/// `15. März 2024`, `2024. március 15.`, `15 de marzo de 2024`, `15 marca 2024`). Ambiguous numeric
/// dates give every valid reading; impossible dates (30 February) none.
std::vector<DateOccurrence> find_dates(const std::vector<std::string>& pages);

/// The JSON spellings a grounded number may be written as: the canonical decimal, and with its
/// fraction padded with zeros up to the printed fraction digits ("1234", "1234.0", "1234.00" for a
/// printed "1 234,00").
std::vector<std::string> number_spellings(const NumberOccurrence& n);

// ---- The per-request structure -------------------------------------------------------------------

/// Where a grounded value is while it is written. Plain data (copy it freely; compare with ==).
struct GroundState {
  static constexpr std::size_t kMaxStates = 6;
  static constexpr std::uint8_t kMaxSpaceRun = 2;  ///< copy: whitespace characters in a row in a value at most
  std::uint8_t kind = 0;  ///< SourceKind of the value being written; 0 = not inside a grounded value
  std::uint8_t esc = 0;   ///< JSON escape: 0 none, 1 after '\\', 2..5 inside \uXXXX (esc - 2 digits read)
  std::uint8_t need = 0;  ///< UTF-8 continuation bytes still to come of the current character
  std::uint8_t sp = 0;    ///< copy: how many whitespace characters the value ends with (0 .. kMaxSpaceRun)
  std::uint8_t n = 0;     ///< used entries of st
  std::uint8_t len = 0;   ///< bytes of the UTF-8 character being read (with need > 0)
  std::uint8_t wc = 0;    ///< copy: word_class of the last value character (0 at the start and after whitespace)
  /// The value met a dead end (the grammar allows nothing the document has, e.g. a pattern that the
  /// spans from here cannot complete): it goes on ungrounded up to its end (GrammarMatcher).
  std::uint8_t lost = 0;
  /// JSON lexing of the whole output (kept outside grounded values too): bit 0 inside a string,
  /// bit 1 after a backslash in one. Tokens without a quote cannot leave a string.
  std::uint8_t json = 0;
  std::uint32_t cp = 0;   ///< code point being read
  std::array<std::uint32_t, kMaxStates> st{};  ///< copy: automaton states; number / date: trie node (st[0])
  bool operator==(const GroundState& o) const;
  std::uint64_t hash() const;
};

/// The vocabulary facts grounding needs, computed once per TokenizerInfo (share it).
class GroundingVocab {
 public:
  explicit GroundingVocab(std::shared_ptr<const TokenizerInfo> tok);
  const TokenizerInfo& tokenizer() const { return *tok_; }
  std::shared_ptr<const TokenizerInfo> tokenizer_ptr() const { return tok_; }
  /// Tokens that may enter a grounded value after their first byte: a '"' before their last byte, or
  /// '-' / a digit after their first byte (checked by the matcher byte by byte at positions outside
  /// a grounded value).
  const std::vector<TokenId>& entry_candidates() const { return entry_; }
  /// The entry candidates with a '"' before their last byte (the only ones that can leave a string
  /// and enter a value).
  const std::vector<TokenId>& quote_candidates() const { return quote_entry_; }
  /// Whether bytes following the end of a grounded value inside one token could enter another one
  /// ('"' before the last byte, '-' or a digit anywhere).
  static bool may_enter(std::string_view rest);
  /// The vocabulary trie's child of the root for first byte b (0: none).
  std::uint32_t root_child(std::uint8_t b) const { return root_child_[b]; }
  /// The tokens that start with '"' (a copy or date value ending at the token's first byte), and the
  /// tokens whose first byte cannot continue a number (a number ending there): their bits, and among
  /// them those that may enter another value after it (checked exactly).
  struct ExitSet {
    std::vector<std::uint32_t> bits;
    std::vector<TokenId> exact;
  };
  const ExitSet& quote_exit() const { return quote_exit_; }
  const ExitSet& number_exit() const { return number_exit_; }

 private:
  std::shared_ptr<const TokenizerInfo> tok_;
  std::vector<TokenId> entry_, quote_entry_;
  std::array<std::uint32_t, 256> root_child_{};
  ExitSet quote_exit_, number_exit_;
};

/// A grounding mask: bits (TokenizerInfo::mask_words() words) and the tokens among them that
/// leave the grounded value and go on (checked exactly, byte by byte with the parser).
struct GroundMask {
  std::vector<std::uint32_t> bits;
  std::vector<TokenId> exact;
};

/// The per-request structure over one document. Built once (GroundingIndex::build, milliseconds for
/// a 10-page document: the suffix automaton is linear in the text, the masks of the start of a copy,
/// number and date value are built eagerly), then shared by the request's matcher; the mask caches fill
/// under a lock (thread-safe).
class GroundingIndex {
 public:
  /// Limit: the normalised text (word markers included) is cut at 1 MiB in total, and numbers and dates
  /// are read from the first 1 MiB of the pages (values past that are not groundable); the automaton of
  /// 1 MiB holds about 2 million states (about 50 MB).
  static constexpr std::size_t kMaxText = std::size_t{1} << 20;
  static std::shared_ptr<GroundingIndex> build(std::shared_ptr<const GroundingVocab> vocab,
                                               const std::vector<std::string>& pages);

  const GroundingVocab& vocab() const { return *vocab_; }
  /// The state at the start of a value of this kind.
  GroundState init(SourceKind k) const;
  enum class Step { kOk, kDead, kExit };
  /// Feeds one byte of a grounded value: kOk (still inside), kDead (the value cannot go on as the
  /// document allows), kExit (the byte ends the value: the copy / date closing quote, the byte after a
  /// number; the state is then outside, kind 0).
  Step step(GroundState& g, std::uint8_t b) const;
  /// Marks g lost (GroundState::lost): from now on step() only finds the end of the value.
  static void lose(GroundState& g) { g.lost = 1; }
  /// The tokens whose bytes `g` (inside a value) accepts up to the end of the value (cached per state).
  std::shared_ptr<const GroundMask> inside_mask(const GroundState& g) const;
  /// At a position outside a value where first bytes lead into grounded values (`entry[b]` = kind of
  /// the value byte b enters, 0 = none): every token not starting with such a byte, plus the tokens
  /// starting with one that the value's start state accepts (for a copy or date value b is its opening
  /// quote; for a number b is its first byte). Cached per entry set.
  std::shared_ptr<const GroundMask> entry_mask(const std::array<std::uint8_t, 256>& entry) const;

  /// Sizes, for benches and logs.
  std::size_t text_bytes() const { return text_.size(); }
  std::size_t automaton_states() const { return len_.size(); }
  std::size_t number_candidates() const { return n_numbers_; }
  std::size_t date_candidates() const { return n_dates_; }
  double build_ms() const { return build_ms_; }

 private:
  explicit GroundingIndex(std::shared_ptr<const GroundingVocab> vocab) : vocab_(std::move(vocab)) {}
  void build_automaton();
  std::uint32_t sam_next(std::uint32_t s, std::uint8_t b) const;
  bool copy_char(GroundState& g, char32_t cp) const;
  /// Whether a copy value may end in state g: its last character ends a word of the document, or is not
  /// a letter or digit.
  bool copy_can_end(const GroundState& g) const;
  bool copy_byte(GroundState& g, std::uint8_t b) const;
  /// Whether the escape or UTF-8 character being read in g can still be completed as the document allows.
  bool copy_partial_ok(const GroundState& g) const;
  // Candidate tries (numbers, dates): node 0 is the root.
  struct Trie {
    std::vector<std::uint32_t> off;              // children of node v: edges [off[v], off[v + 1])
    std::vector<std::uint8_t> byte;
    std::vector<std::uint32_t> to;
    std::vector<std::uint8_t> terminal;
    std::uint32_t next(std::uint32_t v, std::uint8_t b) const;
    static Trie from(std::vector<std::string> words);
  };
  /// Walks the vocabulary trie below trie node v from state g, setting accepted tokens in m.
  void walk(std::uint32_t v, const GroundState& g, GroundMask& m) const;
  /// Visits trie child c (byte b) of a walk from state g.
  void visit(std::uint32_t c, const GroundState& g, GroundMask& m) const;
  void allow_exit_subtree(std::uint32_t c, GroundMask& m) const;
  GroundMask compute_inside(const GroundState& g) const;
  GroundMask compute_entry(const std::array<std::uint8_t, 256>& entry) const;

  std::shared_ptr<const GroundingVocab> vocab_;
  std::string text_;  // normalised pages, 0xFF between pages
  // Suffix automaton, transitions in CSR form sorted by byte; the root's in a dense table.
  std::vector<std::uint32_t> len_, off_, to_;
  std::vector<std::uint8_t> byte_;
  std::array<std::uint32_t, 256> root_next_{};
  Trie numbers_, dates_;
  std::size_t n_numbers_ = 0, n_dates_ = 0;
  double build_ms_ = 0;
  struct StateHash {
    std::size_t operator()(const GroundState& g) const { return static_cast<std::size_t>(g.hash()); }
  };
  mutable std::mutex mu_;
  mutable std::unordered_map<GroundState, std::shared_ptr<const GroundMask>, StateHash> inside_cache_;
  mutable std::unordered_map<std::string, std::shared_ptr<const GroundMask>> entry_cache_;
  static constexpr std::size_t kMaxCached = 512;  ///< per cache; full: cleared (masks stay valid where held)
};

}  // namespace quarry::engine::grammar
