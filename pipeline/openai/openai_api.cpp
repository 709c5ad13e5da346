#include "pipeline/openai/openai_api.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace quarry::openai {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", message, param);
}

std::string type_name(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

double number(const json& body, const char* key, double lo, double hi) {
  const json& v = body.at(key);
  if (!v.is_number()) bad(key, std::string("'") + key + "' must be a number, not " + type_name(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return d;
}

std::uint64_t whole(const json& body, const char* key, std::uint64_t lo, std::uint64_t hi) {
  const json& v = body.at(key);
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0))
    bad(key, std::string("'") + key + "' must be a non-negative integer");
  const auto n = v.get<std::uint64_t>();
  if (n < lo || n > hi)
    bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return n;
}

/// A message's content: a string, or a list of {"type": "text", "text"} parts joined.
std::string content_text(const json& content, std::size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) bad(where, "'" + where + "' must be a string or an array of text parts");
  std::string out;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      bad(where, "'" + where + "': only parts {\"type\": \"text\", \"text\": ...} are supported (no images or audio)");
    out += part["text"].get<std::string>();
  }
  return out;
}

std::string compact_schema(const json& schema) {
  if (!schema.is_object() && !schema.is_boolean())
    bad("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
  return schema.dump();
}

}  // namespace

ojson error_body(const ApiError& e) {
  ojson err;
  err["message"] = e.what();
  err["type"] = e.type;
  err["param"] = e.param.empty() ? ojson() : ojson(e.param);
  err["code"] = e.code.empty() ? ojson() : ojson(e.code);
  return ojson{{"error", err}};
}

std::optional<Endpoint> endpoint_of_url(const std::string& url) {
  if (url == "/v1/chat/completions") return Endpoint::chat_completions;
  if (url == "/v1/completions") return Endpoint::completions;
  return std::nullopt;
}

const char* endpoint_url(Endpoint e) {
  return e == Endpoint::chat_completions ? "/v1/chat/completions" : "/v1/completions";
}

