// Question batches over long documents (RAG): question files, BM25 retrieval over the document's
// chunks, prompt assembly that keeps a long shared prefix, and the evidence check of answers.
//
// Flow for one document and its questions (what `quarry ask` / task = "rag" does):
//   auto qs = read_questions(path);                       // or an error naming file and line
//   auto tmpl = load_rag_template(model_dir / "prompts.json");
//   auto prompts = build_rag_prompts(doc, *qs, tmpl, counter, opts);
//   for each prompt: tokenizer.apply_chat_template(prompt.messages) -> engine.submit(...)
//   on each answer:  check_evidence(answer_json, doc) -> Violations (with the schema's own)
//
// Prefix sharing. Every prompt of one document is [system: template system (+ schema)] then
// [user: <context> + "\n\nQuestion: " + question], so the chat-rendered token sequences of two
// questions agree up to the question when the context is the whole document or the shared retrieved
// context (Retrieval::shared, the default), and up to the first retrieved chunk where their
// retrievals differ with Retrieval::per_question (chunks are placed in document order, so the chunks
// both retrieved near the start are shared too). The engine's prefix cache prefills the shared part once.
//
// Page fidelity. The model reads pages as Document::text() writes them (lines joined by '\n', pages
// separated by '\f') and reports 1-based page numbers by counting form feeds. Retrieval chunks are
// made page by page (chunk_document of each page alone, no overlap), so a chunk never spans two pages,
// and the retrieved context keeps every '\f' of the document: it is Document::text() with the lines
// of unretrieved chunks left out, so page numbers stay true.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <tl/expected.hpp>

#include "engine/tokenizer/tokenizer.hpp"
#include "extractors/document.hpp"
#include "pipeline/chunk.hpp"
#include "schemas/validate.hpp"

namespace quarry::rag {

// --- Question files ---------------------------------------------------------------------------

/// One question of a question file.
struct Question {
  std::string id;        ///< the JSON line's "id" (a string, or an integer written in decimal), else
                         ///< the 1-based line number in decimal ("7")
  std::string text;      ///< the question, UTF-8, trimmed of surrounding white space
  std::size_t line = 0;  ///< 1-based line of the file it came from
};

/// Why a question file cannot be used. `line` is 0 when the problem is the file as a whole.
struct QuestionFileError {
  std::string file;
  std::size_t line = 0;
  std::string reason;
  /// "FILE:LINE: reason" (or "FILE: reason" when line is 0).
  std::string message() const;
};

/// Reads a question file. Each non-blank line is one question: plain text, or, when the line starts
/// with '{', a JSON object with a non-empty string "question" and an optional "id" (string or
/// integer; other members, such as a reference "answer", are ignored). Both kinds may be mixed.
/// A UTF-8 byte order mark and CRLF line ends are accepted.
/// Errors (never throws for bad input): the file is missing or unreadable, larger than 64 MiB, not
/// valid UTF-8 (line named), a JSON line that does not parse (with the parser's reason), is not an
/// object, lacks "question" or has an empty or non-string one, an "id" of another type, an id used
/// twice (both lines named), a line longer than 1 MiB, or no question at all.
tl::expected<std::vector<Question>, QuestionFileError> read_questions(const std::filesystem::path& path);

/// The same, for text already in memory; `name` labels it in errors.
tl::expected<std::vector<Question>, QuestionFileError> parse_questions(std::string_view text, const std::string& name);

// --- BM25 ------------------------------------------------------------------------------------

/// BM25 parameters (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
/// 2009). k1 = 1.2 (term-frequency saturation) and b = 0.75 (length normalisation) are the values
/// recommended there and the defaults of Lucene and Elasticsearch.
struct Bm25Params {
  double k1 = 1.2;
  double b = 0.75;
};

/// Terms of `text` for BM25: maximal runs of letters and digits (ASCII, and any non-ASCII UTF-8 code
/// point except the punctuation and space blocks U+0080-U+00BF, U+2000-U+206F, U+3000-U+303F),
/// lower-cased (ASCII, Latin-1 Supplement and Latin Extended-A, so "Á" -> "á", "Ő" -> "ő"); one-letter
/// terms other than digits are dropped. No stemming and no stop words: the idf weight already makes
/// frequent words count for little. Hyphenated and dotted numbers split into their digit runs
/// ("26417358-2-41" -> "26417358", "2", "41").
std::vector<std::string> bm25_terms(std::string_view text);

/// An Okapi BM25 index over a fixed list of passages (here: a document's chunks).
/// score(q, d) = sum over distinct terms t of q present in d of
///     idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
/// with idf(t) = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5)), the Robertson-Sparck Jones weight without
/// relevance information, shifted by 1 inside the log (as Lucene does) so that it is never negative;
/// |d| is the number of terms of d, avgdl their mean over the N passages, n(t) the passages holding t.
class Bm25Index {
 public:
  /// Indexes `passages` (UTF-8 texts). An empty list gives an index whose scores are empty.
  explicit Bm25Index(const std::vector<std::string>& passages, Bm25Params params = {});

