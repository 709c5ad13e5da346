// `quarry serve` over real HTTP on 127.0.0.1: the endpoints' bodies against the engine run directly,
// the server-sent-events wire format as curl receives it, the limits and their OpenAI error objects,
// client disconnects, /metrics as Prometheus text, and SIGTERM on the quarry program.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "pipeline/openai/openai_api.hpp"
#include "pipeline/serve/sse.hpp"
#include "schemas/validate.hpp"
#include "serve_fixture.hpp"
#include "tests/common/run_command.hpp"

namespace quarry::serve {
namespace {

using json = nlohmann::json;
using testing::kModelDir;
using testing::kModelName;
using testing::TestServer;
using Clock = std::chrono::steady_clock;

/// One server for the tests that need no particular options.
TestServer& shared_server() {
  static TestServer s;
  return s;
}

json chat(const std::string& content, std::size_t max_tokens = 24) {
  return {{"model", kModelName},
          {"messages", json::array({{{"role", "system"}, {"content", "Extract the invoice fields as JSON."}},
                                    {{"role", "user"}, {"content", content}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

// Every value bounded (maxLength, enum): a number could run on for as long as the small model likes.
const json kInvoiceSchema = json::parse(R"({
  "type": "object",
  "properties": {"invoice_number": {"type": "string", "maxLength": 20},
                 "total": {"type": "string", "maxLength": 16},
                 "currency": {"type": "string", "enum": ["EUR", "HUF", "USD"]}},
  "required": ["invoice_number", "total", "currency"],
  "additionalProperties": false})");

json with_schema(json body) {
  body["max_tokens"] = 200;
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "invoice"}, {"strict", true}, {"schema", kInvoiceSchema}}}};
  return body;
}

/// The greedy text the engine itself generates for `body` (the reference for the server's answers).
std::string engine_text(const json& body, openai::Endpoint endpoint) {
  static auto tok = engine::Tokenizer::from_dir(kModelDir);
  static auto eng = [] {
    engine::EngineOptions eo;
    eo.n_threads = 2;
    eo.device = engine::parse_device("cpu");
    return engine::Engine::open(kModelDir, tok, eo);
  }();
  const auto r = openai::parse_request(body, endpoint);
  return eng->generate(openai::to_generation_request(r, *tok, eng->model().config().max_position_embeddings)).text;
}

httplib::Result post(httplib::Client& c, const std::string& path, const json& body, httplib::Headers headers = {}) {
  return c.Post(path.c_str(), headers, body.dump(), "application/json");
}

/// Checks an OpenAI error response: the status and {"error": {"message", "type", "param", "code"}}.
void expect_error(const httplib::Result& r, int status, const std::string& type, const std::string& code = "") {
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, status) << r->body;
  const json j = json::parse(r->body);
  ASSERT_TRUE(j.contains("error")) << r->body;
  EXPECT_TRUE(j["error"]["message"].is_string() && !j["error"]["message"].get<std::string>().empty());
  EXPECT_EQ(j["error"]["type"], type) << r->body;
  EXPECT_TRUE(j["error"].contains("param"));
  if (!code.empty()) {
    EXPECT_EQ(j["error"]["code"], code) << r->body;
  }
}

/// The data payloads of an SSE body, checked against the wire format: every event is exactly
/// "data: <payload>\n\n" (comment lines ":..." allowed), and nothing is left over.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event at byte " << pos << ": " << body.substr(pos, 80);
      break;
    }
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (!event.empty() && event[0] == ':') continue;
    if (event.rfind("data: ", 0) != 0 || event.find('\n') != std::string::npos) {
      ADD_FAILURE() << "not a single data line: " << event.substr(0, 80);
      continue;
    }
    out.push_back(event.substr(6));
  }
  return out;
}

/// curl -N: the raw bytes of a streaming answer, as a client receives them.
std::string curl_stream(const TestServer& s, const std::string& path, const json& body) {
  const auto file = std::filesystem::path(QUARRY_BINARY_DIR) / "test_tmp" / ("serve_body_" + std::to_string(getpid()));
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file) << body.dump();
  const auto r = test_support::run_command("curl -sS -N --max-time 120 -H 'Content-Type: application/json' --data-binary @" +
                                           file.string() + " " + s.url() + path);
  std::filesystem::remove(file);
  EXPECT_EQ(r.code, 0) << r.out;
  return r.out;
}

