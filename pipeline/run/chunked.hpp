// Documents longer than the model's context (kie): the windows a document is cut into, and the merge
// of the windows' records into one. The same windows, at most 1/2, 1/4 or 1/8 of the document's text,
// serve a document whose output ran past max_tokens before its JSON closed (validate sends it back to
// build: ExtractedMsg::output_splits, kMaxOutputSplits in stages.hpp).
//
//   build:    windows = plan_windows(text, counter, {budget, overlap});  one request per window
//   validate: each window's output parsed; its evidence found in the window's text and moved to the
//             document's pages (shift_evidence); merge_window_records -> one record, validated as a whole
//
// Windows. The document is cut into the retrieval pieces `quarry ask` uses (rag::page_chunks: per
// page, between lines, never across a page), and consecutive pieces are packed into windows of at
// most `budget_tokens`; the next window starts with the last pieces of the previous one that fit
// `overlap_tokens` (so that a table row or a sentence cut at a window's end is whole in the next
// one). A window's text is the document's own text from its first piece to its last (pages joined by
// '\f' as in the document), so offsets found in it map back exactly: page 1 of the window is page
// `first_page` of the document from byte `first_offset`, every later page of the window is a whole
// page from byte 0.
//
// Merge rules (merge_window_records), over the windows' records in document order:
//  - objects: merged member by member (members in the order they first appear);
//  - arrays (line items, parties, lists): concatenated in window order; an element equal to one
//    already taken is dropped: scalars (strings compared upper-cased with white space collapsed)
//    against every element taken so far, objects (compared the same way, member by member) against
//    the elements of the previous window only, which is what the overlap repeats (two equal line
//    items further apart are two items);
//  - scalars (header fields, totals): the first non-null value, in window order, that is supported
//    by its window: it has evidence there (a grounded value, x-quarry-source), or, for a string
//    without evidence, it is a span of the window's text (grammar::find_copy_span); failing that,
//    the first non-null value;
//  - evidence follows the value: the entries of a value's window, under the value's pointer in the
//    merged record (array indices renumbered);
//  - then the validators choose (refine_merge): where the merged record breaks a rule at a scalar's
//    pointer (a total that is not the sum of the line items), another window's value for it is tried,
//    and kept when the record then breaks fewer rules.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/chunk.hpp"

namespace quarry::run {

/// One window of a document: [first_page, first_offset) to [last_page, end_offset).
struct TextWindow {
  std::string text;              ///< the document's text over the window (pages joined by '\f')
  std::size_t first_page = 1;    ///< 1-based page where it starts
  std::size_t first_offset = 0;  ///< byte offset in that page's text where it starts
  std::size_t last_page = 1;     ///< 1-based page where it ends
  std::size_t tokens = 0;        ///< planned tokens (sum of its pieces' counts, one per join)
};

struct WindowOptions {
  std::size_t budget_tokens = 4096;  ///< tokens of document text per window at most (>= 16)
  std::size_t overlap_tokens = 512;  ///< tokens the next window repeats of the previous one at most
};

/// Cuts `text` (Document::text(): lines joined by '\n', pages by '\f') into windows as described at
/// the top of this file; pieces are chunk_document pieces of min(256, budget / 4, overlap / 2) tokens
/// (at least 8; overlap / 2 only for an overlap of 16 tokens or more). Every byte of every non-empty page lies in some window; windows are in document order and
/// each starts after the previous one's start. One window when the whole text fits. A text without
/// any non-blank line gives one window holding it. Throws std::invalid_argument for budget_tokens < 16.
std::vector<TextWindow> plan_windows(const std::string& text, const TokenCounter& counter, const WindowOptions& opts);

/// Evidence entries ({"page", "start", "end", "text"}, schemas/evidence.hpp) found in a window's
/// text, moved to the document: page p of the window becomes page first_page + p - 1, and offsets on
/// the window's first page move by first_offset. Derived entries ({"derived": ...}) are kept as they are.
nlohmann::ordered_json shift_evidence(const nlohmann::ordered_json& evidence, std::size_t first_page,
                                      std::size_t first_offset);

/// One window's record for the merge.
struct WindowRecord {
  nlohmann::ordered_json data;      ///< the parsed output (null when it was not complete JSON)
  nlohmann::ordered_json evidence;  ///< JSON pointer -> entry, already in the document's pages (shift_evidence)
  std::string text;                 ///< the window's text (for strings without evidence)
};

/// Another window's value for a scalar of the merged record.
struct Alternative {
  std::size_t window = 0;
  nlohmann::ordered_json value;
  std::string pointer;  ///< where it is in that window's record
};

struct MergedRecord {
  nlohmann::ordered_json data;                                        ///< null when no window gave data
  nlohmann::ordered_json evidence = nlohmann::ordered_json::object(); ///< pointer in `data` -> entry
  std::vector<std::size_t> windows_used;  ///< windows that gave at least one value, ascending
  /// Pointer of a scalar in `data` -> the other windows' non-null values for it that differ from the
  /// one taken, supported ones first, each in window order.
  std::map<std::string, std::vector<Alternative>> alternatives;
};

/// Merges the windows' records by the rules at the top of this file. Never throws for any data.
MergedRecord merge_window_records(const std::vector<WindowRecord>& windows);

/// The validators' choice among the windows' values: `violations(data)` gives the JSON pointers of
/// the rules `data` breaks (schema and business rules). For each pointer of `merged` with
/// alternatives, in the order `violations` reports them, each alternative is tried in turn and kept
/// (its window's evidence with it) when the record then breaks fewer rules; at most `max_checks`
/// calls of `violations`. Returns how many values were replaced.
std::size_t refine_merge(MergedRecord& merged, const std::vector<WindowRecord>& windows,
                         const std::function<std::vector<std::string>(const nlohmann::ordered_json&)>& violations,
                         std::size_t max_checks = 64);

/// Record stats of a chunked request: the windows' EngineWorker::stats_json summed (token counts,
/// forced_tokens, draft_tokens, accepted_tokens, verify_steps), ttft_ms of the first window,
/// decode_tok_s as all decode tokens over all decode time, and "chunks": the number of windows.
nlohmann::ordered_json chunked_stats(const std::vector<nlohmann::ordered_json>& window_stats);

}  // namespace quarry::run