Request parse_request(const json& body, Endpoint endpoint) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  static const std::set<std::string> common = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n", "stream",
      "stream_options", "user", "frequency_penalty", "presence_penalty", "logprobs", "response_format"};
  static const std::set<std::string> chat_only = {"messages", "max_completion_tokens", "chat_template_kwargs"};
  static const std::set<std::string> completion_only = {"prompt", "echo", "suffix"};
  const bool chat = endpoint == Endpoint::chat_completions;
  for (const auto& [key, value] : body.items()) {
    (void)value;
    if (common.count(key) || (chat ? chat_only.count(key) : completion_only.count(key))) continue;
    bad(key, "'" + key + "' is not supported by quarry on " + endpoint_url(endpoint));
  }
  Request r;
  r.endpoint = endpoint;
  if (!body.contains("model") || !body["model"].is_string() || body["model"].get<std::string>().empty())
    bad("model", "'model' is required (a string)");
  r.model = body["model"].get<std::string>();

  if (chat) {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
      bad("messages", "'messages' must be a non-empty array");
    std::size_t i = 0;
    for (const auto& m : body["messages"]) {
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        bad(where, "'" + where + "' must be an object with a 'role'");
      std::string role = m["role"].get<std::string>();
      if (role == "developer") role = "system";
      if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        bad(where + ".role", "'" + where + ".role' must be system, developer, user, assistant or tool");
      r.messages.push_back({role, content_text(m.contains("content") ? m["content"] : json(), i)});
      ++i;
    }
    if (body.contains("chat_template_kwargs")) {
      const json& k = body["chat_template_kwargs"];
      if (!k.is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      if (k.contains("enable_thinking")) {
        if (!k["enable_thinking"].is_boolean())
          bad("chat_template_kwargs.enable_thinking", "'chat_template_kwargs.enable_thinking' must be a boolean");
        r.enable_thinking = k["enable_thinking"].get<bool>();
      }
    }
  } else {
    if (!body.contains("prompt") || !body["prompt"].is_string())
      bad("prompt", "'prompt' must be a string (token arrays and lists of prompts are not supported)");
    r.prompt = body["prompt"].get<std::string>();
    if (body.contains("echo") && !(body["echo"].is_boolean() && !body["echo"].get<bool>()))
      bad("echo", "'echo' is not supported");
    if (body.contains("suffix") && !body["suffix"].is_null()) bad("suffix", "'suffix' is not supported");
  }

  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (body.contains(key) && !body[key].is_null()) r.max_tokens = whole(body, key, 1, 1u << 20);
  if (body.contains("temperature") && !body["temperature"].is_null())
    r.temperature = static_cast<float>(number(body, "temperature", 0, 2));
  if (body.contains("top_p") && !body["top_p"].is_null()) r.top_p = static_cast<float>(number(body, "top_p", 0, 1));
  if (r.top_p <= 0.f) bad("top_p", "'top_p' must be greater than 0");
  if (body.contains("top_k") && !body["top_k"].is_null()) {
    // vLLM: -1 or 0 turn it off.
    if (body["top_k"].is_number_integer() && body["top_k"].get<std::int64_t>() == -1) r.top_k = 0;
    else r.top_k = whole(body, "top_k", 0, 1u << 20);
  }
  if (body.contains("min_p") && !body["min_p"].is_null()) r.min_p = static_cast<float>(number(body, "min_p", 0, 1));
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) bad("seed", "'seed' must be an integer");
    r.seed = static_cast<std::uint64_t>(body["seed"].get<std::int64_t>());
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const auto& x : s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or an array of up to 4 strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or an array of up to 4 strings");
    }
    for (const auto& x : r.stop)
      if (x.empty()) bad("stop", "'stop' strings must not be empty");
  }
  if (body.contains("n") && !body["n"].is_null() && whole(body, "n", 1, 128) != 1)
    bad("n", "'n' must be 1 (one choice per request)");
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) bad("stream", "'stream' must be a boolean");
    r.stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& o = body["stream_options"];
    if (!o.is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (o.contains("include_usage")) {
      if (!o["include_usage"].is_boolean())
        bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
      r.include_usage = o["include_usage"].get<bool>();
    }
  }
  for (const char* key : {"frequency_penalty", "presence_penalty"})
    if (body.contains(key) && !body[key].is_null() && number(body, key, -2, 2) != 0.0)
      bad(key, std::string("'") + key + "' is not supported (only 0)");
  if (body.contains("logprobs") && !body["logprobs"].is_null() &&
      !(body["logprobs"].is_boolean() && !body["logprobs"].get<bool>()))
    bad("logprobs", "'logprobs' is not supported");
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string())
    bad("user", "'user' must be a string");

  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& f = body["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      bad("response_format", "'response_format' must be an object with a 'type'");
    const std::string type = f["type"].get<std::string>();
    if (type == "text") {
      r.format = ResponseFormat::text;
    } else if (type == "json_object") {
      r.format = ResponseFormat::json_object;
      r.schema_text = R"({"type":"object"})";
    } else if (type == "json_schema") {
      r.format = ResponseFormat::json_schema;
      if (!f.contains("json_schema") || !f["json_schema"].is_object())
        bad("response_format.json_schema", "'response_format.json_schema' must be an object");
      const json& js = f["json_schema"];
      if (!js.contains("name") || !js["name"].is_string() || js["name"].get<std::string>().empty())
        bad("response_format.json_schema.name", "'response_format.json_schema.name' is required (a string)");
      r.schema_name = js["name"].get<std::string>();
      if (!js.contains("schema")) bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
      r.schema_text = compact_schema(js["schema"]);
      if (js.contains("strict") && !js["strict"].is_null()) {
        if (!js["strict"].is_boolean())
          bad("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
        r.strict = js["strict"].get<bool>();
      }
    } else {
      bad("response_format.type", "'response_format.type' must be text, json_object or json_schema");
    }
  }
  return r;
}

