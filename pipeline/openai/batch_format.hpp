// The OpenAI Batch file format: one request per line,
// {"custom_id", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions", "body": {...}},
// and one output line per request, {"id", "custom_id", "response": {"status_code", "request_id",
// "body"}, "error"}: `response` for a request the API answered (200 with the completion, or 4xx/5xx
// with an error body), `error` {"code", "message"} for a line that is not a request at all.
//
// The bodies themselves are parsed and answered by openai_api.hpp (shared with `quarry serve`); this
// file only knows the envelope of a line.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "pipeline/openai/openai_api.hpp"

namespace quarry::openai {

/// One line of a batch input file, checked.
struct BatchLine {
  std::size_t number = 0;                ///< 1-based line number in the file
  std::optional<std::string> custom_id;  ///< set when the line is an object with a string custom_id
  std::string url;                       ///< "/v1/chat/completions" or "/v1/completions" when `problem` is empty
  nlohmann::json body;                   ///< the request body (an object) when `problem` is empty
  std::string problem;                   ///< non-empty: why the line is not a request ("line N: ...")
};

/// Parses and checks one line (without its newline): a JSON object with a non-empty string custom_id,
/// method "POST" (or absent), a url quarry serves (endpoint_of_url) and an object body. The body's
/// members are not checked here (parse_request does that). Never throws; `problem` names the line.
BatchLine parse_batch_line(std::string_view text, std::size_t number);

/// Whether `path` looks like a batch input file: its name ends in ".jsonl" and its first non-blank
/// line (read up to 1 MiB) is a JSON object with "custom_id" and "body". False when it cannot be read.
bool looks_like_batch_file(const std::filesystem::path& path);

/// An output line for a request the API answered: {"id", "custom_id", "response": {"status_code",
/// "request_id", "body"}, "error": null}. `id`: "batch_req_..." (make_id), `request_id` "req_...".
nlohmann::ordered_json batch_response_line(const std::string& custom_id, int status_code,
                                           const nlohmann::ordered_json& body);

/// An output line for a line that is not a request: {"id", "custom_id" (null when the line has none),
/// "response": null, "error": {"code", "message"}}.
nlohmann::ordered_json batch_error_line(const std::optional<std::string>& custom_id, const std::string& code,
                                        const std::string& message);

}  // namespace quarry::openai
