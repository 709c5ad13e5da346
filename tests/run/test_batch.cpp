// The batch task's pieces: the OpenAI Batch line envelope, batch-file detection, the scanner (line
// numbers, blank lines, duplicate custom_ids), the wire form of batch messages, and the ledger repair
// of batch records (keyed by custom_id, not by source).
#include <gtest/gtest.h>

#include <fstream>

#include "pipeline/openai/batch_format.hpp"
#include "pipeline/run/batch.hpp"
#include "pipeline/run/job.hpp"
#include "pipeline/run/ledger.hpp"
#include "pipeline/run/messages.hpp"
#include "pipeline/run/records.hpp"
#include "tests/run/run_support.hpp"

namespace quarry::run {
namespace {

namespace fs = std::filesystem;
using quarry::test_run::Scratch;
using ojson = nlohmann::ordered_json;

const char* k_chat_line =
    R"({"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}})";

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

TEST(BatchLine, ARequestLine) {
  const auto l = openai::parse_batch_line(k_chat_line, 3);
  EXPECT_TRUE(l.problem.empty()) << l.problem;
  EXPECT_EQ(l.number, 3u);
  EXPECT_EQ(l.custom_id, std::optional<std::string>("r1"));
  EXPECT_EQ(l.url, "/v1/chat/completions");
  EXPECT_EQ(l.body["model"], "m");
}

TEST(BatchLine, LinesThatAreNotRequestsNameTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"{not json", "line 7: not valid JSON"},
      {"[1, 2]", "line 7: not a JSON object"},
      {R"({"url": "/v1/completions", "body": {}})", "line 7: 'custom_id' is required"},
      {R"({"custom_id": "", "url": "/v1/completions", "body": {}})", "line 7: 'custom_id' is required"},
      {R"({"custom_id": "a", "url": "/v1/embeddings", "body": {}})", "line 7: url \"/v1/embeddings\" is not supported"},
      {R"({"custom_id": "a", "method": "GET", "url": "/v1/completions", "body": {}})", "line 7: 'method' must be"},
      {R"({"custom_id": "a", "url": "/v1/completions"})", "line 7: 'body' is required"},
      {R"({"custom_id": "a", "url": "/v1/completions", "body": []})", "line 7: 'body' is required"},
      {R"({"custom_id": "a", "url": "/v1/completions", "body": {}, "extra": 1})", "line 7: unknown member 'extra'"},
  };
  for (const auto& [text, want] : cases) {
    const auto l = openai::parse_batch_line(text, 7);
    EXPECT_EQ(l.problem.rfind(want, 0), 0u) << text << " -> " << l.problem;
  }
  // The custom_id is kept when there is one, so that the error line can name it.
  EXPECT_EQ(openai::parse_batch_line(R"({"custom_id": "a", "url": "/x", "body": {}})", 1).custom_id,
            std::optional<std::string>("a"));
}

TEST(BatchLine, OutputLinesHaveTheOpenAiShape) {
  const auto ok = openai::batch_response_line("r1", 200, ojson{{"object", "chat.completion"}});
  EXPECT_EQ(ok["id"].get<std::string>().rfind("batch_req_", 0), 0u);
  EXPECT_EQ(ok["custom_id"], "r1");
  EXPECT_EQ(ok["response"]["status_code"], 200);
  EXPECT_EQ(ok["response"]["request_id"].get<std::string>().rfind("req_", 0), 0u);
  EXPECT_EQ(ok["response"]["body"]["object"], "chat.completion");
  EXPECT_TRUE(ok["error"].is_null());
  const auto bad = openai::batch_error_line(std::nullopt, "invalid_request", "line 2: not valid JSON");
  EXPECT_TRUE(bad["custom_id"].is_null());
  EXPECT_TRUE(bad["response"].is_null());
  EXPECT_EQ(bad["error"]["message"], "line 2: not valid JSON");
}

TEST(BatchFile, DetectedByItsFirstNonBlankLine) {
  Scratch s("batch_detect");
  write(s.dir / "a.jsonl", std::string("\n  \n") + k_chat_line + "\n");
  write(s.dir / "b.jsonl", "{\"source\": \"x\"}\n");
  write(s.dir / "c.json", std::string(k_chat_line) + "\n");
  write(s.dir / "d.jsonl", "");
  write(s.dir / "e.jsonl", std::string(2 << 20, 'x'));  // one line longer than what is read
  EXPECT_TRUE(openai::looks_like_batch_file(s.dir / "a.jsonl"));
  EXPECT_FALSE(openai::looks_like_batch_file(s.dir / "b.jsonl"));
  EXPECT_FALSE(openai::looks_like_batch_file(s.dir / "c.json"));
  EXPECT_FALSE(openai::looks_like_batch_file(s.dir / "d.jsonl"));
  EXPECT_FALSE(openai::looks_like_batch_file(s.dir / "e.jsonl"));
  EXPECT_FALSE(openai::looks_like_batch_file(s.dir / "missing.jsonl"));
  EXPECT_FALSE(openai::looks_like_batch_file(s.dir));
}

