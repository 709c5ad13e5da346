// `quarry run` on an OpenAI Batch file, end to end: requests with 5 response_format schemas (and
// prompts sharing a prefix per schema), a text request, a completions request, and lines that are not
// requests; killed with -9 halfway, resumed, then run again. Checks exactly one output line per
// request line in the input's order, in the OpenAI Batch output format, every JSON response valid for
// its request's schema (the project's validator), error lines naming their line, and a third run that
// changes nothing. QUARRY_BATCH_REQUESTS sets the number of schema requests (default 60);
// QUARRY_BATCH_ONLY_SCHEMAS=1 leaves out the other lines (a file of schema requests only).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include "schemas/validate.hpp"
#include "tests/run/run_support.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace quarry::test_run;

const char* const k_schemas[5] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"],"additionalProperties":false})",
    R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},"shade":{"enum":["light","dark"]}},"required":["color","shade"],"additionalProperties":false})",
    R"({"type":"object","properties":{"invoice_number":{"type":"string","maxLength":16},"currency":{"enum":["EUR","HUF","USD"]},"paid":{"type":"boolean"}},"required":["invoice_number","currency","paid"],"additionalProperties":false})",
    R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","maxLength":12},"minItems":1,"maxItems":3}},"required":["tags"],"additionalProperties":false})",
    R"({"type":"object","properties":{"answer":{"type":"boolean"},"reason":{"enum":["stated","implied","unknown"]}},"required":["answer","reason"],"additionalProperties":false})"};

const char* const k_system[5] = {
    "You extract people from short notes. Answer with one JSON object with the person's name and age in years, "
    "nothing else. Use the name as written in the note.",
    "You classify colour descriptions. Answer with one JSON object naming the base colour (red, green or blue) "
    "and whether the shade is light or dark, nothing else.",
    "You read invoice snippets. Answer with one JSON object with the invoice number as printed, the currency code "
    "and whether the invoice is marked as paid, nothing else.",
    "You tag short product descriptions. Answer with one JSON object with one to three short lowercase tags, "
    "nothing else.",
    "You answer yes or no questions about a sentence. Answer with one JSON object with the answer as a boolean and "
    "whether it is stated, implied or unknown, nothing else."};

std::string user_text(int kind, std::size_t i) {
  static const char* names[] = {"Anna Kovacs", "Peter Nagy", "Maria Schmidt", "John Smith", "Eva Toth"};
  static const char* colours[] = {"pale sky", "deep forest", "crimson", "light mint", "navy"};
  switch (kind) {
    case 0: return std::string(names[i % 5]) + " is " + std::to_string(20 + i % 50) + " years old.";
    case 1: return std::string("The wall is painted ") + colours[i % 5] + ".";
    case 2: return "Invoice no. INV-" + std::to_string(1000 + i) + ", total 120.00 EUR, " + (i % 2 ? "paid." : "due.");
    case 3: return "A " + std::string(i % 2 ? "red" : "steel") + " kettle, 1.7 litres, item " + std::to_string(i) + ".";
    default: return "The shop opens at " + std::to_string(7 + i % 5) + " am. Is it open at 9 am?";
  }
}