/// A strict reader of the Prometheus text format (0.0.4): every line is a # HELP / # TYPE comment or
/// a sample `name{label="value",...} number`; a metric's TYPE comes before its samples; histogram
/// buckets are cumulative and end with le="+Inf" equal to _count. Returns name{labels} -> value.
std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? ([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))$)");
  const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$)");
  std::istringstream in(text);
  std::string line;
  std::map<std::string, std::vector<double>> buckets;  // histogram name{other labels} -> cumulative counts
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, type)) {
      EXPECT_FALSE(types.count(m[1])) << "TYPE twice: " << line;
      types[m[1]] = m[2];
      continue;
    }
    if (std::regex_match(line, help)) continue;
    if (!std::regex_match(line, m, sample)) {
      ADD_FAILURE() << "not Prometheus text: '" << line << "'";
      continue;
    }
    std::string name = m[1];
    std::string base = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!types.count(base) && base.size() > std::strlen(suffix) &&
          base.compare(base.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
        base = base.substr(0, base.size() - std::strlen(suffix));
    EXPECT_TRUE(types.count(base)) << "sample before its TYPE: " << line;
    const std::string labels = m[3];
    const double v = std::stod(m[4].str() == "+Inf" ? "inf" : m[4].str() == "Inf" ? "inf" : m[4].str());
    EXPECT_TRUE(samples.emplace(name + "{" + labels + "}", v).second) << "duplicate sample: " << line;
    if (name == base + "_bucket") buckets[base + "{" + std::regex_replace(labels, std::regex(R"(,?le="[^"]*")"), "") + "}"].push_back(v);
  }
  for (const auto& [h, counts] : buckets)
    for (std::size_t i = 1; i < counts.size(); ++i) EXPECT_LE(counts[i - 1], counts[i]) << h << " buckets not cumulative";
  return samples;
}

double metric(const std::map<std::string, double>& m, const std::string& key) {
  const auto it = m.find(key);
  EXPECT_NE(it, m.end()) << "no sample " << key;
  return it == m.end() ? -1 : it->second;
}

const std::string kLabel = "model_name=\"" + kModelName + "\"";

// ---------------------------------------------------------------- endpoints

TEST(Serve, ModelsAndHealth) {
  auto c = shared_server().client();
  auto r = c->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], kModelName);
  EXPECT_EQ(j["data"][0]["object"], "model");
  r = c->Get(("/v1/models/" + kModelName).c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["id"], kModelName);
  expect_error(c->Get("/v1/models/gpt-4o"), 404, "invalid_request_error", "model_not_found");
  r = c->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c->Get("/v1/nothing");
  expect_error(r, 404, "invalid_request_error");
}