engine::GenerationRequest to_generation_request(const Request& r, const engine::Tokenizer& tokenizer,
                                                std::size_t context_tokens, std::size_t max_tokens_cap) {
  engine::GenerationRequest g;
  const std::string text = r.endpoint == Endpoint::chat_completions
                               ? tokenizer.apply_chat_template(r.messages, true, r.enable_thinking)
                               : r.prompt;
  g.prompt = tokenizer.encode(text);
  const char* prompt_param = r.endpoint == Endpoint::chat_completions ? "messages" : "prompt";
  if (g.prompt.empty()) bad(prompt_param, std::string("'") + prompt_param + "' encodes to no tokens");
  if (context_tokens > 0 && g.prompt.size() >= context_tokens)
    bad(prompt_param, "the prompt has " + std::to_string(g.prompt.size()) + " tokens; the model's context is " +
                          std::to_string(context_tokens) + " tokens");
  const std::size_t room = context_tokens > 0 ? context_tokens - g.prompt.size() : (std::size_t{1} << 20);
  std::size_t max_tokens = r.max_tokens.value_or(room);
  if (r.max_tokens && *r.max_tokens > room)
    bad("max_tokens", "max_tokens " + std::to_string(*r.max_tokens) + " and the prompt's " +
                          std::to_string(g.prompt.size()) + " tokens exceed the model's context of " +
                          std::to_string(context_tokens) + " tokens");
  if (max_tokens_cap > 0) max_tokens = std::min(max_tokens, max_tokens_cap);
  g.max_tokens = max_tokens;
  g.sampling.temperature = r.temperature;
  g.sampling.top_p = r.top_p;
  g.sampling.top_k = r.top_k;
  g.sampling.min_p = r.min_p;
  g.sampling.seed = r.seed;
  g.stop = r.stop;
  if (r.format != ResponseFormat::text) g.json_schema = r.schema_text;
  return g;
}

const char* finish_reason(engine::FinishReason f) {
  return f == engine::FinishReason::length ? "length" : "stop";
}

ojson usage_body(const engine::RequestStats& s, std::size_t completion_tokens) {
  return ojson{{"prompt_tokens", s.prompt_tokens},
               {"completion_tokens", completion_tokens},
               {"total_tokens", s.prompt_tokens + completion_tokens},
               {"prompt_tokens_details", {{"cached_tokens", s.cached_tokens}}}};
}

ojson response_body(const Request& r, const std::string& id, std::int64_t created,
                     const engine::GenerationResult& result) {
  const bool chat = r.endpoint == Endpoint::chat_completions;
  ojson choice;
  choice["index"] = 0;
  if (chat) choice["message"] = ojson{{"role", "assistant"}, {"content", result.text}};
  else choice["text"] = result.text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason(result.finish);
  ojson out;
  out["id"] = id;
  out["object"] = chat ? "chat.completion" : "text_completion";
  out["created"] = created;
  out["model"] = r.model;
  out["choices"] = ojson::array({choice});
  out["usage"] = usage_body(result.stats, result.tokens.size());
  return out;
}

namespace {
/// id, object, created, model of a streaming chunk.
ojson chunk_envelope(const Request& r, const std::string& id, std::int64_t created) {
  ojson out;
  out["id"] = id;
  out["object"] = r.endpoint == Endpoint::chat_completions ? "chat.completion.chunk" : "text_completion";
  out["created"] = created;
  out["model"] = r.model;
  return out;
}
}  // namespace

ojson chunk_body(const Request& r, const std::string& id, std::int64_t created, const std::string& delta_text,
                 bool first, const char* finish) {
  const bool chat = r.endpoint == Endpoint::chat_completions;
  ojson choice;
  choice["index"] = 0;
  if (chat) {
    ojson delta = ojson::object();
    if (first) delta["role"] = "assistant";
    if (!delta_text.empty() || !finish) delta["content"] = delta_text;
    choice["delta"] = delta;
  } else {
    choice["text"] = delta_text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish ? ojson(finish) : ojson();
  ojson out = chunk_envelope(r, id, created);
  out["choices"] = ojson::array({choice});
  return out;
}

ojson usage_chunk_body(const Request& r, const std::string& id, std::int64_t created,
                       const engine::GenerationResult& result) {
  ojson out = chunk_envelope(r, id, created);
  out["choices"] = ojson::array();
  out["usage"] = usage_body(result.stats, result.tokens.size());
  return out;
}

std::string make_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += chars[rng() % (sizeof chars - 1)];
  return id;
}

}  // namespace quarry::openai