  /// One score per passage, in passage order; 0 for a passage sharing no term with `query`.
  std::vector<double> scores(std::string_view query) const;

  std::size_t size() const { return doc_len_.size(); }
  const Bm25Params& params() const { return params_; }

 private:
  Bm25Params params_;
  struct Posting {
    std::uint32_t passage;  ///< passage index
    std::uint32_t tf;       ///< occurrences of the term in it
  };
  std::vector<std::size_t> doc_len_;
  double avgdl_ = 0;
  std::unordered_map<std::string, std::vector<Posting>> postings_;  ///< term -> postings, ascending passage
};

/// Passages with a score above 0 for `query`, best first (ties: earlier first).
std::vector<std::size_t> ranked(const Bm25Index& index, std::string_view query);

/// The passages chosen for `query`: in descending score (ties: earlier first), passages with a score
/// above 0 are taken while their token counts (`tokens[i]`) fit `token_budget` in total (one that
/// does not fit is skipped and smaller ones after it may still be taken), at most `max_passages`
/// (0 = no limit). Returned ordered by position (ascending index), as the prompt places them.
std::vector<std::size_t> retrieve(const Bm25Index& index, std::string_view query, const std::vector<std::size_t>& tokens,
                                  std::size_t token_budget, std::size_t max_passages = 0);

/// Retrieval chunks of `doc`: chunk_document of each page on its own (so no chunk spans pages), with
/// the given options; `index` runs over the whole document in page order. Their texts, joined page by
/// page as described at the top of this file, rebuild Document::text() when overlap_tokens is 0.
std::vector<Chunk> page_chunks(const Document& doc, const TokenCounter& counter, const ChunkOptions& opts);

// --- Prompts ---------------------------------------------------------------------------------

/// A TokenCounter backed by a model's tokenizer: count(text) = tokenizer->encode(text).size(), exact
/// for the text alone (a count of a concatenation may differ by a token or so at each join, where BPE
/// merges across it). Thread-safe as the Tokenizer is.
class TokenizerCounter final : public TokenCounter {
 public:
  explicit TokenizerCounter(std::shared_ptr<const engine::Tokenizer> tokenizer) : tok_(std::move(tokenizer)) {}
  std::size_t count(std::string_view text) const override { return tok_->encode(text).size(); }