TEST(Serve, ChatCompletionIsTheEnginesGreedyOutput) {
  auto c = shared_server().client();
  const json body = chat("Invoice no. A-17, total 120.50 EUR");
  const auto r = post(*c, "/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], kModelName);
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_EQ(text, engine_text(body, openai::Endpoint::chat_completions));
  const auto& u = j["usage"];
  EXPECT_GT(u["prompt_tokens"].get<int>(), 5);
  EXPECT_GT(u["completion_tokens"].get<int>(), 0);
  EXPECT_LE(u["completion_tokens"].get<int>(), 24);
  EXPECT_EQ(u["total_tokens"], u["prompt_tokens"].get<int>() + u["completion_tokens"].get<int>());
  const std::string finish = j["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "stop" || finish == "length") << finish;
}

TEST(Serve, CompletionsEndpoint) {
  auto c = shared_server().client();
  const json body = {{"model", kModelName}, {"prompt", "Invoice number: "}, {"max_tokens", 12}, {"temperature", 0}};
  const auto r = post(*c, "/v1/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], engine_text(body, openai::Endpoint::completions));
}

TEST(Serve, JsonSchemaOutputValidates) {
  auto c = shared_server().client();
  const auto r = post(*c, "/v1/chat/completions", with_schema(chat("Invoice HU-2024/17, total 99000 HUF")));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_EQ(j["choices"][0]["finish_reason"], "stop") << r->body;
  const json out = json::parse(j["choices"][0]["message"]["content"].get<std::string>());
  schemas::Validator v(kInvoiceSchema, "invoice");
  EXPECT_TRUE(v.validate(out).empty()) << out.dump();
  // json_object: any JSON object.
  json body = chat("Invoice 5");
  body["max_tokens"] = 200;
  body["response_format"] = {{"type", "json_object"}};
  const auto r2 = post(*c, "/v1/chat/completions", body);
  ASSERT_TRUE(r2);
  ASSERT_EQ(r2->status, 200) << r2->body;
  const json j2 = json::parse(r2->body);
  if (j2["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(j2["choices"][0]["message"]["content"].get<std::string>()).is_object());
  }
}

// ---------------------------------------------------------------- streaming

TEST(Serve, StreamingWireFormatWithCurl) {
  const json body0 = with_schema(chat("Invoice DE-8812, total 1234.5 EUR"));
  json body = body0;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const std::string raw = curl_stream(shared_server(), "/v1/chat/completions", body);
  const auto payloads = sse_payloads(raw);
  ASSERT_GE(payloads.size(), 4u) << raw;
  EXPECT_EQ(payloads.back(), "[DONE]");
  EXPECT_EQ(raw.substr(raw.size() - std::string(kSseDone).size()), kSseDone);
  std::string text, id;
  std::size_t finish_chunks = 0;
  json usage;
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json c = json::parse(payloads[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["model"], kModelName);
    if (id.empty()) id = c["id"];
    EXPECT_EQ(c["id"], id) << "one id per stream";
    if (i == 0) {
      EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
    }
    if (c.contains("usage")) {
      EXPECT_TRUE(c["choices"].empty());
      EXPECT_EQ(i + 2, payloads.size()) << "the usage chunk comes last, before [DONE]";
      usage = c["usage"];
      continue;
    }
    const auto& ch = c["choices"][0];
    if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) {
      ++finish_chunks;
      EXPECT_EQ(ch["finish_reason"], "stop");
    }
  }
  EXPECT_EQ(finish_chunks, 1u);
  // The deltas add up to the non-streamed answer, which is the engine's.
  EXPECT_EQ(text, engine_text(body0, openai::Endpoint::chat_completions));
  schemas::Validator v(kInvoiceSchema, "invoice");
  EXPECT_TRUE(v.validate(json::parse(text)).empty()) << text;
  ASSERT_TRUE(usage.is_object()) << raw;
  EXPECT_GT(usage["completion_tokens"].get<int>(), 3);
  EXPECT_EQ(usage["total_tokens"], usage["prompt_tokens"].get<int>() + usage["completion_tokens"].get<int>());
}

TEST(Serve, StreamingCompletionsWithStopString) {
  json body = {{"model", kModelName}, {"prompt", "Invoice number: INV-"}, {"max_tokens", 40}, {"temperature", 0}};
  const std::string full = engine_text(body, openai::Endpoint::completions);
  ASSERT_GE(full.size(), 6u) << "the model wrote too little to cut";
  // A stop string from the middle of what the model writes: the stream must end before it and
  // never send its first bytes.
  std::size_t at = full.size() / 2;
  auto printable = [&](std::size_t i) {
    for (std::size_t k = i; k < i + 3; ++k)
      if (static_cast<unsigned char>(full[k]) < 0x21 || static_cast<unsigned char>(full[k]) > 0x7E) return false;
    return true;
  };
  while (at + 3 <= full.size() && !printable(at)) ++at;
  if (at + 3 > full.size()) GTEST_SKIP() << "no 3 printable ASCII bytes to stop at in: " << full;
  const std::string stop = full.substr(at, 3);
  body["stop"] = stop;
  const std::string cut = engine_text(body, openai::Endpoint::completions);
  body["stream"] = true;
  const auto payloads = sse_payloads(curl_stream(shared_server(), "/v1/completions", body));
  ASSERT_FALSE(payloads.empty());
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::string text;
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json c = json::parse(payloads[i]);
    EXPECT_EQ(c["object"], "text_completion");
    text += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, cut);
  EXPECT_EQ(text.find(stop), std::string::npos);
}

TEST(Serve, TextDeltasHoldBackPartialUtf8AndStopPrefixes) {
  TextDeltas d({"END"});                      // holds back 2 bytes: they could start "END"
  EXPECT_EQ(d.next("ab"), "");
  EXPECT_EQ(d.next("abcd"), "ab");
  EXPECT_EQ(d.next("abcd\xC3"), "c");
  EXPECT_EQ(d.next("abcd\xC3\xA9xy"), "d\xC3\xA9");
  EXPECT_EQ(d.finish("abcd\xC3\xA9xy"), "xy");
  TextDeltas stop({"000"});                  // the token that completes a stop string is reported
  EXPECT_EQ(stop.next("x000"), "x");           // before the engine cuts it
  EXPECT_EQ(stop.next("x0000"), "");
  EXPECT_EQ(stop.finish("x"), "");
  TextDeltas plain({});
  EXPECT_EQ(plain.next("a\xE2\x82"), "a");  // the euro sign is not complete yet
  EXPECT_EQ(plain.next("a\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(plain.finish("a\xE2\x82\xAC"), "");
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98", 3), 0u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98\x80", 4), 4u);
  EXPECT_EQ(sse_event(nlohmann::ordered_json{{"a", "x\ny"}}), "data: {\"a\":\"x\\ny\"}\n\n");
}

// ---------------------------------------------------------------- errors and limits

TEST(Serve, BadRequestsGetOpenAiErrors) {
  auto c = shared_server().client();
  expect_error(c->Post("/v1/chat/completions", "{not json", "application/json"), 400, "invalid_request_error");
  json body = chat("x");
  body["model"] = "gpt-4o";
  expect_error(post(*c, "/v1/chat/completions", body), 404, "invalid_request_error", "model_not_found");
  body = chat("x");
  body["tools"] = json::array();
  const auto r = post(*c, "/v1/chat/completions", body);
  expect_error(r, 400, "invalid_request_error");
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "tools");
  body = chat("x");
  body["max_tokens"] = 100000;  // more than the context leaves
  expect_error(post(*c, "/v1/chat/completions", body), 400, "invalid_request_error");
  // A schema the grammar compiler refuses: 400 from the engine's submit, not a crash.
  body = chat("x");
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "bad"}, {"schema", {{"type", "object"}, {"$ref", "#/nope"}}}}}};
  expect_error(post(*c, "/v1/chat/completions", body), 400, "invalid_request_error");
  // A schema nested a million levels deep (a 6 MB body): refused before it is parsed, not a stack
  // overflow in the server.
  std::string deep = R"({"model": "quarry-extract-11m", "messages": [{"role": "user", "content": "x"}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": )";
  for (int i = 0; i < 1000000; ++i) deep += "{\"a\":";
  deep += "1";
  deep += std::string(1000000, '}');
  deep += "}}}";
  expect_error(c->Post("/v1/chat/completions", deep, "application/json"), 400, "invalid_request_error");
  // The server still answers.
  EXPECT_EQ(post(*c, "/v1/chat/completions", chat("y", 4))->status, 200);
}