TEST(BatchScanner, LineNumbersBlankLinesAndDuplicates) {
  Scratch s("batch_scan");
  const std::string dup = R"({"custom_id": "r1", "url": "/v1/completions", "body": {"model": "m", "prompt": "x"}})";
  write(s.dir / "a.jsonl", std::string(k_chat_line) + "\n\n{oops\n" + dup + "\n" + k_chat_line);  // no final newline
  write(s.dir / "b.jsonl", dup + "\n");
  BatchScanner scan;
  scan.open(s.dir / "a.jsonl");
  std::vector<BatchItem> items;
  while (auto it = scan.next()) items.push_back(*it);
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].line.number, 1u);
  EXPECT_EQ(items[0].key, "r1");
  EXPECT_TRUE(items[0].line.problem.empty());
  EXPECT_EQ(items[1].line.number, 3u);  // the blank line 2 is skipped but counted
  EXPECT_EQ(items[1].line.problem, "line 3: not valid JSON");
  EXPECT_EQ(items[2].line.number, 4u);
  EXPECT_EQ(items[2].line.problem, "line 4: custom_id \"r1\" is a duplicate (custom_ids must be unique in a batch)");
  EXPECT_NE(items[2].key, "r1");
  EXPECT_NE(items[2].key, items[1].key);
  EXPECT_EQ(items[3].line.number, 5u);
  EXPECT_FALSE(items[3].line.problem.empty());  // the first line again: a duplicate too
  EXPECT_EQ(items[0].sha256, items[3].sha256);  // the same bytes
  EXPECT_EQ(items[0].sha256, sha256_hex(k_chat_line));
  // Duplicates are rejected across the files of one scan.
  scan.open(s.dir / "b.jsonl");
  const auto b = scan.next();
  ASSERT_TRUE(b);
  EXPECT_NE(b->line.problem.find("duplicate"), std::string::npos);
  EXPECT_FALSE(scan.next());
}

TEST(BatchScanner, ALineLongerThanTheLimitIsAnErrorAndTheNextLineIsRead) {
  Scratch s("batch_scan_long");
  const std::string big = "{\"custom_id\": \"" + std::string(300000, 'x') + "\"}";
  const std::string medium = std::string(2000, ' ') + k_chat_line;  // over the limit, within one read
  write(s.dir / "a.jsonl", big + "\n" + k_chat_line + "\n" + big + "\n" + medium + "\n" + medium);
  BatchScanner scan(1000);
  scan.open(s.dir / "a.jsonl");
  const auto a = scan.next();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->line.problem, "line 1: longer than the limit of 1000 bytes");
  const auto b = scan.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->line.number, 2u);
  EXPECT_TRUE(b->line.problem.empty()) << b->line.problem;
  EXPECT_EQ(b->key, "r1");
  const auto c = scan.next();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->line.number, 3u);
  EXPECT_FALSE(c->line.problem.empty());
  EXPECT_NE(c->key, a->key);
  for (std::size_t number : {4u, 5u}) {
    const auto d = scan.next();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->line.number, number);
    EXPECT_EQ(d->line.problem, "line " + std::to_string(number) + ": longer than the limit of 1000 bytes");
  }
  EXPECT_FALSE(scan.next());
}

TEST(BatchScanner, RefusesWhatIsNotARegularFile) {
  Scratch s("batch_scan_dir");
  BatchScanner scan;
  EXPECT_THROW(scan.open(s.dir), std::runtime_error);
  EXPECT_THROW(scan.open(s.dir / "missing.jsonl"), std::runtime_error);
}

