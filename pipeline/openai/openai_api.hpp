// The OpenAI API as quarry speaks it, in one place for every front end (`quarry run` over OpenAI Batch
// files, `quarry serve`): request bodies of POST /v1/chat/completions and /v1/completions parsed and
// checked, turned into engine requests, and the response bodies (chat.completion, text_completion,
// their streaming chunks, error objects) built from engine results.
//
// What is taken from a body (the OpenAI API reference; vLLM's extensions where noted):
//   model (required, a name only), messages (chat: role system / developer / user / assistant / tool,
//   content a string or a list of {"type": "text", "text"} parts) or prompt (completions: a string),
//   max_tokens / max_completion_tokens, temperature (default 1), top_p, top_k and min_p (vLLM), seed,
//   stop (a string or up to 4 strings), n (1 only), stream, stream_options.include_usage,
//   response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema",
//   "strict"}}, chat_template_kwargs.enable_thinking (vLLM); user, frequency_penalty / presence_penalty
//   (0 only), logprobs (false only) are accepted; any other member is refused with its name, so that a
//   client never silently gets something other than what it asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::openai {

/// An error as the OpenAI API reports it: an HTTP status and {"error": {"message", "type", "param",
/// "code"}}. type: "invalid_request_error" (400, 404, 413), "authentication_error" (401),
/// "rate_limit_error" (429), "server_error" (500, 503).
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
};

/// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
nlohmann::ordered_json error_body(const ApiError& e);

enum class Endpoint { chat_completions, completions };
/// "/v1/chat/completions" or "/v1/completions"; nullopt for any other URL.
std::optional<Endpoint> endpoint_of_url(const std::string& url);
const char* endpoint_url(Endpoint e);

/// What a response must be: free text, any JSON object, or JSON valid for a schema.
enum class ResponseFormat { text, json_object, json_schema };

/// A parsed request body.
struct Request {
  Endpoint endpoint = Endpoint::chat_completions;
  std::string model;
  std::vector<engine::ChatMessage> messages;  ///< chat
  std::string prompt;                         ///< completions
  std::optional<std::size_t> max_tokens;      ///< max_tokens or max_completion_tokens
  float temperature = 1.f;
  float top_p = 1.f;
  std::size_t top_k = 0;
  float min_p = 0.f;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage
  bool enable_thinking = false;
  ResponseFormat format = ResponseFormat::text;
  std::string schema_name;  ///< json_schema.name
  std::string schema_text;  ///< json_schema.schema as compact JSON ("{\"type\":\"object\"}" for json_object)
  bool strict = false;      ///< json_schema.strict
};

/// Parses and checks a body for `endpoint`. Throws ApiError (400, invalid_request_error, `param` naming
/// the member) on a body that is not an object, a missing or mistyped member, a value out of range, n
/// other than 1, or a member quarry does not support.
Request parse_request(const nlohmann::json& body, Endpoint endpoint);

/// The engine request of `r`: the chat template applied (chat) or the prompt as is (completions),
/// tokenized; max_tokens = r.max_tokens or what the context leaves (`context_tokens` minus the prompt),
/// capped by `max_tokens_cap` (0: no cap); sampling, stop strings; json_object / json_schema constrain the
/// output to the schema's grammar (strict or not: the grammar always enforces it). Throws ApiError (400,
/// param "messages" / "prompt" / "max_tokens") on an empty prompt or one that leaves no room to generate.
engine::GenerationRequest to_generation_request(const Request& r, const engine::Tokenizer& tokenizer,
                                                std::size_t context_tokens, std::size_t max_tokens_cap = 0);

/// "stop" (EOS, a stop string, the grammar's end) or "length".
const char* finish_reason(engine::FinishReason f);

/// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}.
nlohmann::ordered_json usage_body(const engine::RequestStats& s, std::size_t completion_tokens);

/// The whole response body: a chat.completion (choices[0].message {role assistant, content}) or a
/// text_completion (choices[0].text), with usage. `id`: "chatcmpl-..." / "cmpl-..."; `created`: Unix
/// seconds; `model`: the name the request gave.
nlohmann::ordered_json response_body(const Request& r, const std::string& id, std::int64_t created,
                                     const engine::GenerationResult& result);

/// One streaming chunk (chat.completion.chunk / text_completion): `delta_text` as choices[0].delta.content
/// (the first chat chunk also carries role "assistant"), `finish` set on the last content chunk.
nlohmann::ordered_json chunk_body(const Request& r, const std::string& id, std::int64_t created,
                                  const std::string& delta_text, bool first, const char* finish);
/// The final usage chunk of a stream with include_usage: choices [] and usage.
nlohmann::ordered_json usage_chunk_body(const Request& r, const std::string& id, std::int64_t created,
                                        const engine::GenerationResult& result);

/// A fresh response id: `prefix` + 24 random alphanumerics.
std::string make_id(const char* prefix);

}  // namespace quarry::openai