TEST(Serve, ApiKeyBodySizeAndPromptLimits) {
  ServeOptions o;
  o.api_key = "sk-test-123";
  o.max_body_bytes = 4096;
  o.max_prompt_tokens = 64;
  TestServer s(o);
  auto c = s.client();
  expect_error(post(*c, "/v1/chat/completions", chat("x", 4)), 401, "authentication_error", "invalid_api_key");
  expect_error(post(*c, "/v1/chat/completions", chat("x", 4), {{"Authorization", "Bearer sk-wrong-12"}}), 401,
               "authentication_error");
  expect_error(c->Get("/v1/models"), 401, "authentication_error");
  const httplib::Headers auth = {{"Authorization", "Bearer sk-test-123"}};
  EXPECT_EQ(post(*c, "/v1/chat/completions", chat("x", 4), auth)->status, 200);
  EXPECT_EQ(c->Get("/health")->status, 200);  // /health and /metrics need no key
  expect_error(post(*c, "/v1/chat/completions", chat(std::string(8000, 'a'), 4), auth), 413, "invalid_request_error");
  expect_error(post(*c, "/v1/chat/completions", chat(std::string(1500, 'a') + " b c d e f", 4), auth), 400,
               "invalid_request_error", "context_length_exceeded");
  EXPECT_EQ(post(*c, "/v1/chat/completions", chat("still here", 4), auth)->status, 200);
}