TEST(BatchJob, TheTaskIsChosenFromTheFileOrGiven) {
  Scratch s("batch_job");
  write(s.dir / "requests.jsonl", std::string(k_chat_line) + "\n");
  write(s.dir / "other.jsonl", "{\"text\": \"not a request\"}\n");
  JobSpec job;
  job.inputs = {(s.dir / "requests.jsonl").string()};
  job.output = s.dir / "out";
  resolve_defaults(job);
  EXPECT_EQ(job.task, Task::batch);
  JobSpec other;
  other.inputs = {(s.dir / "other.jsonl").string()};
  other.output = s.dir / "out";
  resolve_defaults(other);
  EXPECT_EQ(other.task, Task::kie);
  JobSpec given;  // --task kie on a batch file: the task given wins
  given.inputs = job.inputs;
  given.output = s.dir / "out";
  given.task_set = true;
  resolve_defaults(given);
  EXPECT_EQ(given.task, Task::kie);
  JobSpec folder;
  folder.inputs = {s.dir.string()};
  folder.output = s.dir / "out";
  folder.task = Task::batch;
  folder.task_set = true;
  try {
    resolve_defaults(folder);
    ADD_FAILURE() << "a folder is not a batch input";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a batch input must be a regular file"), std::string::npos) << e.what();
  }
  write(s.dir / "job.toml", "inputs = [\"requests.jsonl\"]\noutput = \"out\"\ntask = \"batch\"\n");
  const auto from_file = load_job_file(s.dir / "job.toml");
  EXPECT_EQ(from_file.task, Task::batch);
  EXPECT_TRUE(from_file.task_set);
  EXPECT_STREQ(task_name(Task::batch), "batch");
}

TEST(BatchMessages, RoundTrip) {
  ModelTaskMsg t;
  t.subject.key = "r1";
  t.subject.source = "batch.jsonl";
  t.prompt = {1, 2, 3};
  t.max_tokens = 9;
  BatchSpec b;
  b.custom_id = "r1";
  b.line = 4;
  b.url = "/v1/completions";
  b.model = "m";
  b.format = 2;
  b.schema_text = R"({"type":"object"})";
  b.temperature = 0.5f;
  b.top_p = 0.9f;
  b.top_k = 5;
  b.seed = 42;
  b.stop = {"\n"};
  t.batch = b;
  GeneratedMsg g;
  g.task = t;
  g.text = "{}";
  g.bad_request = true;
  g.response = ojson{{"object", "text_completion"}};
  const auto gb = encode(Message(g));
  const auto back = std::get<GeneratedMsg>(decode(gb.data(), gb.size()));
  ASSERT_TRUE(back.task.batch);
  EXPECT_EQ(back.task.batch->custom_id, "r1");
  EXPECT_EQ(back.task.batch->line, 4u);
  EXPECT_EQ(back.task.batch->format, 2);
  EXPECT_EQ(back.task.batch->schema_text, b.schema_text);
  EXPECT_EQ(back.task.batch->top_k, 5u);
  EXPECT_EQ(back.task.batch->seed, std::optional<std::uint64_t>(42));
  EXPECT_EQ(back.task.batch->stop, b.stop);
  EXPECT_FLOAT_EQ(back.task.batch->top_p, 0.9f);
  EXPECT_TRUE(back.bad_request);
  EXPECT_EQ(back.response["object"], "text_completion");
  t.batch.reset();
  const auto bytes = encode(Message(t));
  EXPECT_FALSE(std::get<ModelTaskMsg>(decode(bytes.data(), bytes.size())).batch);

  BatchRequestMsg r;
  r.subject.key = "r9";
  r.line = 12;
  r.custom_id = "r9";
  r.url = "/v1/chat/completions";
  r.body = R"({"model":"m"})";
  const auto rb = encode(Message(r));
  const auto r2 = std::get<BatchRequestMsg>(decode(rb.data(), rb.size()));
  EXPECT_EQ(r2.subject.key, "r9");
  EXPECT_EQ(r2.line, 12u);
  EXPECT_EQ(r2.body, r.body);
}

TEST(BatchLedger, RepairKeysBatchRecordsByTheirLedgerKey) {
  Scratch s("batch_ledger");
  Subject subj;
  subj.key = "req-1";
  subj.source = "batch.jsonl";
  subj.sha256 = "abc";
  const auto rec = batch_record(make_record(subj, "ok", "model", nullptr, ojson::array(), stats_without_model(subj, 1)),
                                2, std::string("req-1"), openai::batch_response_line("req-1", 200, ojson::object()));
  EXPECT_EQ(rec.key, "req-1");
  EXPECT_EQ(rec.record["ledger_key"], "req-1");
  EXPECT_EQ(rec.record["line"], 2);
  {
    // A line appended without its ledger row, as a kill -9 between the two steps leaves it.
    Ledger ledger(s.dir);
    std::ofstream out(s.dir / Ledger::results_name, std::ios::binary | std::ios::app);
    out << rec.record.dump() << "\n";
  }
  Ledger ledger(s.dir);
  EXPECT_EQ(ledger.recovery().recovered_lines, 1u);
  EXPECT_TRUE(ledger.is_done("req-1", "abc"));
  EXPECT_FALSE(ledger.is_done("batch.jsonl", "abc"));
}

}  // namespace
}  // namespace quarry::run
