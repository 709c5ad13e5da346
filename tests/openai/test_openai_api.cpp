// pipeline/openai: request bodies as the OpenAI API reference writes them, parsed into engine requests;
// the response bodies in the shapes the OpenAI SDKs read.
#include <gtest/gtest.h>

#include <filesystem>

#include "pipeline/openai/openai_api.hpp"

namespace quarry::openai {
namespace {

using json = nlohmann::json;
const std::filesystem::path kModel = std::filesystem::path(QUARRY_SOURCE_DIR) / "models" / "quarry-extract-11m";

json chat_body() {
  return json::parse(R"({
    "model": "quarry-extract-11m",
    "messages": [{"role": "developer", "content": "Extract the invoice fields."},
                 {"role": "user", "content": [{"type": "text", "text": "Invoice no. "}, {"type": "text", "text": "A-17"}]}],
    "max_completion_tokens": 64, "temperature": 0, "seed": 7, "stop": ["\n\n"],
    "response_format": {"type": "json_schema", "json_schema": {"name": "invoice", "strict": true,
      "schema": {"type": "object", "properties": {"invoice_number": {"type": "string"}},
                 "required": ["invoice_number"], "additionalProperties": false}}}})");
}

TEST(OpenAiRequest, AChatBodyWithAJsonSchema) {
  const Request r = parse_request(chat_body(), Endpoint::chat_completions);
  EXPECT_EQ(r.model, "quarry-extract-11m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is the system role of newer models
  EXPECT_EQ(r.messages[1].content, "Invoice no. A-17");
  EXPECT_EQ(r.max_tokens, std::optional<std::size_t>(64));
  EXPECT_EQ(r.temperature, 0.f);
  EXPECT_EQ(r.seed, std::optional<std::uint64_t>(7));
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(r.format, ResponseFormat::json_schema);
  EXPECT_EQ(r.schema_name, "invoice");
  EXPECT_TRUE(r.strict);
  EXPECT_EQ(json::parse(r.schema_text)["required"][0], "invoice_number");

  const auto tok = engine::Tokenizer::from_dir(kModel);
  const auto g = to_generation_request(r, *tok, 4096);
  EXPECT_EQ(tok->decode(g.prompt), tok->apply_chat_template(r.messages, true, false));
  EXPECT_EQ(g.max_tokens, 64u);
  EXPECT_EQ(g.json_schema, r.schema_text);
  EXPECT_EQ(g.sampling.temperature, 0.f);
  EXPECT_EQ(g.stop, r.stop);
}

TEST(OpenAiRequest, DefaultsJsonObjectAndCompletions) {
  json b = {{"model", "m"}, {"prompt", "Once upon"}, {"response_format", {{"type", "json_object"}}}};
  const Request r = parse_request(b, Endpoint::completions);
  EXPECT_EQ(r.temperature, 1.f);  // the API's default
  EXPECT_FALSE(r.max_tokens);
  EXPECT_EQ(r.format, ResponseFormat::json_object);
  EXPECT_EQ(r.schema_text, R"({"type":"object"})");
  const auto tok = engine::Tokenizer::from_dir(kModel);
  const auto g = to_generation_request(r, *tok, 100, 16);
  EXPECT_EQ(tok->decode(g.prompt), "Once upon");
  EXPECT_EQ(g.max_tokens, 16u);  // what the context leaves, capped
}

/// The ApiError parse_request throws for `body`, or a failure.
ApiError refusal(const json& body, Endpoint e = Endpoint::chat_completions) {
  try {
    parse_request(body, e);
  } catch (const ApiError& err) {
    return err;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return ApiError(0, "", "");
}

TEST(OpenAiRequest, RefusalsNameTheMember) {
  json b = chat_body();
  b["n"] = 2;
  EXPECT_EQ(refusal(b).param, "n");
  b = chat_body();
  b["tools"] = json::array();
  EXPECT_EQ(refusal(b).param, "tools");
  b = chat_body();
  b["temperature"] = 3;
  EXPECT_EQ(refusal(b).param, "temperature");
  b = chat_body();
  b.erase("messages");
  EXPECT_EQ(refusal(b).param, "messages");
  b = chat_body();
  b["messages"][1]["content"] = json::array({{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}});
  EXPECT_EQ(refusal(b).param, "messages[1].content");
  b = chat_body();
  b["response_format"]["json_schema"].erase("name");
  EXPECT_EQ(refusal(b).param, "response_format.json_schema.name");
  b = chat_body();
  b["stream_options"] = {{"include_usage", true}};  // without stream
  EXPECT_EQ(refusal(b).param, "stream_options");
  const ApiError e = refusal(json::array());
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(error_body(e)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(refusal({{"model", "m"}, {"prompt", json::array({1, 2})}}, Endpoint::completions).param, "prompt");
}

TEST(OpenAiRequest, APromptLongerThanTheContextIsRefused) {
  json b = chat_body();
  b["max_completion_tokens"] = 100000;
  const Request r = parse_request(b, Endpoint::chat_completions);
  const auto tok = engine::Tokenizer::from_dir(kModel);
  try {
    to_generation_request(r, *tok, 4096);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "max_tokens");
    EXPECT_NE(std::string(e.what()).find("4096"), std::string::npos) << e.what();
  }
}

TEST(OpenAiResponse, ChatCompletionChunksAndUsage) {
  const Request r = parse_request(chat_body(), Endpoint::chat_completions);
  engine::GenerationResult g;
  g.text = R"({"invoice_number":"A-17"})";
  g.tokens = {1, 2, 3, 4};
  g.finish = engine::FinishReason::eos;
  g.stats.prompt_tokens = 30;
  g.stats.cached_tokens = 16;
  const auto body = response_body(r, "chatcmpl-x", 1700000000, g);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], g.text);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["total_tokens"], 34);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 16);
  const auto first = chunk_body(r, "chatcmpl-x", 1, "{", true, nullptr);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const auto last = chunk_body(r, "chatcmpl-x", 1, "", false, "length");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(usage_chunk_body(r, "chatcmpl-x", 1, g)["choices"].empty());
  EXPECT_EQ(make_id("chatcmpl-").size(), 9u + 24u);
  EXPECT_NE(make_id("a"), make_id("a"));
}

}  // namespace
}  // namespace quarry::openai