/// A request that keeps the engine busy for a while: the grammar forces a long array.
json long_request() {
  json body = chat("List numbers.", 3000);
  body["response_format"] = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "many"}, {"schema", {{"type", "array"}, {"items", {{"type", "integer"}}}, {"minItems", 1200}}}}}};
  return body;
}

std::map<std::string, double> scrape(const TestServer& s) {
  auto r = s.client()->Get("/metrics");
  EXPECT_TRUE(r && r->status == 200);
  return r ? parse_prometheus(r->body) : std::map<std::string, double>{};
}

/// Waits until `pred(metrics)` or 60 s.
template <class Pred>
bool wait_metrics(const TestServer& s, Pred pred) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    if (pred(scrape(s))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(Serve, ConcurrencyQueueTimeAndDisconnects) {
  ServeOptions o;
  o.max_concurrent = 2;
  o.queue_timeout_s = 0.5;
  TestServer s(o, /*max_num_seqs=*/1);
  const std::string running = "quarry:num_requests_running{" + kLabel + "}";
  // 1. Disconnect of a streaming client cancels its request.
  std::atomic<bool> got_chunk{false};
  std::thread hang_up([&] {
    json body = long_request();
    body["stream"] = true;
    auto c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, std::size_t, std::uint64_t, std::uint64_t) {
      got_chunk = true;
      return false;  // hang up
    };
    c->send(req);
  });
  hang_up.join();
  EXPECT_TRUE(got_chunk);
  EXPECT_TRUE(wait_metrics(s, [&](const auto& m) {
    return metric(m, "quarry:request_success_total{" + kLabel + ",finished_reason=\"abort\"}") >= 1 &&
           metric(m, running) == 0;
  })) << "the request of a client that hung up was not cancelled";

  // 2. One long request runs; with max_num_seqs 1 a second one waits and times out (503); a third
  // is over max_concurrent (429).
  std::atomic<int> long_status{0};
  std::thread long_one([&] {
    auto c = s.client();
    auto r = post(*c, "/v1/chat/completions", long_request());
    long_status = r ? r->status : -1;
  });
  ASSERT_TRUE(wait_metrics(s, [&](const auto& m) { return metric(m, running) == 1; }));
  std::thread waiting([&] {
    auto c = s.client();
    expect_error(post(*c, "/v1/chat/completions", chat("queued", 4)), 503, "server_error");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  {
    auto c = s.client();
    expect_error(post(*c, "/v1/chat/completions", chat("third", 4)), 429, "rate_limit_error");
  }
  waiting.join();
  long_one.join();
  EXPECT_EQ(long_status, 200);

  // 3. A plain (not streaming) client that hangs up while waiting: cancelled too.
  const double aborted = metric(scrape(s), "quarry:request_success_total{" + kLabel + ",finished_reason=\"abort\"}");
  {
    auto c = s.client();
    c->set_read_timeout(0, 300000);  // gives up after 0.3 s and closes the connection
    auto r = post(*c, "/v1/chat/completions", long_request());
    EXPECT_FALSE(r);
  }
  EXPECT_TRUE(wait_metrics(s, [&](const auto& m) {
    return metric(m, "quarry:request_success_total{" + kLabel + ",finished_reason=\"abort\"}") >= aborted + 1 &&
           metric(m, running) == 0;
  }));
  EXPECT_EQ(post(*s.client(), "/v1/chat/completions", chat("after", 4))->status, 200);
}

// ---------------------------------------------------------------- metrics

TEST(Serve, MetricsParseAsPrometheusText) {
  auto& s = shared_server();
  auto c = s.client();
  ASSERT_EQ(post(*c, "/v1/chat/completions", chat("Invoice 1", 8))->status, 200);
  ASSERT_EQ(post(*c, "/v1/chat/completions", chat("Invoice 1", 8))->status, 200);  // same prompt: prefix hits
  const auto r = c->Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  const auto m = parse_prometheus(r->body);
  for (const std::string h : {"quarry:time_to_first_token_seconds", "quarry:inter_token_latency_seconds",
                              "quarry:e2e_request_latency_seconds"}) {
    EXPECT_GE(metric(m, h + "_count{" + kLabel + "}"), 2) << h;
    EXPECT_EQ(metric(m, h + "_bucket{" + kLabel + ",le=\"+Inf\"}"), metric(m, h + "_count{" + kLabel + "}")) << h;
  }
  EXPECT_GT(metric(m, "quarry:prompt_tokens_total{" + kLabel + "}"), 0);
  EXPECT_GT(metric(m, "quarry:generation_tokens_total{" + kLabel + "}"), 0);
  EXPECT_GT(metric(m, "quarry:prefix_cache_hits_total{" + kLabel + "}"), 0);
  const double rate = metric(m, "quarry:prefix_cache_hit_rate{" + kLabel + "}");
  EXPECT_GT(rate, 0);
  EXPECT_LE(rate, 1);
  const double kv = metric(m, "quarry:kv_cache_usage_perc{" + kLabel + "}");
  EXPECT_GE(kv, 0);
  EXPECT_LE(kv, 1);
  metric(m, "quarry:num_requests_waiting{" + kLabel + "}");
  metric(m, "quarry:spec_decode_draft_acceptance_rate{" + kLabel + "}");
  EXPECT_GE(metric(m, "quarry:http_responses_total{" + kLabel + ",code=\"200\"}"), 2);
}

// ---------------------------------------------------------------- the official openai npm client

/// The `openai` npm package (v4) installed under the build tree; empty with the reason when npm cannot.
std::string npm_openai(std::string& why) {
  const auto dir = std::filesystem::path(QUARRY_BINARY_DIR) / "tests" / "serve" / "npm";
  if (std::filesystem::exists(dir / "node_modules" / "openai" / "package.json")) return dir.string();
  std::filesystem::create_directories(dir);
  if (!std::filesystem::exists(dir / "package.json")) std::ofstream(dir / "package.json") << R"({"private": true})" << "\n";
  const auto r = test_support::run_command("cd '" + dir.string() +
                                           "' && timeout 300 npm install --no-audit --no-fund --loglevel=error openai@4 2>&1");
  if (r.code != 0 || !std::filesystem::exists(dir / "node_modules" / "openai" / "package.json")) {
    why = "npm could not install openai@4 (exit " + std::to_string(r.code) + "): " + r.out.substr(0, 400);
    return {};
  }
  return dir.string();
}

TEST(ServeOpenAiNpm, ChatCompletionsCreatePlainStreamingJsonSchemaAndBadKey) {
  if (test_support::run_command("node --version").code != 0) GTEST_SKIP() << "node is not installed";
  std::string why;
  const std::string npm = npm_openai(why);
  if (npm.empty()) GTEST_SKIP() << why;
  ServeOptions o;
  o.api_key = "sk-quarry-test";
  TestServer s(o);
  const std::string prompt = "Invoice A-17 from Kovacs Kft, total 120.50 EUR";
  const auto r = test_support::run_command(
      "QUARRY_NPM_DIR='" + npm + "' QUARRY_BASE_URL='" + s.url() + "/v1' QUARRY_API_KEY='sk-quarry-test' QUARRY_MODEL='" +
      kModelName + "' QUARRY_PROMPT='" + prompt + "' QUARRY_SCHEMA='" + kInvoiceSchema.dump() + "' node '" +
      QUARRY_SOURCE_DIR + "/tests/serve/openai_client.cjs' 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const json out = json::parse(r.out.substr(r.out.rfind('{', r.out.find("\"plain\"")) ));
  const std::string expected = engine_text(chat(prompt), openai::Endpoint::chat_completions);

  EXPECT_EQ(out["plain"]["object"], "chat.completion");
  EXPECT_EQ(out["plain"]["model"], kModelName);
  EXPECT_EQ(out["plain"]["role"], "assistant");
  EXPECT_EQ(out["plain"]["content"], expected);
  EXPECT_GT(out["plain"]["usage"]["completion_tokens"].get<int>(), 0);

  EXPECT_EQ(out["stream"]["content"], expected);
  EXPECT_EQ(out["stream"]["role"], "assistant");
  EXPECT_EQ(out["stream"]["finish_reason"], out["plain"]["finish_reason"]);
  EXPECT_EQ(out["stream"]["ids"], 1);
  ASSERT_TRUE(out["stream"]["usage"].is_object()) << r.out;
  EXPECT_EQ(out["stream"]["usage"]["completion_tokens"], out["plain"]["usage"]["completion_tokens"]);
  EXPECT_EQ(out["stream"]["usage"]["prompt_tokens"], out["plain"]["usage"]["prompt_tokens"]);

  schemas::Validator v(kInvoiceSchema, "invoice");
  EXPECT_EQ(out["json_schema"]["finish_reason"], "stop");
  const json parsed = json::parse(out["json_schema"]["content"].get<std::string>());
  EXPECT_TRUE(v.validate(parsed).empty()) << parsed.dump();
  EXPECT_EQ(out["json_schema_stream"]["content"], out["json_schema"]["content"]);
  json body = with_schema(chat(prompt));
  EXPECT_EQ(out["json_schema"]["content"], engine_text(body, openai::Endpoint::chat_completions));

  EXPECT_EQ(out["models"], json::array({kModelName}));
  EXPECT_EQ(out["bad_key"]["thrown"], true);
  EXPECT_EQ(out["bad_key"]["authentication_error"], true) << out["bad_key"].dump();
  EXPECT_EQ(out["bad_key"]["status"], 401);
  EXPECT_EQ(out["bad_key"]["code"], "invalid_api_key");
}