json chat_request(const std::string& id, int kind, std::size_t i) {
  json body = {{"model", "quarry-extract-11m"},
               {"messages", json::array({{{"role", "system"}, {"content", k_system[kind]}},
                                         {{"role", "user"}, {"content", user_text(kind, i)}}})},
               {"max_completion_tokens", 96},
               {"temperature", 0},
               {"response_format",
                {{"type", "json_schema"},
                 {"json_schema", {{"name", "s" + std::to_string(kind)}, {"strict", true}, {"schema", json::parse(k_schemas[kind])}}}}}};
  return {{"custom_id", id}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", body}};
}

/// What a line of the input file is expected to give.
struct Expect {
  std::optional<std::string> custom_id;
  int kind = -1;            ///< 0..4: a schema request; -1 text; -2 json_object; -3 a line error; -4 a 400
  std::size_t line = 0;
  std::string param = {};   ///< -4: the member the 400 names
};

std::size_t requests_from_env() {
  const char* e = std::getenv("QUARRY_BATCH_REQUESTS");
  return e && std::atoi(e) > 0 ? static_cast<std::size_t>(std::atoi(e)) : 60;
}

bool only_schemas() {
  const char* e = std::getenv("QUARRY_BATCH_ONLY_SCHEMAS");
  return e && std::string(e) == "1";
}

std::vector<Expect> make_batch(const fs::path& file, std::size_t n, bool extras) {
  std::ofstream out(file, std::ios::binary);
  std::vector<Expect> ex;
  std::size_t line = 0;
  const auto put = [&](const std::string& text, Expect e) {
    out << text << "\n";
    e.line = ++line;
    ex.push_back(e);
  };
  for (std::size_t i = 0; i < n; ++i) {
    const int kind = static_cast<int>(i % 5);
    const std::string id = "req-" + std::to_string(i);
    put(chat_request(id, kind, i).dump(), Expect{id, kind});
    if (!extras) continue;
    if (i == 3) {
      out << "\n";  // a blank line: skipped, but counted in the line numbers
      ++line;
    }
    if (i == 7) put("{this is not json", Expect{std::nullopt, -3});
    if (i == 9) put(chat_request("req-2", 1, 2).dump(), Expect{"req-2", -3});  // a duplicate custom_id
    if (i == 11) {
      json r = chat_request("bad-temp", 0, i);
      r["body"]["temperature"] = 5;
      put(r.dump(), Expect{"bad-temp", -4, 0, "temperature"});
      // A schema the validator refuses (a backreference RE2 cannot run in linear time): refused before
      // generation, like a body the API would refuse.
      json bs = chat_request("bad-schema", 0, i);
      bs["body"]["response_format"]["json_schema"]["schema"] = {{"type", "string"}, {"pattern", "(a)\\1"}};
      put(bs.dump(), Expect{"bad-schema", -4, 0, "response_format.json_schema.schema"});
      put(R"({"custom_id": "emb", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}})",
          Expect{"emb", -3});
    }
    if (i == 13) {
      json t = {{"custom_id", "text-1"}, {"url", "/v1/chat/completions"},
                {"body", {{"model", "quarry-extract-11m"}, {"max_tokens", 8}, {"temperature", 0},
                          {"messages", json::array({{{"role", "user"}, {"content", "Say hello."}}})}}}};
      put(t.dump(), Expect{"text-1", -1});
      json c = {{"custom_id", "cmpl-1"}, {"method", "POST"}, {"url", "/v1/completions"},
                {"body", {{"model", "quarry-extract-11m"}, {"max_tokens", 32}, {"temperature", 0}, {"prompt", "Invoice: "},
                          {"response_format", {{"type", "json_object"}}}}}};
      put(c.dump(), Expect{"cmpl-1", -2});
    }
  }
  return ex;
}

std::vector<json> read_lines(const fs::path& p) {
  std::vector<json> out;
  std::ifstream in(p, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

std::vector<std::string> args_for(const fs::path& batch, const fs::path& out) {
  return {"run", batch.string(), "-o", out.string(), "--progress", "none", "--threads", "2", "--max-inflight", "8"};
}

TEST(RunBatch, KillNineHalfwayResumeExactlyOnceSchemaValid) {
  Scratch s("batch_e2e");
  const std::size_t n = requests_from_env();
  const auto batch = s.dir / "requests.jsonl";
  const bool extras = !only_schemas();
  const auto expect = make_batch(batch, n, extras);
  const auto out = s.dir / "out";

  // Killed with -9 once half of the request lines have their record.
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const pid_t pid = spawn_quarry(args_for(batch, out), s.dir / "log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_lines(pid, out / "results.jsonl", expect.size() / 2, std::chrono::seconds(600)))
      << read_file(s.dir / "log");
  ASSERT_FALSE(exited(pid)) << "the run finished before it could be killed: " << read_file(s.dir / "log");
  ::kill(pid, SIGKILL);
  ASSERT_EQ(wait_child(pid), 128 + SIGKILL);
  const std::size_t before = count_lines(out / "results.jsonl");
  EXPECT_LT(before, expect.size());
  const double killed_after = since(t0);


  // Resumed: the task is chosen from the file (no --task), lines already done are skipped.
  const auto t1 = std::chrono::steady_clock::now();
  const int rc = run_quarry_args(args_for(batch, out), s.dir / "log2");
  std::printf("batch of %zu lines: killed after %.1f s with %zu records written; the resumed run took %.1f s\n",
              expect.size(), killed_after, before, since(t1));
  const std::string log = read_file(s.dir / "log2");
  EXPECT_EQ(rc, extras ? 2 : 0) << log;  // the bad lines are error records
  EXPECT_NE(log.find(std::to_string(expect.size() - before) + " record(s) written"), std::string::npos)
      << before << " were done before the kill: " << log;

  // results.jsonl: exactly one record per request line (none written twice).
  std::map<std::string, json> by_key;
  for (const auto& r : read_lines(out / "results.jsonl")) {
    ASSERT_TRUE(r.contains("ledger_key") && r.contains("output") && r.contains("line")) << r.dump();
    EXPECT_TRUE(by_key.emplace(r["ledger_key"].get<std::string>(), r).second) << "written twice: " << r["ledger_key"];
  }
  EXPECT_EQ(by_key.size(), expect.size());

  // output.jsonl: one line per request line, in the file's order, in the OpenAI Batch output format.
  const auto lines = read_lines(out / "output.jsonl");
  ASSERT_EQ(lines.size(), expect.size());
  std::vector<std::unique_ptr<quarry::schemas::Validator>> validators;
  for (const char* sc : k_schemas) validators.push_back(std::make_unique<quarry::schemas::Validator>(json::parse(sc), "s"));
  std::size_t valid = 0, cached = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    const auto& e = expect[i];
    SCOPED_TRACE("line " + std::to_string(e.line) + ": " + l.dump());
    ASSERT_TRUE(l.contains("id") && l.contains("custom_id") && l.contains("response") && l.contains("error"));
    EXPECT_EQ(l["id"].get<std::string>().rfind("batch_req_", 0), 0u);
    EXPECT_EQ(l["custom_id"], e.custom_id ? json(*e.custom_id) : json());
    if (e.kind == -3) {
      EXPECT_TRUE(l["response"].is_null());
      EXPECT_NE(l["error"]["message"].get<std::string>().find("line " + std::to_string(e.line) + ": "), std::string::npos);
      continue;
    }
    EXPECT_TRUE(l["error"].is_null());
    const auto& resp = l["response"];
    EXPECT_EQ(resp["request_id"].get<std::string>().rfind("req_", 0), 0u);
    if (e.kind == -4) {
      EXPECT_EQ(resp["status_code"], 400);
      EXPECT_EQ(resp["body"]["error"]["param"], e.param);
      EXPECT_NE(resp["body"]["error"]["message"].get<std::string>().find("line " + std::to_string(e.line)),
                std::string::npos);
      continue;
    }
    EXPECT_EQ(resp["status_code"], 200);
    const auto& body = resp["body"];
    EXPECT_GT(body["usage"]["prompt_tokens"].get<std::size_t>(), 0u);
    EXPECT_GT(body["usage"]["completion_tokens"].get<std::size_t>(), 0u);
    EXPECT_EQ(body["usage"]["total_tokens"].get<std::size_t>(),
              body["usage"]["prompt_tokens"].get<std::size_t>() + body["usage"]["completion_tokens"].get<std::size_t>());
    cached += body["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::size_t>();
    EXPECT_EQ(body["model"], "quarry-extract-11m");
    if (e.kind == -2) {
      // json_object: an object, or (cut at max_tokens) an `invalid` record whose output line is still
      // the 200 response with the text, as OpenAI answers.
      EXPECT_EQ(body["object"], "text_completion");
      const auto& rec = by_key.at(*e.custom_id);
      const json data = json::parse(body["choices"][0]["text"].get<std::string>(), nullptr, false);
      if (body["choices"][0]["finish_reason"] == "length") {
        EXPECT_EQ(rec["status"], "invalid");
        EXPECT_EQ(rec["errors"][0]["rule"], "json");
      } else {
        EXPECT_TRUE(data.is_object());
        EXPECT_EQ(rec["status"], "ok");
      }
      continue;
    }
    EXPECT_EQ(body["object"], "chat.completion");
    EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
    const std::string content = body["choices"][0]["message"]["content"];
    const auto& rec = by_key.at(*e.custom_id);
    if (e.kind == -1) {
      EXPECT_EQ(rec["status"], "ok");  // text: nothing to validate
      continue;
    }
    const json data = json::parse(content, nullptr, false);
    ASSERT_FALSE(data.is_discarded()) << content;
    const auto violations = validators[static_cast<std::size_t>(e.kind)]->validate(data);
    EXPECT_TRUE(violations.empty()) << content << ": " << (violations.empty() ? "" : violations[0].message);
    EXPECT_EQ(rec["status"], "ok");
    EXPECT_EQ(rec["data"], data);
    if (violations.empty()) ++valid;
  }
  EXPECT_EQ(valid, n);
  std::printf("output.jsonl: %zu lines, %zu schema responses valid, %zu cached prompt tokens\n", lines.size(), valid,
              cached);
  EXPECT_GT(cached, 0u) << "requests sharing a system prompt share the prefix cache";

  // A third run: everything is done; output.jsonl is rebuilt byte for byte.
  const std::string output_before = read_file(out / "output.jsonl");
  EXPECT_EQ(run_quarry_args(args_for(batch, out), s.dir / "log3"), extras ? 2 : 0) << read_file(s.dir / "log3");
  EXPECT_NE(read_file(s.dir / "log3").find("0 record(s) written"), std::string::npos) << read_file(s.dir / "log3");
  EXPECT_EQ(read_file(out / "output.jsonl"), output_before);
  EXPECT_EQ(count_lines(out / "results.jsonl"), expect.size());
  const json report = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report["job"]["task"], "batch");
  EXPECT_EQ(report["records"].get<std::size_t>(), expect.size());
}

TEST(RunBatch, ASetupErrorForABatchInputThatIsNotAFile) {
  Scratch s("batch_setup");
  const int rc = run_quarry_args({"run", s.dir.string(), "--task", "batch", "-o", (s.dir / "out").string()}, s.dir / "log");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(read_file(s.dir / "log").find("a batch input must be a regular file"), std::string::npos)
      << read_file(s.dir / "log");
}

}  // namespace
