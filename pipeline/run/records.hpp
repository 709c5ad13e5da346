// The records of `quarry run` (one JSON line each in OUTDIR/results.jsonl) and the helpers the stages
// share to make them.
//
//   {"source", ["source_base64",] "sha256", ["question_id", "question",] "status", "method", "data",
//    "errors", "stats"}
// status: "ok" | "invalid" | "error"; method: "einvoice-ubl" / "einvoice-cii" / "einvoice-nav", "model",
// or null when the document could not be read; errors: [{"pointer", "rule", "message"}]; stats: token
// counts and times (EngineWorker::stats_json, plus "attempts" and "extract_ms"). "source_base64" is
// there only for a file name that is not UTF-8 (source_name.hpp).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "extractors/document.hpp"
#include "pipeline/run/messages.hpp"

namespace quarry::run {

/// {"pointer", "rule", "message"}.
nlohmann::ordered_json error_entry(const std::string& pointer, const std::string& rule, const std::string& message);

/// An error entry caused by the run's settings (the KV cache or the context too small): it carries
/// "retryable": true, so the record is not done in the ledger and the next run redoes it.
nlohmann::ordered_json settings_error_entry(const std::string& rule, const std::string& message);

/// A finished record for the writer.
RecordMsg make_record(const Subject& s, const std::string& status, const nlohmann::ordered_json& method,
                      const nlohmann::ordered_json& data, const nlohmann::ordered_json& errors,
                      const nlohmann::ordered_json& stats);

/// An `error` record with one error entry and the stats of a record no model produced.
RecordMsg error_record(const Subject& s, const nlohmann::ordered_json& method, const std::string& rule,
                       const std::string& message);

/// stats of a record that no model produced (zero tokens, `attempts`, the subject's extract_ms).
nlohmann::ordered_json stats_without_model(const Subject& s, std::size_t attempts);

/// The ledger key of a record: `source`, or `source#question_id` (rag).
std::string record_key(const std::string& source, const std::string& question_id);

/// `data` with object members in the order of the schema's "properties" (recursively through
/// properties and items; members the schema does not list keep their order, after the listed ones),
/// so that mapper records read like model records. Schemas with $ref are followed only where inline.
nlohmann::ordered_json order_like_schema(const nlohmann::ordered_json& data, const nlohmann::ordered_json& schema);

/// The same value as the (sorted-key) nlohmann::json the validators take.
nlohmann::json to_plain(const nlohmann::ordered_json& j);

/// A Document with the pages and lines of `text` (as Document::text() writes them: lines joined by
/// '\n', pages by '\f'), so that text() gives `text` back. What the rag library needs of a document.
Document document_from_text(const std::string& source, const std::string& text);

}  // namespace quarry::run