TEST(Serve, MtpDraftsAreCountedAndLossless) {
  TestServer s({}, 8, /*mtp_depth=*/2);
  auto c = s.client();
  const json body = chat("Invoice A-17 total 120 EUR", 40);
  const auto r = post(*c, "/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // Drafting does not change greedy output: the same text as the engine without drafts.
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], engine_text(body, openai::Endpoint::chat_completions));
  const auto m = scrape(s);
  const double drafts = metric(m, "quarry:spec_decode_num_draft_tokens_total{" + kLabel + "}");
  const double accepted = metric(m, "quarry:spec_decode_num_accepted_tokens_total{" + kLabel + "}");
  EXPECT_GT(drafts, 0);
  EXPECT_LE(accepted, drafts);
  EXPECT_DOUBLE_EQ(metric(m, "quarry:spec_decode_draft_acceptance_rate{" + kLabel + "}"), accepted / drafts);
}

// ---------------------------------------------------------------- the program

TEST(Serve, QuarryServeStopsOnSigterm) {
  const auto help = test_support::run_quarry("serve --help");
  EXPECT_EQ(help.code, 0);
  for (const char* opt : {"--host", "--port", "--model", "--device", "--api-key", "--max-body-mb", "--max-concurrent",
                          "--queue-timeout", "--max-prompt-tokens"})
    EXPECT_NE(help.out.find(opt), std::string::npos) << opt;

  // A free port: bind port 0, read it, let it go.
  int port = 0;
  {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
  }
  const std::string log = std::string(QUARRY_BINARY_DIR) + "/test_tmp/serve_sigterm.log";
  std::filesystem::create_directories(std::filesystem::path(log).parent_path());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string bin = std::string(QUARRY_BINARY_DIR) + "/quarry";
    const std::string p = std::to_string(port);
    if (!std::freopen(log.c_str(), "w", stderr)) _exit(126);
    execl(bin.c_str(), bin.c_str(), "serve", "--port", p.c_str(), "--device", "cpu", "--threads", "1", nullptr);
    _exit(127);
  }
  httplib::Client c("127.0.0.1", port);
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    auto r = c.Get("/health");
    up = r && r->status == 200;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(up) << "quarry serve did not answer /health";
  if (up) {
    auto r = c.Post("/v1/chat/completions", chat("Invoice 9", 4).dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 100 && done == 0; ++i) {
    done = waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "quarry serve did not stop within 5 s of SIGTERM";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace quarry::serve
