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

/// --cross-check: compares a model record's `data` with `xml` (the invoice mapped from the document's
/// e-invoice by `method`, e.g. "einvoice-cii") along `schema` (schemas/cross_check.hpp) and adds to
/// `record`:
///   "warnings": one {"pointer", "rule": "rule:cross_check", "message", "model", "xml"} per field
///               that disagrees (`model` null: the model gave none; for an array, the element counts);
///   "cross_check": {"against": method, "fields_compared", "fields_agreeing", "fields_disagreeing",
///                   "fields_model_only", "by_field": {"/line_items/*/net_amount": {"agree": 2,
///                   "disagree": 1}} (the outcomes that occur), "xml": the XML's values, ordered like the schema}
/// When `data` is not an object nothing is compared: "cross_check" then says why in "skipped".
/// `data` is left as the model wrote it; the status is not changed (warnings are not errors).
void add_cross_check(nlohmann::ordered_json& record, const nlohmann::json& schema,
                     const nlohmann::ordered_json& schema_ordered, const nlohmann::ordered_json& data,
                     const nlohmann::ordered_json& xml, const std::string& method);

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
