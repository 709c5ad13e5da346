// The messages the stages of `quarry run` exchange (pipeline/run/runner.hpp), and their encoding.
//
//   discover --InputMsg--> extract --ExtractedMsg--> build --ModelTaskMsg--> engine --GeneratedMsg--> validate
//                                                        \--MappedMsg--------------------------------/   |
//   validate --ModelTaskMsg (retry)--> engine                                                             |
//   every stage --RecordMsg / NoticeMsg--> write  <----------------------------------------------------'
//   batch task: discover --BatchRequestMsg--> build --ModelTaskMsg (with its BatchSpec)--> engine ...
//
// Each message is a plain struct; encode()/decode() in messages.cpp are the only place that knows
// their wire form (MessagePack through nlohmann::json, a one-byte type tag first; the same bytes
// would cross a tcp transport). A stage receives a Message and takes the alternative it expects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

namespace quarry::run {

/// Token totals of one model attempt (prompt = prefill + cached), for the run's throughput figures.
struct TokenCounts {
  std::uint64_t prompt = 0, prefill = 0, cached = 0, decode = 0, draft = 0, accepted = 0;
};

/// Who a record is about: one document, or (rag) one document and one question.
struct Subject {
  std::string key;         ///< ledger key: `source`, or `source` + "#" + question id (rag)
  std::string source;      ///< the file's name as records show it (UTF-8; see source_name.hpp)
  std::string source_b64;  ///< the name's exact bytes in base64 when it is not UTF-8; empty otherwise
  std::string sha256;      ///< of the file's bytes; empty when the file could not be read
  std::string question_id, question;  ///< rag only (question_id empty for kie)
  double extract_ms = 0;
  bool has_question() const { return !question_id.empty(); }
};

/// discover -> extract: one input file.
struct InputMsg {
  std::string path;        ///< as found (raw bytes): what open() takes
  std::string source;      ///< display name (source_name.hpp)
  std::string source_b64;  ///< exact bytes of a non-UTF-8 name
  std::string problem;     ///< non-empty: not to be opened (e.g. "not a regular file (FIFO)"); an error record
};

/// extract -> build: one document's text.
struct ExtractedMsg {
  Subject doc;  ///< key == source
  std::string text;  ///< Document::text(): lines joined by '\n', pages by '\f'
  std::size_t pages = 0;
  std::optional<nlohmann::ordered_json> einvoice;  ///< invoice JSON mapped from a structured e-invoice
  std::string einvoice_format;                     ///< "ubl", "cii", "nav" with `einvoice`
  std::vector<bool> done;                          ///< per question (rag): already in the ledger
  /// kie: how many times a model request of this document ran past max_tokens before its JSON closed
  /// (validate sends the document back to build then): build cuts it into windows of at most
  /// 1 / 2^output_splits of its text, so that each window's output fits (0: as usual).
  std::size_t output_splits = 0;
};

/// discover -> build (batch task): one request line of an OpenAI Batch file, its envelope checked.
struct BatchRequestMsg {
  Subject subject;        ///< key: the custom_id; source: the batch file; sha256: of the line's bytes
  std::size_t line = 0;   ///< 1-based line number
  std::string custom_id;
  std::string url;        ///< "/v1/chat/completions" or "/v1/completions"
  std::string body;       ///< the request body, compact JSON
};

/// What a request of a batch file asks for beyond its prompt (pipeline/openai/openai_api.hpp Request):
/// the engine worker uses it instead of the job's schema and sampling, validate checks the output
/// against `schema_text`, and the response body is built from `url` and `model`.
struct BatchSpec {
  std::string custom_id;
  std::size_t line = 0;
  std::string url;           ///< the endpoint
  std::string model;         ///< the body's "model", echoed in the response
  int format = 0;            ///< openai::ResponseFormat: 0 text, 1 json_object, 2 json_schema
  std::string schema_text;   ///< compact JSON Schema (json_object: {"type":"object"}); empty for text
  float temperature = 1.f, top_p = 1.f, min_p = 0.f;
  std::size_t top_k = 0;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
};

/// One window of a document too long for the context (pipeline/run/chunked.hpp): its prompt, and
/// where its text lies in the document, so that evidence found in the window keeps the document's
/// page numbers and offsets.
struct ChunkPart {
  std::vector<std::int32_t> prompt;  ///< chat-templated prompt of this window, token ids
  std::string text;                  ///< the window's text (pages separated by '\f', as in the document)
  std::size_t first_page = 1;        ///< 1-based page of the document where the window starts
  std::size_t first_offset = 0;      ///< byte offset in that page's text where the window starts
};

/// The model's output for one ChunkPart.
struct ChunkOutput {
  std::string text;              ///< the model's output
  std::string finish;            ///< finish reason name, or "error"
  nlohmann::ordered_json stats;  ///< EngineWorker::stats_json of this request
  std::string error;             ///< non-empty: the engine refused or failed it
};

/// build -> engine (and validate -> engine for a retry): one model request.
struct ModelTaskMsg {
  Subject subject;
  std::vector<std::int32_t> prompt;  ///< chat-templated prompt, token ids
  std::size_t max_tokens = 0;
  std::size_t attempt = 0;           ///< 0: first; i: i-th retry (another seed and temperature)
  bool whole_document = false;       ///< rag: the prompt holds the whole document
  std::string document_text;         ///< rag: the document, for the evidence check
  std::optional<BatchSpec> batch;    ///< batch task: the request's own format, schema and sampling
  /// --cross-check: the invoice mapped from the document's e-invoice XML, which validate compares the
  /// output with (schemas/cross_check.hpp); nullopt otherwise.
  std::optional<nlohmann::ordered_json> cross_check;
  std::string cross_check_method;    ///< with `cross_check`: "einvoice-ubl" / "einvoice-cii" / "einvoice-nav"
  /// kie, a document longer than the context: one request per window (`prompt` is then empty), whose
  /// outputs validate merges into one record; `document_text` still holds the whole document.
  std::vector<ChunkPart> chunks;
  std::size_t output_splits = 0;     ///< kie: ExtractedMsg::output_splits of the plan (with no `chunks`: too short to cut)
  /// Retries: the record of the attempt with the fewest errors so far (the earliest among equals);
  /// the last attempt's record replaces it only with fewer errors. nullopt before the first retry.
  std::optional<nlohmann::ordered_json> best_record;
};

/// engine -> validate: one finished model request.
struct GeneratedMsg {
  ModelTaskMsg task;
  std::string text;                ///< the model's output
  std::string finish;              ///< finish reason name (engine::finish_reason_name), or "error"
  nlohmann::ordered_json stats;    ///< record stats (EngineWorker::stats_json)
  std::string error;               ///< non-empty: the engine refused or failed the request
  bool bad_request = false;        ///< with `error`: the request itself was refused (its schema does not compile)
  nlohmann::ordered_json response; ///< batch task: the response body (chat.completion / text_completion), else null
  std::vector<ChunkOutput> chunk_outputs;  ///< a chunked task: one per ChunkPart, in order (`text` is then empty)
};

/// build -> validate: a structured e-invoice mapped without the model.
struct MappedMsg {
  Subject subject;
  std::string method;  ///< "einvoice-ubl" / "einvoice-cii" / "einvoice-nav"
  nlohmann::ordered_json data;
};

/// any stage -> write: one finished record (its line in results.jsonl).
struct RecordMsg {
  std::string key;
  nlohmann::ordered_json record;      ///< {"source", "sha256", "status", "method", "data", "errors", "stats", ...}
  std::optional<TokenCounts> tokens;  ///< set when a model attempt made it
};

/// any stage -> write: record keys accounted for without a record, or a retry.
struct NoticeMsg {
  enum class Kind { skipped, cancelled, retry, other_shard };
  Kind kind = Kind::skipped;
  std::size_t count = 1;              ///< record keys (skipped, cancelled)
  std::optional<TokenCounts> tokens;  ///< retry: the failed attempt's tokens
};

using Message = std::variant<InputMsg, ExtractedMsg, ModelTaskMsg, GeneratedMsg, MappedMsg, RecordMsg, NoticeMsg,
                             BatchRequestMsg>;

/// The wire form of a message. decode() throws std::runtime_error on bytes encode() did not make.
std::vector<std::uint8_t> encode(const Message& m);
Message decode(const void* data, std::size_t size);

/// Encodes and sends (blocking while the peer's high-water mark is reached).
void send(zmq::socket_t& s, const Message& m);
/// Receives and decodes one message; nullopt when nothing came (timeout, or dontwait with nothing queued).
std::optional<Message> recv(zmq::socket_t& s, zmq::recv_flags flags = zmq::recv_flags::none);

}  // namespace quarry::run