 private:
  std::shared_ptr<const engine::Tokenizer> tok_;
};

/// A prompt template: the "rag" entry of a model's prompts.json ({"system": ..., "user": ...}).
/// `user` holds "{document}" and, after it, "{question}"; `system` may hold "{schema}".
struct RagTemplate {
  std::string system;
  std::string user;
};

/// Reads the "rag" entry of `prompts_json` (e.g. models/quarry-extract-11m/prompts.json).
/// Throws std::runtime_error naming the file when it is missing, not JSON, lacks rag.system /
/// rag.user strings, or when rag.user lacks "{document}" or "{question}" or puts the question before
/// the document (the question must come last for prefix sharing).
RagTemplate load_rag_template(const std::filesystem::path& prompts_json);

/// How a document too long for the context is cut down to retrieved chunks. Measured on
/// samples/long (16 pages, ~13K tokens by EstimateTokenCounter, its 43 English questions, context
/// 8192, chunks of 256; tests/rag prints the numbers): shared puts the answer's page in the context
/// for 100% of the questions and the expected evidence for 93%, and consecutive prompts share 99.6%
/// of their tokens; per_question gives 100% / 100% but consecutive prompts share only 2.8%
/// (per_question with retrieval_tokens = 1024: 100% / 100% in ~1.3K-token prompts).
enum class Retrieval {
  /// One context for all the questions of the document: the chunks of every question's BM25 ranking
  /// taken in rounds (each question's best chunk, then each one's second best, ...) while they fit
  /// the budget, placed in document order. All prompts of the document are then identical up to the
  /// question, so the whole context is a shared prefix; each question sees its own best chunks as
  /// deep down its ranking as the budget allows for all of them. The context depends on the whole
  /// batch: adding a question may change it.
  shared,
  /// Each question its own chunks: its ranking taken while it fits `retrieval_tokens` (or the whole
  /// budget), placed in document order. Prompts share the system message and the leading chunks that
  /// both retrievals chose.
  per_question,
};

struct RagPromptOptions {
  std::size_t context_tokens = 8192;         ///< the model's context length (config.json max_position_embeddings)
  std::size_t max_answer_tokens = 512;       ///< tokens kept free for the answer
  std::size_t chat_overhead_tokens = 32;     ///< tokens the chat template adds (role markers, empty think block)
  ChunkOptions chunk{256, 0};                ///< retrieval chunks (per page; overlap 0 keeps the text exact)
  Retrieval retrieval = Retrieval::shared;   ///< see Retrieval
  std::size_t retrieval_tokens = 0;          ///< per_question: cap on the chunks' tokens (0 = the whole budget)
  std::size_t max_chunks = 0;                ///< per_question: cap on chunks per question (0 = as many as fit)
  Bm25Params bm25{};
  /// Text of the answer's JSON Schema. Put into the system message in place of "{schema}" when the
  /// template has one, else appended to it after a blank line when non-empty. Empty for the shipped
  /// model, which was trained without the schema in its prompt (its output is constrained by it).
  std::string schema;
};

/// The prompt of one (document, question).
struct RagPrompt {
  const Question* question = nullptr;             ///< points into the `questions` argument
  std::vector<engine::ChatMessage> messages;      ///< {system, user}: shared part first, question last
  bool whole_document = false;                    ///< the whole document is the context
  std::vector<std::size_t> chunks;                ///< retrieved chunk indices into `RagPrompts::chunks`, ascending
                                                  ///< (the same for every question with Retrieval::shared)
  std::vector<int> pages;                         ///< pages the context draws on, ascending
  std::size_t prompt_tokens = 0;                  ///< counter's count of both messages + chat_overhead_tokens
};

struct RagPrompts {
  std::vector<Chunk> chunks;          ///< retrieval chunks (empty when the whole document fits)
  std::vector<RagPrompt> prompts;     ///< one per question, in question order
};

/// Builds the chat messages of every question about `doc`. The whole document (Document::text())
/// is the context when, for the longest question, system + user + chat_overhead_tokens +
/// max_answer_tokens fits context_tokens; otherwise the context is made of the chunks that BM25
/// retrieves within the tokens left (opts.retrieval says how; placed in document order, pages kept;
/// see the top of this file).
/// `counter` counts tokens (a tokenizer adapter, or EstimateTokenCounter). `questions` must outlive
/// the result. Throws std::invalid_argument when the template's user part lacks "{document}" or
/// "{question}", or when even an empty context leaves no room (context_tokens too small for the
/// system message, the longest question and max_answer_tokens).
RagPrompts build_rag_prompts(const Document& doc, const std::vector<Question>& questions, const RagTemplate& tmpl,
                             const TokenCounter& counter, const RagPromptOptions& opts = {});

// --- Evidence ------------------------------------------------------------------------------

/// `text` with every run of white space (space, tab, CR, LF, FF, VT, U+00A0 no-break space)
/// replaced by one space and leading/trailing white space removed.
std::string normalize_whitespace(std::string_view text);

/// Checks an answer (schemas/rag_answer.schema.json shape) against its source document:
///  - "rule:evidence" at /evidence/i: the quote does not occur in the document text, compared with
///    white space normalised (normalize_whitespace of both; a quote may span lines and pages), nor
///    as grounded decoding copies it (engine::grammar::find_copy_span: a white space run of the
///    document may also be left out, as in `HU4211773016` for `HU42 1177 3016`);
///  - "rule:pages" at /pages/i: a page number outside 1..number of pages;
///  - "rule:evidence_page" at /evidence/i: the quote occurs in the document, but, with `pages`
///    non-empty, on none of the listed pages (a quote spanning a page break counts for both pages).
/// Members of the wrong type are the schema's business and are skipped. Never throws.
std::vector<schemas::Violation> check_evidence(const nlohmann::json& answer, const Document& doc);

/// The 1-based pages (ascending, without repeats) where the answer's evidence quotes are printed: for
/// each quote the page of its first occurrence as a span of one page (engine::grammar::find_copy_span,
/// as grounded decoding produces quotes). nullopt when the answer has no "evidence" array of strings,
/// or when some non-empty quote is a span of no page. `pages`: the document's page texts
/// (engine::grammar::split_pages of Document::text()). Never throws for any answer.
std::optional<std::vector<int>> evidence_pages(const nlohmann::json& answer, const std::vector<std::string>& pages);

}  // namespace quarry::rag
